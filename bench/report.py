"""What one phase of ``bench.steps`` measured, and how it is printed (figures, never asserts)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

STEPS = 5


def log(msg: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class Result:
    """One phase: ``steps`` completed in ``seconds`` end to end, and what it cost.

    ``jobs``: RQ jobs the workers ran; ``xacts_per_step``: PostgreSQL transactions per step
    with the starts included, ``xacts_steps_only`` with them taken off; ``cpu``: CPU seconds by
    part (see :class:`bench.probes.CpuMeter`); ``redis``: Redis commands by name that the
    workers sent (MONITOR samples only), ``redis_lua`` those Lua scripts ran and
    ``redis_producer`` those the benchmark sent to start or enqueue the work.
    """

    name: str
    workers: int | None = None  # worker processes, each running one job at a time
    steps: int = 0
    seconds: float = float("nan")
    unfinished: int = 0
    jobs: int | None = None
    xacts_per_step: float | None = None
    xacts_steps_only: float | None = None
    cpu: dict[str, float | None] = field(default_factory=dict)
    redis: dict[str, int] | None = None
    redis_lua: int | None = None
    redis_producer: dict[str, int] | None = None
    redis_idle: float | None = None  # commands per second the idle workers sent before the work came
    redis_window: float | None = None  # seconds MONITOR counted the workers' commands for
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.steps / self.seconds if self.seconds and self.seconds == self.seconds else float("nan")

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "rate": self.rate}


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None or value != value else format(value, fmt)


def table(results: list[Result]) -> None:
    print(f"\n{'what':<44}{'steps':>6}{'seconds':>9}{'steps/s':>9}{'unfinished':>11}{'jobs/step':>10}"
          f"{'xacts/step':>11}{'steps only':>11}")
    for r in results:
        jobs = r.jobs / r.steps if r.jobs is not None and r.steps else None
        print(f"{r.name:<44}{r.steps:>6}{r.seconds:>9.2f}{r.rate:>9.0f}{r.unfinished:>11}{_num(jobs, '.2f'):>10}"
              f"{_num(r.xacts_per_step, '.2f'):>11}{_num(r.xacts_steps_only, '.2f'):>11}")
    for r in results:
        for note in r.notes:
            print(f"  {r.name}: {note}")


def cpu_table(results: list[Result]) -> None:
    """CPU ms per step by part, and how many of the machine's cores that is at the measured rate."""
    rows = [r for r in results if r.cpu and r.steps]
    if not rows:
        return
    print(f"\nCPU ms per step{'':<29}{'workers':>9}{'PG':>8}{'Redis*':>8}{'bench':>8}{'total':>8}{'cores busy':>12}"
          f"{'others':>8}{'wall/worker':>13}")
    for r in rows:
        parts = {k: (v * 1000 / r.steps if v is not None else None) for k, v in r.cpu.items()
                 if k in ("workers", "postgres", "redis", "self")}
        total = sum(v for v in parts.values() if v is not None)
        print(f"{r.name:<44}{_num(parts.get('workers'), '.2f'):>9}{_num(parts.get('postgres'), '.2f'):>8}"
              f"{_num(parts.get('redis'), '.2f'):>8}{_num(parts.get('self'), '.2f'):>8}{total:>8.2f}"
              f"{total * r.rate / 1000:>12.2f}{_num(r.cpu.get('others_cores'), '.2f'):>8}"
              f"{_num(r.workers * 1000 / r.rate if r.workers else None, '.2f'):>13}")
    print("  workers: the worker processes (a forking worker's horses included); PG: the benchmark database's"
          " backends alive at the phase's start or end (the starts' and polls' too; not the backends a forking"
          " worker's horses open and close); Redis*: the whole Redis server (other databases' clients too);"
          " bench: this process (starts or enqueues, polls). Over the phase, end to end. cores busy: the total"
          " times steps/s; others: cores every other process on the machine kept busy meanwhile (0 = quiet);"
          " wall/worker: ms of wall time each worker took per step (workers / steps/s), to set against its CPU.")


def redis_table(results: list[Result]) -> None:
    rows = [r for r in results if r.redis is not None]
    if not rows:
        return
    print(f"\nRedis commands (MONITOR){'':<20}{'per job':>9}{'per step':>9}{'+Lua':>7}{'enqueue/run':>13}"
          f"{'idle/s':>8}{'window':>8}   most sent")
    for r in rows:
        assert r.redis is not None
        total = sum(r.redis.values())
        jobs = r.jobs or 0
        per_job = total / jobs if jobs else None
        per_step = total / r.steps if r.steps else None
        lua = r.redis_lua / r.steps if r.redis_lua is not None and r.steps else None
        runs = r.steps / STEPS if r.steps else 0
        producer = sum((r.redis_producer or {}).values()) / runs if runs else None
        top = ", ".join(f"{name} {n / jobs:.1f}" for name, n in sorted(r.redis.items(), key=lambda kv: -kv[1])[:8]
                        ) if jobs else ""
        print(f"{r.name:<44}{_num(per_job, '.1f'):>9}{_num(per_step, '.1f'):>9}{_num(lua, '.1f'):>7}"
              f"{_num(producer, '.1f'):>13}{_num(r.redis_idle, '.1f'):>8}{_num(r.redis_window, '.1f'):>7}s"
              f"   {top} (per job)")
    print("  per job / per step: commands the workers sent (idle polling, heartbeats, maintenance and scheduler"
          " included); +Lua: commands run inside Lua scripts, per step; enqueue/run: commands the benchmark sent"
          " per run or chain (start() or the chain's 5 enqueues); idle/s: what the same workers sent per second"
          " while idle just before, window: how long the count ran.")


def ratio(a: Result, b: Result) -> str:
    return f"{a.rate / b.rate:.2f}x" if b.rate and b.rate == b.rate and a.rate == a.rate else "-"
