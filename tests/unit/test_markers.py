"""Every test in tests/browser carries the ``browser`` marker and every test in tests/processes the
``slow`` marker, so that the quick lane (``pytest -m "not slow and not browser"``) leaves them out.

The root conftest adds these markers by folder; this test collects the suite in a subprocess (so it
holds whether it runs alone or with the others) and fails on a test of those folders the quick lane
would still select. (The conftest's autouse guard fails any other test that starts a process without
``slow`` or ``browser``.) And no test module imports another: what they share is in tests/support.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.slow  # it starts a process: a second collection of the suite

FOLDERS = {"tests/browser": "browser", "tests/processes": "slow"}


def selected(folder: str, expression: str, basetemp: Path) -> list[str]:
    """The node ids of ``folder`` that ``-m expression`` selects."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    # --basetemp: the inner session leaves pytest's temporary root (and the servers in it) alone.
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=", "--basetemp", str(basetemp), "-m", expression, folder],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: nothing selected
    return [line for line in done.stdout.splitlines() if "::" in line]


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_every_test_of_the_folder_carries_its_marker(folder: str, tmp_path: Path) -> None:
    assert selected(folder, "", tmp_path / "all") != [], f"{folder} has no tests?"
    unmarked = selected(folder, f"not {FOLDERS[folder]}", tmp_path / "unmarked")
    assert unmarked == [], f"tests in {folder} without the {FOLDERS[folder]} marker: {unmarked}"


def test_the_quick_lane_selects_no_browser_or_process_test(tmp_path: Path) -> None:
    quick = selected("tests", "not slow and not browser", tmp_path / "quick")
    assert quick, "the quick lane selects nothing?"
    stray = [node for node in quick if node.startswith(tuple(f"{f}/" for f in FOLDERS))]
    assert stray == [], stray


UNMARKED = '''
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def test_starts_a_process_unmarked() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.slow
def test_starts_a_process_marked_slow() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)
'''


def test_the_guard_fails_a_test_that_starts_a_process_unmarked(tmp_path: Path) -> None:
    """The root conftest's guard, run on a copy of it: the unmarked test fails, the marked one passes."""
    (tmp_path / "conftest.py").write_text((Path(ROOT) / "tests" / "conftest.py").read_text())
    (tmp_path / "test_guarded.py").write_text(UNMARKED)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--basetemp", str(tmp_path / "inner"), "-c", os.devnull,
                           "-o", "markers=slow: starts processes", "--rootdir", str(tmp_path),
                           str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "test_starts_a_process_unmarked started a process" in out and "not marked slow" in out, out
    assert "2 passed, 1 error" in out, out  # the unmarked test's call passes; its teardown fails it


def test_no_test_module_imports_another() -> None:
    """What test modules share lives in tests/support or a conftest, never in another test module."""
    found = []
    for path in sorted((Path(ROOT) / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(alias.name for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            if any(part.startswith("test_") or part == "conftest" for name in names for part in name.split(".")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], found
