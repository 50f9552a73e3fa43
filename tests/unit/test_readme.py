"""README.md stays true: its two commands (every configuration key is checked in docs/configuration.md)."""

from __future__ import annotations

import os

from tests.support import ROOT


def readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def test_readme_opens_with_the_demo_and_test_commands() -> None:
    head = readme()[:1500]
    assert "pip install -e '.[embedded]' && pgbus-demo" in head
    assert "pip install -e '.[test]' && python -m pytest" in head


def test_ci_runs_the_readme_test_command() -> None:
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    assert "pip install -q -e '.[test]'" in ci and "python -m pytest" in ci
