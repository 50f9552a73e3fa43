"""Job functions of the plain RQ chain baseline (importable by ``rq worker`` with PYTHONPATH set)."""

from __future__ import annotations


def noop(*_args: object) -> None:
    """The baseline's step: does nothing, like FiveNoop's steps."""
