"""Flow control (docs/flow-control.md): concurrency limits per key, rates, priorities, on_busy.

Attempts are claimed through the runner as a step job claims them (``runner.claim_attempt``), so a
test holds slots without any worker racing it; the rest of a run goes through RQ's SimpleWorker in
this process (``work``). Crashes and several worker processes are in
tests/processes/test_flow_processes.py.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from pgbus_flask import KeyBusy, Limit, Workflow, runner, step, sweep
from pgbus_flask.engine import Engine
from pgbus_flask.errors import DefinitionError
from pgbus_flask.handle import Run
from pgbus_flask.runner import Claim
from tests.flow_workflows import BadKey, Charge, Debounced, RateLimited, Refund, Refusing, TenantSync
from tests.support import CountingWorker, work


def sql(engine: Engine, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with engine.db.connection() as conn:
        cursor = conn.execute(query.encode(), params)
        return cursor.fetchall() if cursor.description else []


def first_step(run: Run) -> int:
    return int(run.refresh().steps()[-1]["id"])


def claim(engine: Engine, run: Run) -> Claim | None:
    found = runner.claim_attempt(engine, first_step(run), None)
    assert found is None or isinstance(found, Claim)
    return found


def held(engine: Engine, name: str, key: str = "") -> int:
    return int(sql(engine, "SELECT count(*) FROM pgbus_limit_slots WHERE limit_name = %s AND limit_key = %s "
                           "AND (holder_run IS NOT NULL OR holder_step IS NOT NULL)", (name, key))[0][0])


def in_line(engine: Engine, name: str) -> list[Any]:
    return [r[0] for r in sql(engine, "SELECT workflow_id FROM pgbus_workflow_steps WHERE blocked_on = %s "
                                      "AND status = 'scheduled' ORDER BY blocked_priority DESC, id", (name,))]


def events(run: Run) -> list[str]:
    return [e["event"] for e in run.events()]


def work_all(engine: Engine, runs: list[Run], timeout: float = 30.0) -> None:
    """Run jobs (RQ's scheduler too: a rate's wake-up) until every run ended, with a deadline."""
    deadline = time.monotonic() + timeout
    while not all(r.refresh().status in ("finished", "cancelled") for r in runs):
        assert time.monotonic() < deadline, [r.status for r in runs]
        worker = CountingWorker([engine.queue(n) for n in engine.queue_names()], connection=engine.redis)
        worker.work(burst=True, with_scheduler=True, logging_level="WARNING")
        time.sleep(0.05)


def leaked(engine: Engine) -> list[tuple[Any, ...]]:
    """Slots whose holder no longer holds them, and holders that hold no slot (both must be empty)."""
    return sql(engine, """
        SELECT 'slot', t.limit_name, t.limit_key FROM pgbus_limit_slots t
        LEFT JOIN pgbus_workflows w ON w.workflow_id = t.holder_run
        LEFT JOIN pgbus_workflow_steps s ON s.id = t.holder_step
        WHERE (t.holder_run IS NOT NULL AND (w.workflow_id IS NULL OR NOT w.holds_slot
                                             OR w.status NOT IN ('ready', 'running')))
           OR (t.holder_step IS NOT NULL AND (s.id IS NULL OR NOT s.holds_slot
                                              OR s.status NOT IN ('scheduled', 'in_progress')))
        UNION ALL
        SELECT 'run', w.workflow_class, w.workflow_id::text FROM pgbus_workflows w
        WHERE w.holds_slot AND NOT EXISTS (SELECT 1 FROM pgbus_limit_slots t WHERE t.holder_run = w.workflow_id)
        UNION ALL
        SELECT 'step', s.workflow_class, s.id::text FROM pgbus_workflow_steps s
        WHERE s.holds_slot AND NOT EXISTS (SELECT 1 FROM pgbus_limit_slots t WHERE t.holder_step = s.id)
    """)


def test_a_class_limit_runs_two_a_tenant_and_the_third_waits_in_line(engine: Engine) -> None:
    a1, a2, a3 = (TenantSync.start(tenant="a", bus=engine) for _ in range(3))
    b1 = TenantSync.start(tenant="b", bus=engine)
    first, second = claim(engine, a1), claim(engine, a2)
    assert first is not None and second is not None
    assert claim(engine, a3) is None  # in line: nothing claimed
    assert claim(engine, b1) is not None  # another tenant's slots
    assert a3.refresh().status == "waiting"
    assert events(a3)[-1] == "slot_waiting"
    assert a3.events()[-1]["details"] == {"limit": "TenantSync", "key": "a"}
    assert held(engine, "TenantSync", "a") == 2 and held(engine, "TenantSync", "b") == 1
    assert in_line(engine, "TenantSync") == [a3.workflow_id]
    # a1 completes its first step: the run keeps its slot for its next step, due now
    runner.record_outcome(engine, first, result="fetched")
    assert a1.refresh().status == "ready" and a3.refresh().status == "waiting"
    # a1 runs to its end (its store step is sent): its slot goes to a3 at once, whose job is sent
    work_all(engine, [a1, a3])
    assert [e for e in events(a3) if e.startswith("slot")] == ["slot_waiting", "slot_granted"]
    assert a2.refresh().status == "running" and held(engine, "TenantSync", "a") == 1
    assert leaked(engine) == []


def test_the_slot_comes_back_with_a_cancel_a_pause_and_a_stall(engine: Engine) -> None:
    runs = [TenantSync.start(tenant="c", bus=engine) for _ in range(5)]
    claims = [claim(engine, r) for r in runs]
    assert [c is not None for c in claims] == [True, True, False, False, False]
    runs[0].cancel(reason="not needed")  # running: its slot goes to the first in line
    assert runs[2].refresh().status == "ready"
    assert [e for e in events(runs[2]) if e.startswith("slot")] == ["slot_waiting", "slot_granted"]
    runs[3].pause(reason="look first")  # a waiting run paused holds nothing and keeps no place
    assert held(engine, "TenantSync", "c") == 2
    # a worker died in runs[1]'s step: the sweep declares it stalled, the slot goes to runs[4]
    sql(engine, "UPDATE pgbus_workflow_steps SET stall_at = now() - interval '1 second' WHERE id = %s",
        (claims[1].step["id"],))  # type: ignore[union-attr]
    assert sweep.sweep(engine).stalled == 1
    assert runs[1].refresh().status == "paused"
    assert runs[4].refresh().status == "ready"
    assert held(engine, "TenantSync", "c") == 2  # runs[2] (granted) and runs[4] (granted)
    assert leaked(engine) == []
    work_all(engine, [runs[2], runs[4]])
    assert held(engine, "TenantSync", "c") == 0 and leaked(engine) == []
    runs[3].resume()  # back in line, finds a free slot
    work_all(engine, [runs[3]])


def test_a_step_limit_is_shared_by_name_across_classes(engine: Engine) -> None:
    charge = Charge.start(bus=engine)
    work(engine)  # charge's first step runs, its second (limited) runs too: nothing holds "stripe"
    assert charge.refresh().status == "finished" and held(engine, "stripe") == 0
    refund = Refund.start(bus=engine)
    refunds = [Refund.start(bus=engine) for _ in range(2)]
    holding = claim(engine, refund)
    assert holding is not None and held(engine, "stripe") == 1
    assert claim(engine, refunds[0]) is None and claim(engine, refunds[1]) is None
    assert in_line(engine, "stripe") == [refunds[0].workflow_id, refunds[1].workflow_id]
    runner.record_outcome(engine, holding, result="refunded")  # the attempt's slot: to the first in line
    assert refund.refresh().status == "finished"
    assert refunds[0].refresh().status == "ready" and refunds[1].refresh().status == "waiting"
    work_all(engine, refunds)
    assert leaked(engine) == [] and held(engine, "stripe") == 0


def test_waiters_are_released_by_priority_then_age(engine: Engine) -> None:
    holder = TenantSync.start(tenant="p", bus=engine)
    low = TenantSync.start(tenant="p", bus=engine, priority=-1)
    plain = TenantSync.start(tenant="p", bus=engine)
    high = TenantSync.start(tenant="p", bus=engine, priority=5)
    other = TenantSync.start(tenant="p", bus=engine)
    claimed = [claim(engine, holder), claim(engine, other)]
    for run in (low, plain, high):
        assert claim(engine, run) is None
    assert in_line(engine, "TenantSync") == [high.workflow_id, plain.workflow_id, low.workflow_id]
    assert claimed[0] is not None
    runner.record_outcome(engine, claimed[0], result="x")
    holder.cancel()
    assert high.refresh().status == "ready" and plain.refresh().status == "waiting"


def test_priority_bands_put_higher_steps_before_those_queued_earlier(engine: Engine) -> None:
    order: list[str] = []
    low = Charge.start(bus=engine, priority=-3)
    plain = Charge.start(bus=engine)
    high = Charge.start(bus=engine, priority=2)
    queues = {q: engine.queue(q).count for q in engine.queue_names()}
    assert queues["pgbus.high"] == 1 and queues["pgbus"] == 1 and queues["pgbus.low"] == 1
    names = engine.queue_names()
    assert names.index("pgbus.high") < names.index("pgbus") < names.index("pgbus.low")
    assert [n for n in names if n.endswith(".high")] == names[:len(names) // 3]  # every high band first
    work(engine)
    for run in (low, plain, high):
        order.append(run.refresh().steps()[0]["started_at"])
    assert order[2] < order[1] < order[0]  # high, then plain, then low, though queued the other way


def test_a_start_with_a_bad_priority_is_refused_and_writes_nothing(engine: Engine) -> None:
    from pgbus_flask import InvalidInput

    for bad in ("high", 1.5, True, 10**9):
        with pytest.raises(InvalidInput, match="priority"):
            Charge.start(bus=engine, priority=bad)
    assert sql(engine, "SELECT count(*) FROM pgbus_workflows")[0][0] == 0


def test_on_busy_refuse_raises_key_busy_and_writes_nothing(engine: Engine) -> None:
    first = Refusing.start(tenant="r", bus=engine)
    with pytest.raises(KeyBusy, match="Refusing runs at most 1 at once for key 'r'"):
        Refusing.start(tenant="r", bus=engine)
    assert sql(engine, "SELECT count(*) FROM pgbus_workflows WHERE workflow_class = 'Refusing'")[0][0] == 1
    Refusing.start(tenant="s", bus=engine)  # another key is free
    work_all(engine, [first])
    Refusing.start(tenant="r", bus=engine)  # free again once it finished


def test_on_busy_replace_gives_the_unstarted_run_the_new_arguments(engine: Engine) -> None:
    first = Debounced.start(tenant="d", version=1, bus=engine)
    again = Debounced.start(tenant="d", version=2, bus=engine)
    assert again.workflow_id == first.workflow_id
    assert "arguments_replaced" in events(first)
    work_all(engine, [first])
    assert first.refresh().steps()[-1]["output"] == {"tenant": "d", "version": 2}
    later = Debounced.start(tenant="d", version=3, bus=engine)  # the first started: a new run
    assert later.workflow_id != first.workflow_id


def test_a_rate_never_starts_more_than_its_count_in_any_window(engine: Engine) -> None:
    runs = [RateLimited.start(bus=engine) for _ in range(13)]
    work_all(engine, runs, timeout=60)
    starts = sorted(r[0] for r in sql(engine, "SELECT started_at FROM pgbus_workflow_steps "
                                              "WHERE workflow_class = 'RateLimited'"))
    assert len(starts) == 13
    most = max(sum(1 for t in starts if s <= t < s + timedelta(seconds=1)) for s in starts)
    assert most <= 5, starts
    assert any(e == "slot_waiting" for r in runs for e in events(r))


def test_a_limit_raised_by_a_deploy_releases_waiters_at_the_next_sweep(engine: Engine,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    runs = [TenantSync.start(tenant="l", bus=engine) for _ in range(4)]
    claims = [claim(engine, r) for r in runs]
    assert [c is not None for c in claims] == [True, True, False, False]
    monkeypatch.setattr(TenantSync, "concurrency", Limit(3, key=lambda wf: wf.kwargs["tenant"]))
    assert sweep.sweep(engine).slots_granted == 1
    assert runs[2].refresh().status == "ready" and runs[3].refresh().status == "waiting"
    # lowered to 1: nothing running is cancelled; a given-back slot numbered above 1 is not given again
    monkeypatch.setattr(TenantSync, "concurrency", Limit(1, key=lambda wf: wf.kwargs["tenant"]))
    sweep.sweep(engine)
    assert [r.refresh().status for r in runs] == ["running", "running", "ready", "waiting"]
    slot_of = {row[0]: row[1] for row in sql(engine, "SELECT holder_run, slot FROM pgbus_limit_slots "
                                                      "WHERE limit_key = 'l' AND holder_run IS NOT NULL")}
    numbered_two_or_more = [r for r in runs[:3] if slot_of[r.workflow_id] >= 2]
    for run in numbered_two_or_more:
        run.cancel()
    assert runs[3].refresh().status == "waiting"


def test_a_key_callable_that_fails_pauses_the_run_with_its_error(engine: Engine) -> None:
    run = BadKey.start(bus=engine)
    work(engine)
    run.refresh()
    assert run.status == "paused"
    assert "concurrency key" in (run.steps()[-1]["error_message"] or "")
    assert "KeyError" in (run.steps()[-1]["error_message"] or "")


def test_a_start_key_callable_that_fails_writes_nothing(engine: Engine) -> None:
    from pgbus_flask import InvalidInput

    with pytest.raises(InvalidInput, match=r"concurrency key.*KeyError"):
        TenantSync.start(bus=engine)  # no tenant=
    assert sql(engine, "SELECT count(*) FROM pgbus_workflows")[0][0] == 0


class Declared(Workflow):
    concurrency = Limit(1)

    @step
    def only(self) -> str:
        return "ok"


def test_bad_declarations_are_named() -> None:
    from pgbus_flask import Rate

    with pytest.raises(DefinitionError, match="capacity must be a positive int"):
        Limit(0)
    with pytest.raises(DefinitionError, match="on_busy must be one of"):
        Limit(1, on_busy="drop")
    with pytest.raises(DefinitionError, match="count must be an int from 1 to 1000"):
        Rate(5000)
    with pytest.raises(DefinitionError, match="per must be a timedelta"):
        Rate(5, per=timedelta(0))
    with pytest.raises(DefinitionError, match="a step's limit always queues"):
        step(concurrency=Limit(1, on_busy="refuse"))(lambda self: None).build("x")
    with pytest.raises(DefinitionError, match="concurrency must be a Limit"):
        class NotALimit(Workflow):
            concurrency = 3  # type: ignore[assignment]

            @step
            def only(self) -> None: ...


def test_a_waiting_run_needs_attention_after_the_waiting_threshold(engine: Engine) -> None:
    runs = [TenantSync.start(tenant="w", bus=engine) for _ in range(3)]
    for r in runs:
        claim(engine, r)
    row = sql(engine, "SELECT attention_reason, attention_since FROM pgbus_workflows WHERE workflow_id = %s",
              (runs[2].workflow_id,))[0]
    blocked = sql(engine, "SELECT blocked_since FROM pgbus_workflow_steps WHERE workflow_id = %s",
                  (runs[2].workflow_id,))[0][0]
    assert row[0] == "waiting_overdue" and row[1] == blocked and isinstance(blocked, datetime)


def test_a_limit_name_is_a_class_limit_or_a_step_limit_never_both() -> None:
    with pytest.raises(DefinitionError, match="the limit 'stripe' is a class limit in one of"):
        class StripeRuns(Workflow):  # Charge's and Refund's steps count attempts under "stripe"
            concurrency = Limit(3, name="stripe")

            @step
            def only(self) -> None: ...


def test_the_sweep_deletes_the_slot_rows_of_keys_nobody_holds_or_waits_for(engine: Engine) -> None:
    done = TenantSync.start(tenant="gone", bus=engine)
    work_all(engine, [done])
    busy = [TenantSync.start(tenant="busy", bus=engine) for _ in range(3)]
    assert [claim(engine, run) is not None for run in busy] == [True, True, False]
    keys = {row[0] for row in sql(engine, "SELECT DISTINCT limit_key FROM pgbus_limit_slots")}
    assert keys == {"gone", "busy"}
    sweep.sweep(engine)
    assert {row[0] for row in sql(engine, "SELECT DISTINCT limit_key FROM pgbus_limit_slots")} == {"busy"}
    busy[0].cancel()  # its slot goes to the third, as before
    assert busy[2].refresh().status == "ready" and leaked(engine) == []


def test_a_run_rescheduled_for_later_gives_its_slot_to_the_next_whose_job_is_sent(engine: Engine) -> None:
    """The give-back here comes from the attention refresh written with the audit event (a ready run
    whose step is due later holds no slot): the woken step's job is still sent after commit."""
    from rq.job import Job, JobStatus

    runs = [TenantSync.start(tenant="later", bus=engine) for _ in range(3)]
    claims = [claim(engine, r) for r in runs]
    assert claims[0] is not None and claims[2] is None
    runner.record_outcome(engine, claims[0], result="fetched")  # ready, its store step due now: holds
    assert runs[2].refresh().status == "waiting"
    moment = datetime.now(runs[0].row["created_at"].tzinfo) + timedelta(days=1)
    runs[0].reschedule(moment, reason="tomorrow")
    assert runs[2].refresh().status == "ready"
    step = runs[2].steps()[-1]
    assert Job.fetch(step["job_id"], connection=engine.redis).get_status() == JobStatus.QUEUED
    assert leaked(engine) == []


def test_a_run_started_while_its_key_is_busy_goes_in_line_with_no_job(engine: Engine) -> None:
    """No job is sent for it (a hot tenant's backlog adds nothing to the queue ahead of the others):
    a given-back slot sends it."""
    holders = [TenantSync.start(tenant="hot", bus=engine) for _ in range(2)]
    claims = [claim(engine, r) for r in holders]
    queued_before = engine.queue("pgbus").count
    late = [TenantSync.start(tenant="hot", bus=engine) for _ in range(3)]
    assert [r.status for r in late] == ["waiting"] * 3
    assert engine.queue("pgbus").count == queued_before  # nothing sent for them
    assert [e for e in events(late[0]) if e.startswith("slot")] == ["slot_waiting"]
    assert in_line(engine, "TenantSync") == [r.workflow_id for r in late]
    other = TenantSync.start(tenant="quiet", bus=engine)
    assert other.status == "ready" and engine.queue("pgbus").count == queued_before + 1
    holders[0].cancel()
    assert [r.refresh().status for r in late] == ["ready", "waiting", "waiting"]
    assert claims[1] is not None
    runner.record_outcome(engine, claims[1], result="fetched")
    work_all(engine, [*late, other, holders[1]])
    assert leaked(engine) == []


def test_a_run_started_behind_paused_waiters_takes_the_free_slot(engine: Engine) -> None:
    """The runs in line are paused and the slot is free: a new run lines up behind them, and the free
    slot goes at once to the first run that can take it (this one), whose job is sent."""
    holder = TenantSync.start(tenant="paused", bus=engine)
    other = TenantSync.start(tenant="paused", bus=engine)
    assert claim(engine, holder) is not None and claim(engine, other) is not None
    waiters = [TenantSync.start(tenant="paused", bus=engine) for _ in range(2)]
    assert [w.status for w in waiters] == ["waiting", "waiting"]
    for w in waiters:
        w.pause(reason="hold on")
    holder.cancel()
    other.cancel()
    assert held(engine, "TenantSync", "paused") == 0
    late = TenantSync.start(tenant="paused", bus=engine)
    assert late.refresh().status == "ready" and held(engine, "TenantSync", "paused") == 1
    work_all(engine, [late])
    assert leaked(engine) == []
