"""Fan-out functions in a module that declares no workflow: a worker runs them only when
PGBUS_IMPORT names this module (tests/db/test_fan_out_functions.py)."""

from __future__ import annotations


def shout(text: str) -> str:
    return text.upper()
