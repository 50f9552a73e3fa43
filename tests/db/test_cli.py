"""flask pgbus ...: reads and verbs from the command line (actor cli:$USER)."""

from __future__ import annotations

import getpass
import json
import re
from datetime import datetime, timezone
from typing import Any

import pytest
from flask import Flask

from pgbus_flask import Run, Workflow, payload, queries, step
from pgbus_flask.cli import terminal_safe
from pgbus_flask.engine import Engine
from tests.support import work
from tests.support.doors import invoke
from tests.workflows import FailsUntil, ThreeSteps, WaitsForever


def test_runs_show_and_verbs(app: Flask) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        run = FailsUntil.start(fail_until=1, subject=("Invoice", 9))
        ThreeSteps.start(order_id=1)
    work(engine)
    code, out = invoke(app, "runs", "--status", "paused")
    assert code == 0 and str(run.workflow_id) in out and "FailsUntil" in out and "Invoice 9" in out
    code, out = invoke(app, "runs", "--class", "Nope")
    assert code == 0 and "no runs" in out
    code, out = invoke(app, "show", str(run.workflow_id))
    assert code == 0
    assert "status: paused" in out and "resume will: retry capture" in out and "TimeoutError" in out
    code, out = invoke(app, "attention")
    assert code == 0 and "paused_error" in out and "TimeoutError" in out

    code, out = invoke(app, "resume", str(run.workflow_id), "--reason", "gateway back")
    assert code == 0, out
    assert "resumed: retry capture" in out
    resumed = [e for e in run.events() if e["event"] == "resumed"][-1]
    assert resumed["actor"] == f"cli:{getpass.getuser()}" and resumed["reason"] == "gateway back"

    code, out = invoke(app, "resume", str(run.workflow_id))
    assert code == 1 and "cannot resume a ready run; allowed now:" in out

    code, out = invoke(app, "show", "not-a-uuid")
    assert code == 2 and "run id 'not-a-uuid' is not a run id or the start of one" in out
    code, out = invoke(app, "show", "00000000-0000-0000-0000-000000000000")
    assert code == 1 and "no workflow run with id 00000000-0000-0000-0000-000000000000" in out


def test_signal_command(app: Flask) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        run = WaitsForever.start()
    work(engine)
    code, out = invoke(app, "signal", str(run.workflow_id), "go", "--payload", "{not json")
    assert code == 2 and "--payload is not JSON" in out
    assert run.signals() == []
    code, out = invoke(app, "signal", str(run.workflow_id), "go", "--payload", '{"ok": true}', "--key", "k")
    assert code == 0 and "stored signal" in out and "claimed" in out
    code, out = invoke(app, "signal", str(run.workflow_id), "go", "--key", "k")
    assert code == 0 and "duplicate delivery" in out
    work(engine)
    assert run.refresh().status == "finished"


def test_bulk_and_sweep_commands(app: Flask) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        runs = [FailsUntil.start(fail_until=1) for _ in range(3)]
    work(engine)
    code, out = invoke(app, "bulk", "resume", "--class", "FailsUntil", "--step", "capture",
                       "--reason-of-group", "paused_error", "--error-class", "TimeoutError", "--reason", "fixed")
    assert code == 0, out
    assert "resume: 3 moved, 0 refused" in out
    work(engine)
    assert {r.refresh().status for r in runs} == {"finished"}
    code, out = invoke(app, "sweep")
    assert code == 0 and "SweepReport" in out


# -- run ids by prefix -----------------------------------------------------------


def insert_run(engine: Engine, workflow_id: str, workflow_class: str = "ThreeSteps", status: str = "finished") -> None:
    with engine.db.connection() as conn:
        conn.execute("INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step,"
                     " definition_digest, started_by) VALUES (%s, %s, %s, 'ship', 'old', 'test')",
                     (workflow_id, workflow_class, status))


def test_show_and_every_verb_take_a_unique_prefix(app: Flask) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        run = WaitsForever.start()
    work(engine)
    full = str(run.workflow_id)
    code, out = invoke(app, "show", full[:8])
    assert code == 0 and f"WaitsForever {full}" in out, out
    code, out = invoke(app, "show", full[:13].upper())  # the canonical dashes, either case
    assert code == 0 and full in out, out
    code, out = invoke(app, "signal", full[:10].replace("-", ""), "go", "--key", "k1")
    assert code == 0 and "stored signal" in out, out
    code, out = invoke(app, "pause", full[:8], "--reason", "by prefix")
    assert code == 0 and f"{full}: paused" in out, out
    code, out = invoke(app, "cancel", full[:6])
    assert code == 0 and f"{full}: cancelled" in out, out
    assert [e["reason"] for e in run.events() if e["event"] == "paused"] == ["by prefix"]


def test_an_ambiguous_or_unknown_prefix_says_so_and_changes_nothing(app: Flask) -> None:
    engine = app.extensions["pgbus"]
    ids = ["abcd0000-0000-4000-8000-000000000001", "abcd0000-0000-4000-8000-000000000002",
           "abcd1111-0000-4000-8000-000000000003"]
    for workflow_id in ids:
        insert_run(engine, workflow_id)
    before = snapshot(engine)

    code, out = invoke(app, "show", "abcd")
    assert code == 2 and "abcd matches 3 runs:" in out and "give more of the id" in out, out
    assert all(f"{i} (ThreeSteps, finished)" in out for i in ids)
    code, out = invoke(app, "rerun", "abcd0000-0000")
    assert code == 2 and "abcd0000-0000 matches 2 runs:" in out and ids[2] not in out, out
    code, out = invoke(app, "show", "abcd1")
    assert code == 0 and ids[2] in out, out
    code, out = invoke(app, "cancel", "abce")
    assert code == 1 and "no workflow run with id abce..." in out, out
    code, out = invoke(app, "show", "abc")
    assert code == 2 and "'abc' is too short: give at least 4 characters" in out, out
    code, out = invoke(app, "show", "abcd00000")  # dashes missing where the canonical form has one: still a prefix
    assert code == 2 and "matches 2 runs" in out, out
    code, out = invoke(app, "show", "abcd-0000")  # a dash where the canonical form has none
    assert code == 2 and "is not a run id or the start of one" in out, out
    assert snapshot(engine) == before


def test_an_ambiguous_prefix_lists_a_few_runs(app: Flask) -> None:
    engine = app.extensions["pgbus"]
    for n in range(8):
        insert_run(engine, f"beef0000-0000-4000-8000-00000000000{n}")
    code, out = invoke(app, "resume", "beef")
    assert code == 2 and "beef matches more than 5 runs:" in out and out.count("beef0000") == 5, out


def test_prefix_lookup_is_a_range_scan_of_the_unique_index(app: Flask) -> None:
    """`workflow_id::text LIKE 'abcd%'` reads the whole index (about 40 ms at 100,000 runs); the
    uuid range starts and stops inside it (0.04 ms)."""
    engine = app.extensions["pgbus"]
    low, high = queries.run_id_range("abcd")  # type: ignore[misc]
    assert (str(low), str(high)) == ("abcd0000-0000-0000-0000-000000000000", "abcdffff-ffff-ffff-ffff-ffffffffffff")
    with engine.db.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + queries.RUNS_BY_ID_RANGE, (low, high, 6)))
    assert "Index Cond: ((workflow_id >= " in plan and "Filter" not in plan, plan


@pytest.mark.parametrize(("text", "expected"), [
    ("5f0c", ("5f0c0000-0000-0000-0000-000000000000", "5f0cffff-ffff-ffff-ffff-ffffffffffff")),
    ("5F0C1A2B-3", ("5f0c1a2b-3000-0000-0000-000000000000", "5f0c1a2b-3fff-ffff-ffff-ffffffffffff")),
    ("5f0c1a2b3", ("5f0c1a2b-3000-0000-0000-000000000000", "5f0c1a2b-3fff-ffff-ffff-ffffffffffff")),
    ("%", None), ("_", None), ("5f0c%", None), ("5f0-c", None), ("g", None), ("", None), ("5" * 33, None),
    ("5f0c1a2b-3c4d-5e6f-7a8b-9c0d1e2f3a4b5", None),
])
def test_run_id_range(text: str, expected: tuple[str, str] | None) -> None:
    bounds = queries.run_id_range(text)
    assert (None if bounds is None else (str(bounds[0]), str(bounds[1]))) == expected


def test_text_filter_matches_wildcards_only_literally(app: Flask) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        runs = {sid: ThreeSteps.start(subject=("Order", sid)) for sid in ("50%", "a_b", "back\\slash", "plain")}

    def found(text: str) -> set[str]:
        rows, _ = queries.list_runs(engine, queries.RunFilter(text=text))
        return {r["subject_id"] for r in rows}

    assert found("%") == {"50%"}
    assert found("_") == {"a_b"}
    assert found("\\") == {"back\\slash"}
    assert found("0%") == {"50%"}
    assert found("order") == set(runs)
    target = runs["plain"].workflow_id
    assert found(str(target)[:8]) == {"plain"}
    assert found(str(target).upper()) == {"plain"}


# -- bad input: one line, exit 2, nothing changed -----------------------------------


TABLES = ("pgbus_workflows", "pgbus_workflow_steps", "pgbus_workflow_events", "pgbus_workflow_signals",
          "pgbus_batches", "pgbus_batch_children")


def snapshot(engine: Engine) -> dict[str, list[Any]]:
    with engine.db.connection() as conn:
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() for table in TABLES}


HOSTILE_ARGS = [
    ["reschedule", "{id}", "9999-12-31T23:59:59-23:59"],
    ["reschedule", "{id}", "0001-01-01T00:00:00+23:59"],
    ["reschedule", "{id}", "2030-01-01T09:00"],
    ["reschedule", "{id}", "2030-01-01T09:00\x00"],
    ["reschedule", "{id}", "\udcff"],
    ["signal", "{id}", "go", "--payload", "[" * 100_000],
    ["signal", "{id}", "go", "--payload", "[" * 150 + "]" * 150],
    ["signal", "{id}", "go", "--payload", "1" * 5_000],
    ["signal", "{id}", "go", "--payload", "{not json"],
    ["signal", "{id}", "go\x00"],
    ["signal", "{id}", "go\udcff"],
    ["signal", "{id}", "g" * 100_000],
    ["signal", "{id}", " "],
    ["signal", "{id}", "go", "--key", "k" * 100_000],
    ["signal", "{id}", "go", "--key", "k\x00"],
    ["signal", "{id}", "go", "--reason", "\udcff"],
    ["pause", "{id}", "--reason", "a\x00b"],
    ["pause", "{id}", "--reason", "a\udcffb"],
    ["pause", "{id}", "--reason", "r" * 1_000_000],
    ["cancel", "{id}", "--reason", "\x00"],
    ["resume-at", "{id}", "\x00"],
    ["resume-at", "{id}", "no_such_step"],
    ["show", "\x00"],
    ["show", "\udcff"],
    ["show", "a" * 100_000],
    ["show", "-5"],
    ["show", "12"],
    ["skip", "%"],
    ["runs", "--class", "a\x00"],
    ["runs", "--class", "\udcff"],
    ["runs", "--step", "\x00"],
    ["runs", "--limit", "-5"],
    ["runs", "--limit", "0"],
    ["runs", "--limit", "201"],
    ["runs", "--limit", "99999999999999999999999"],
    ["attention", "--class", "\x00"],
    ["bulk", "resume", "--class", "\x00", "--step", "wait", "--reason-of-group", "paused_manual"],
    ["bulk", "resume", "--class", "WaitsForever", "--step", "\udcff", "--reason-of-group", "paused_manual"],
    ["bulk", "cancel", "--class", "WaitsForever", "--step", "wait", "--reason-of-group", "paused_manual",
     "--reason", "\x00"],
]


@pytest.fixture
def two_runs(app: Flask) -> str:
    """A waiting run (its id returned) and a paused one (an attention group of one)."""
    engine = app.extensions["pgbus"]
    with app.app_context():
        run = WaitsForever.start()
        WaitsForever.start().pause(actor="test")
    work(engine)
    return str(run.workflow_id)


@pytest.mark.parametrize("args", HOSTILE_ARGS, ids=lambda a: ascii(a)[:60])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(app: Flask, two_runs: str, args: list[str]) -> None:
    engine = app.extensions["pgbus"]
    before = snapshot(engine)
    result = app.test_cli_runner().invoke(args=["pgbus", *[a.replace("{id}", two_runs) for a in args]])
    assert isinstance(result.exception, SystemExit) or result.exception is None, result.exception
    assert result.exit_code == 2, result.output
    [error] = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error) < 700 and "Traceback" not in result.output, result.output
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]", result.output), ascii(result.output)
    assert snapshot(engine) == before


def test_payload_with_nul_or_lone_surrogate_is_stored_exactly(app: Flask, two_runs: str) -> None:
    for i, text in enumerate(["\x00", "\ud800", "a\x00\udcffb"]):
        code, out = invoke(app, "signal", two_runs, "other", "--payload", json.dumps({"v": text}), "--key", f"k{i}")
        assert code == 0, out
    stored = [payload.from_json(s["payload"]) for s in Run(app.extensions["pgbus"], two_runs).signals()]
    assert stored == [{"v": "\x00"}, {"v": "\ud800"}, {"v": "a\x00\udcffb"}]


def test_reschedule_with_a_good_time_still_works(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    code, out = invoke(app, "reschedule", str(run.workflow_id)[:8], "2030-01-01T09:00:00+02:00")
    assert code == 0, out
    [latest] = [s for s in run.steps() if s["status"] == "scheduled"]
    assert latest["scheduled_at"] == datetime(2030, 1, 1, 7, tzinfo=timezone.utc)


# -- terminal safety -------------------------------------------------------------------


TRICK = "\x1b[2J\x1b]0;owned\x07\u202eevil\u202c\x9b31m\u2066x\u2069\u200f"
TRICK_CHARS = ["\x1b", "\x07", "\u202e", "\u202c", "\x9b", "\u2066", "\u2069", "\u200f"]


class TerminalTricks(Workflow):
    @step
    def trick(self) -> None:
        raise RuntimeError("boom " + TRICK)


def test_show_runs_and_attention_escape_control_and_bidi_characters(app: Flask) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        run = TerminalTricks.start(subject=("Order", "S" + TRICK))
    work(engine)
    run.refresh().resume(actor="ops" + TRICK, reason="why " + TRICK)
    work(engine)
    assert run.refresh().status == "paused"
    for args in (["show", str(run.workflow_id)], ["runs"], ["attention"]):
        code, out = invoke(app, *args)
        assert code == 0, out
        assert not [c for c in TRICK_CHARS if c in out], (args, ascii(out))
        assert "\\x1b[2J" in out and "\\u202e" in out, (args, out)
    code, out = invoke(app, "show", str(run.workflow_id))
    assert "by ops\\x1b[2J" in out and "why \\x1b[2J" in out and "RuntimeError: boom \\x1b[2J" in out
    assert "subject: Order S\\x1b[2J" in out


def test_terminal_safe() -> None:
    assert terminal_safe("a\tb\nc\x1b[0m\u202e\x9b\udcff é ü 日本") == "a\\tb\\nc\\x1b[0m\\u202e\\x9b\\udcff é ü 日本"
