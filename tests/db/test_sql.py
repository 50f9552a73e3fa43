"""The named statements of ``pgbus_flask/sql/``: each one PostgreSQL accepts on a migrated database,
each one the package runs, and the status lists written in SQL agree with ``pgbus_flask/states.py``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import psycopg
import pytest
from psycopg import pq

import pgbus_flask
from pgbus_flask import attention, db, insights, states
from pgbus_flask.sql import CATALOG, NOT_STATEMENTS, parse

PACKAGE = Path(pgbus_flask.__file__).parent
SOURCES = [*sorted(PACKAGE.rglob("*.py")), *sorted((PACKAGE.parent / "worker").rglob("*.py"))]
_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)s|%s")


def numbered(text: str) -> str:
    """``text`` with psycopg's placeholders as PostgreSQL's ($1, $2 ...; a name keeps its number)."""
    if not _PLACEHOLDER.search(text.replace("%%", "")):
        return text  # no parameters: psycopg sends the text as it is
    numbers: dict[str, int] = {}
    count = 0

    def number(match: re.Match[str]) -> str:
        nonlocal count
        if match.group(0) == "%%":
            return "%"
        name = match.group(1)
        if name is None or name not in numbers:
            count += 1
            if name is not None:
                numbers[name] = count
            return f"${count}"
        return f"${numbers[name]}"

    return _PLACEHOLDER.sub(number, text)


def test_every_named_statement_prepares(pg_url: str) -> None:
    """PostgreSQL parses and plans each statement against the migrated schema (its tables, columns,
    functions and parameter types), without running it."""
    assert CATALOG, "no statement was loaded from pgbus_flask/sql/*.sql"
    refused = []
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for name, (_about, text) in sorted(CATALOG.items()):
            result = conn.pgconn.prepare(b"", numbered(text).encode())
            if result.status != pq.ExecStatus.COMMAND_OK:
                message = (result.error_message or b"").decode(errors="replace").strip()
                refused.append(f"{name}: {message}")
    assert not refused, "statements PostgreSQL refuses:\n" + "\n".join(refused)


def _strings_and_calls(path: Path) -> tuple[set[str], list[tuple[int, str]]]:
    """The string constants of a module, and the literal names given to db.run / fetch_one / fetch_all."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    calls = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
                and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
                in ("run", "fetch_one", "fetch_all")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            calls.append((node.lineno, node.args[1].value))
    return strings, calls


def test_every_named_statement_is_used_and_every_name_used_exists() -> None:
    used: set[str] = set()
    unknown = []
    for path in SOURCES:
        strings, calls = _strings_and_calls(path)
        used |= strings
        unknown += [f"{path.relative_to(PACKAGE.parent)}:{line}: no statement is named {name!r}"
                    for line, name in calls if name not in CATALOG]
    assert not unknown, "\n".join(unknown)
    unused = sorted(set(CATALOG) - used)
    assert not unused, f"statements nothing in the package runs (remove them, or run them): {', '.join(unused)}"


def test_a_name_is_run_by_name_and_an_unknown_one_is_named(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(KeyError, match="no statement is named 'no_such_statement'"):
            db.run(conn, "no_such_statement")


def test_the_loader_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="named twice"):
        parse("-- name: a\n-- does a\nSELECT 1;\n-- name: a\n-- does a again\nSELECT 2;\n", "x.sql")
    with pytest.raises(ValueError, match="needs a one-line comment"):
        parse("-- name: a\nSELECT 1;\n", "x.sql")
    with pytest.raises(ValueError, match="before any '-- name:'"):
        parse("SELECT 1;\n", "x.sql")
    assert parse("-- name: a\n-- does a\nSELECT 1\nFROM t;\n\n", "x.sql") == {"a": ("does a", "SELECT 1\nFROM t")}


# -- the status lists written in SQL -------------------------------------------------------

SQL_FOLDER = PACKAGE / "sql"
_IN_LIST = re.compile(r"\bIN\s*\(\s*('[^']*'(?:\s*,\s*'[^']*')*)\s*\)", re.IGNORECASE)

#: The kinds of value a list may hold, and the lists states.py names for each (a list of such
#: values written in SQL must be one of them, in the same order).
KINDS: dict[str, tuple[tuple[str, ...], list[tuple[str, ...]]]] = {
    "run statuses": (states.RUN_STATUSES, [states.ONGOING, states.TERMINAL, states.RUN_STATUSES,
                                           states.SLOT_HOLDING_RUN, states.LIMIT_KEY_RUNS, states.UNSTARTED_RUN]),
    "step statuses": (states.STEP_STATUSES, [states.OPEN_STEP, states.STEP_STATUSES, states.SLOT_HOLDING_STEP]),
    "stuck reasons": (states.STUCK_REASONS, [states.PAUSED_REASONS, attention.DUE_REASONS, states.STUCK_REASONS]),
}


def status_lists(text: str) -> list[tuple[int, tuple[str, ...]]]:
    """(line, values) of every ``IN ('a', 'b', ...)`` list of two values or more in ``text``."""
    found = []
    for match in _IN_LIST.finditer(text):
        values = tuple(v.strip().strip("'") for v in match.group(1).split(","))
        if len(values) > 1:
            found.append((text.count("\n", 0, match.start()) + 1, values))
    return found


def wrong_lists(text: str, source: str) -> list[str]:
    wrong = []
    for line, values in status_lists(text):
        for kind, (every, named) in KINDS.items():
            if set(values) <= set(every) and values not in named:
                wrong.append(f"{source}:{line}: {kind} {values} are none of states.py's lists {named}")
    return wrong


def test_status_lists_in_sql_are_the_ones_states_names() -> None:
    """The partial indexes, CHECK constraints and PL/pgSQL functions of schema.sql (what the migrations
    give, see test_schema.py) and the runtime statements spell the ongoing statuses, the open steps and
    the stuck reasons out: each such list is one of states.py's, so that a status added there is
    found wherever SQL lists its kind."""
    files = [SQL_FOLDER / "schema.sql", *(p for p in sorted(SQL_FOLDER.glob("*.sql")) if p.name not in NOT_STATEMENTS)]
    wrong = []
    checked = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        checked += len(status_lists(text))
        wrong += wrong_lists(text, f"pgbus_flask/sql/{path.name}")
    assert checked >= 20, "the lists were not found: has the SQL's spelling changed?"
    assert not wrong, "\n".join(wrong)
    ongoing = [values for values in (v for _line, v in status_lists((SQL_FOLDER / "schema.sql").read_text()))
               if values == states.ONGOING]
    assert len(ongoing) >= 5, "the partial indexes and functions on ongoing runs were not found in schema.sql"


def test_the_fine_insight_kinds_in_sql_are_insights_fine() -> None:
    """insights.sql spells out the kinds kept by 5 minutes: each list of them is insights.FINE."""
    lists = [values for _line, values in status_lists((SQL_FOLDER / "insights.sql").read_text())
             if "attempt" in values]
    assert len(lists) >= 4
    assert all(values == insights.FINE for values in lists), lists


def test_the_pause_events_in_sql_are_states_pause_events() -> None:
    """A run's paused stretches are read through the partial index pgbus_workflow_events_pauses: the
    statement's list of events and the index's are states.PAUSE_EVENTS."""
    (in_statement,) = [v for _line, v in status_lists(CATALOG["run_pause_events"][1])]
    (in_index,) = [v for _line, v in status_lists((SQL_FOLDER / "schema.sql").read_text()) if "step_skipped" in v]
    assert in_statement == in_index == states.PAUSE_EVENTS


def test_a_status_list_that_drifted_is_named() -> None:
    text = "CREATE INDEX i ON t (c)\n  WHERE status IN ('ready', 'running', 'paused');"
    (wrong,) = wrong_lists(text, "x.sql")
    assert wrong.startswith("x.sql:2: run statuses ('ready', 'running', 'paused')")
