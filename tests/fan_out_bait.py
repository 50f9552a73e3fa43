"""Never imported by the test suite: tests/db/test_fan_out_functions.py names a function in it as a
fan-out child's function and checks that the worker refuses the name without importing this
module (importing a module runs its code)."""

from __future__ import annotations

import os


def bait(path: str) -> str:
    """What an attacker would want run: makes a directory."""
    os.makedirs(path)
    return path
