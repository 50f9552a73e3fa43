"""DBOS Transact in ``bench.steps``: N workflows of 5 no-op ``@DBOS.step`` calls in one process,
their system database on the same PostgreSQL server (``pip install -e '.[bench]'``)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from bench.common import drop_database
from bench.report import STEPS, Result


def dbos_child(args: argparse.Namespace) -> None:
    """Runs in a child process: N 5-step DBOS workflows in this one process; prints one JSON line."""
    import logging

    from dbos import DBOS

    from bench.common import db_url, settle_stats, xact_commit
    from bench.probes import CpuMeter

    url = db_url(args.server_url, args.dbos_db)
    DBOS(config={"name": "pgbus-bench", "system_database_url": url, "run_admin_server": False,
                 "log_level": "WARNING"})
    logging.getLogger("dbos").setLevel(logging.WARNING)

    @DBOS.step()
    def noop(i: int, s: int) -> None:
        return None

    @DBOS.workflow()
    def five_noop(i: int) -> int:
        for s in range(STEPS):
            noop(i, s)
        return i

    DBOS.launch()
    for h in [DBOS.start_workflow(five_noop, -1 - i) for i in range(20)]:  # warm up
        h.get_result()
    time.sleep(1.5)
    before = xact_commit(args.server_url, args.dbos_db)
    cpu = CpuMeter([], args.server_url, args.dbos_db)
    cpu.start()
    t0 = time.perf_counter()
    handles = [DBOS.start_workflow(five_noop, i) for i in range(args.runs)]
    done = sum(1 for h in handles if h.get_result() is not None)
    seconds = time.perf_counter() - t0
    spent = cpu.stop()
    spent["workers"], spent["self"] = spent.pop("self"), None  # this one process is DBOS's worker
    DBOS.destroy()
    after = settle_stats(args.server_url, args.dbos_db)
    print("DBOS_RESULT " + json.dumps({
        "steps": done * STEPS, "seconds": seconds, "unfinished": (args.runs - done) * STEPS,
        "xacts_per_step": (after - before) / (args.runs * STEPS), "cpu": spent,
    }), flush=True)


def dbos_run(args: argparse.Namespace, dbos_db: str) -> Result:
    """The DBOS phase in a child process (DBOS keeps process-wide state); a row saying why when
    dbos is not installed or did not run."""
    try:
        import importlib.metadata

        version = importlib.metadata.version("dbos")
    except Exception:
        res = Result("DBOS Transact")
        res.notes.append("not installed (pip install -e '.[bench]') - skipped")
        return res
    res = Result(f"DBOS Transact {version}, 1 process")
    drop_database(args.server_url, dbos_db)
    try:
        proc = subprocess.run([sys.executable, "-m", "bench.steps", "--dbos-child", "--runs", str(args.runs),
                               "--server-url", args.server_url, "--dbos-db", dbos_db], capture_output=True,
                              text=True, timeout=args.timeout + 120,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("DBOS_RESULT ")), None)
        if line is None:
            res.notes.append(f"did not run (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-600:]}")
            return res
        data = json.loads(line.removeprefix("DBOS_RESULT "))
        res.steps, res.seconds, res.unfinished = data["steps"], data["seconds"], data["unfinished"]
        res.xacts_per_step = data["xacts_per_step"]
        res.cpu = data["cpu"]
        res.notes.append("system database on the same PostgreSQL; workflows started with DBOS.start_workflow"
                         " in one process, time = first start to last result; xacts/step counted on its"
                         " system database (starts included)")
    except subprocess.TimeoutExpired:
        res.notes.append("timed out")
    finally:
        drop_database(args.server_url, dbos_db)
    return res
