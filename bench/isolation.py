"""Per-test isolation cost: TRUNCATE of the pgbus tables vs a fresh database copied from a template.

    python -m bench.isolation              # median of 20 each
    python -m bench.isolation --repeat 5

* TRUNCATE: ``pgbus_flask.testing.truncate`` on a migrated database, after a
  "test" that wrote 10 runs of 5 steps with their events (the writes are not
  timed); also on tables that are already empty; and, for comparison, a
  ``DELETE FROM`` of every pgbus table in one transaction after the same writes.
* Template: ``CREATE DATABASE ... TEMPLATE`` of a migrated template, with
  PostgreSQL 15's default ``STRATEGY = WAL_LOG`` and with ``FILE_COPY``, then
  the first query on a new connection to the copy (a test needs one), and the
  ``DROP DATABASE`` that must follow each test.

Both databases are dropped at the end. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime

import psycopg

from bench.common import DEFAULT_SERVER, create_database, db_url, drop_database, ms

TEMPLATE = "pgbus_bench_template"
WORK = "pgbus_bench_truncate"
COPY = "pgbus_bench_copy"

WRITE_A_TEST = """
INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by)
SELECT md5('t' || i)::uuid, 'FiveNoop', 'finished', 's5', 'x', 'bench' FROM generate_series(1, 10) i;
INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at)
SELECT md5('t' || i)::uuid, 'FiveNoop', 's' || k, 1, 'completed', now()
FROM generate_series(1, 10) i CROSS JOIN generate_series(1, 5) k;
INSERT INTO pgbus_workflow_events (workflow_id, event, actor)
SELECT md5('t' || i)::uuid, 'step_completed', 'bench' FROM generate_series(1, 10) i CROSS JOIN generate_series(1, 12) k;
"""


def delete_all(conn: psycopg.Connection) -> None:
    """The alternative to TRUNCATE for small tables: DELETE every row (identities are not reset)."""
    from pgbus_flask.testing import empty

    empty(conn)  # events go with their runs (they are append-only)


def summary(values: list[float]) -> str:
    return f"median {ms(statistics.median(values)):>9}   min {ms(min(values)):>9}   max {ms(max(values)):>9}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--server-url", default=DEFAULT_SERVER)
    args = parser.parse_args(argv)
    from pgbus_flask.testing import truncate

    print(f"bench.isolation: median of {args.repeat}, {datetime.now().astimezone().isoformat(timespec='seconds')}")
    results: dict[str, list[float]] = {}
    try:
        work_url = create_database(args.server_url, WORK)
        create_database(args.server_url, TEMPLATE)
        with psycopg.connect(work_url, autocommit=True) as conn:
            truncate(conn)  # warm-up
            cases = (("TRUNCATE after a test (10 runs written)", True, truncate),
                     ("TRUNCATE of empty tables", False, truncate),
                     ("DELETE FROM after a test (10 runs written)", True, delete_all))
            for key, write, empty in cases:
                results[key] = []
                for _ in range(args.repeat):
                    if write:
                        with conn.transaction():
                            conn.execute(WRITE_A_TEST.encode())
                    t = time.perf_counter()
                    empty(conn)
                    results[key].append(time.perf_counter() - t)

        with psycopg.connect(args.server_url, autocommit=True) as admin:
            for strategy in ("WAL_LOG", "FILE_COPY"):
                create_key = f"CREATE DATABASE TEMPLATE ({strategy})"
                first_key = "  + first query on the copy"
                drop_key = "  + DROP DATABASE of the copy"
                for key in (create_key, f"{first_key} ({strategy})", f"{drop_key} ({strategy})", f"total ({strategy})"):
                    results[key] = []
                admin.execute(f'DROP DATABASE IF EXISTS "{COPY}" WITH (FORCE)')
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    admin.execute(f'CREATE DATABASE "{COPY}" TEMPLATE "{TEMPLATE}" STRATEGY = {strategy}')
                    t1 = time.perf_counter()
                    with psycopg.connect(db_url(args.server_url, COPY), autocommit=True) as conn:
                        conn.execute("SELECT count(*) FROM pgbus_workflows").fetchone()
                    t2 = time.perf_counter()
                    admin.execute(f'DROP DATABASE "{COPY}"')
                    t3 = time.perf_counter()
                    results[create_key].append(t1 - t0)
                    results[f"{first_key} ({strategy})"].append(t2 - t1)
                    results[f"{drop_key} ({strategy})"].append(t3 - t2)
                    results[f"total ({strategy})"].append(t3 - t0)
    finally:
        for name in (COPY, TEMPLATE, WORK):
            drop_database(args.server_url, name)

    print()
    for key, values in results.items():
        print(f"{key:<44}{summary(values)}")
    base = statistics.median(results["TRUNCATE after a test (10 runs written)"])
    for strategy in ("WAL_LOG", "FILE_COPY"):
        total = statistics.median(results[f"total ({strategy})"])
        print(f"\ntemplate copy ({strategy}) per test / TRUNCATE per test: {total / base:.1f}x"
              f"  ({ms(total)} vs {ms(base)})", end="")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
