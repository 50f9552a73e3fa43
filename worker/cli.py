"""``pgbus-worker``: run step jobs, fan-out children and the sweep.

    pgbus-worker --app myapp:create_app           # or FLASK_APP=myapp
    PGBUS_DATABASE_URL=... PGBUS_REDIS_URL=... PGBUS_IMPORT=myapp.workflows pgbus-worker
    pgbus-worker --metrics-port 9300              # Prometheus metrics at http://127.0.0.1:9300/
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from contextlib import nullcontext
from typing import Any

import redis.exceptions
from rq.utils import import_attribute

from pgbus_flask import metrics
from pgbus_flask.config import Settings, redact
from pgbus_flask.engine import Engine
from pgbus_flask.errors import PgbusError

log = logging.getLogger("pgbus_flask")


def load_app(spec: str) -> Any:
    """``module``, ``module:name`` or ``module:factory()`` (a factory is called without arguments)."""
    module_name, _, attr = spec.partition(":")
    sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    if attr:
        target = getattr(module, attr.removesuffix("()"))
    else:
        target = getattr(module, "app", None) or getattr(module, "create_app", None)
        if target is None:
            raise PgbusError(f"{module_name} has neither 'app' nor 'create_app'; use --app {module_name}:NAME")
    from flask import Flask

    app = target if isinstance(target, Flask) else target()
    if not isinstance(app, Flask):
        raise PgbusError(f"{spec} did not give a Flask app (got {app!r})")
    if "pgbus" not in app.extensions:
        raise PgbusError(f"{spec} has no PgBus: call PgBus(app) or bus.init_app(app) in it")
    return app


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgbus-worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", help="MODULE[:APP_OR_FACTORY] of the Flask app (default: $FLASK_APP)")
    parser.add_argument("--queues", help="comma-separated queues (default: every queue the workflows use)")
    parser.add_argument("--burst", action="store_true", help="drain the queues, then exit")
    parser.add_argument("--worker-class", help="dotted path of the RQ worker class (default: PGBUS_WORKER_CLASS)")
    parser.add_argument("--no-sweep", action="store_true", help="do not run the sweep in this worker")
    parser.add_argument("--no-scheduler", action="store_true", help="do not run RQ's scheduler for future steps")
    parser.add_argument("--name", help="worker name (default: RQ's)")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve this worker's Prometheus metrics over HTTP on PORT (needs prometheus-client)")
    parser.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                        help="address the metrics server listens on (default 127.0.0.1; 0.0.0.0: every interface)")
    return parser


def serve_metrics(port: int, host: str) -> None:
    """Start the metrics server, or raise PgbusError saying why it cannot."""
    if not metrics.AVAILABLE:
        raise PgbusError("--metrics-port needs prometheus-client: pip install 'pgbus-flask[metrics]'")
    if not 0 < port < 65536:
        raise PgbusError(f"--metrics-port must be a port number from 1 to 65535, got {port}")
    try:
        metrics.serve(port, host)
    except OSError as exc:
        raise PgbusError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    log.info("pgbus-worker: metrics at http://%s:%d/", f"[{host}]" if ":" in host else host, port)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        app = None
        app_spec = args.app or os.environ.get("FLASK_APP")
        if app_spec:
            app = load_app(app_spec)
            engine: Engine = app.extensions["pgbus"]
            engine.make_default()
        else:
            settings = Settings.from_environ()
            engine = Engine(settings).make_default()
        for module in engine.settings.imports:
            importlib.import_module(module)
        worker_class: Any = import_attribute(args.worker_class or engine.settings.worker_class)
        if args.metrics_port is not None:
            serve_metrics(args.metrics_port, args.metrics_host)
    except (PgbusError, ImportError, AttributeError) as exc:
        print(f"pgbus-worker: {redact(str(exc))}", file=sys.stderr)
        return 2
    queues = [q.strip() for q in args.queues.split(",")] if args.queues else engine.queue_names()
    worker_class.sweep_enabled = not args.no_sweep
    log.info("pgbus-worker listening on %s", ", ".join(queues))
    delay = 1.0
    with app.app_context() if app is not None else nullcontext():
        while True:
            worker = worker_class([engine.queue(name) for name in queues], connection=engine.redis, name=args.name)
            try:
                worker.work(burst=args.burst, with_scheduler=not args.no_scheduler,
                            logging_level=args.log_level.upper())
            except redis.exceptions.ConnectionError as exc:
                log.error("pgbus-worker: Redis is unreachable (%s)", exc)
            # RQ marks a SIGTERM/SIGINT with a shutdown date (_stop_requested only when busy).
            if args.burst or worker._stop_requested or getattr(worker, "_shutdown_requested_date", None):
                return 0
            # RQ's loop quits when Redis goes away: start again once it is back.
            log.warning("pgbus-worker: the worker stopped unexpectedly; starting again in %.0fs", delay)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)


if __name__ == "__main__":
    sys.exit(main())
