"""``pgbus-worker``: run step jobs, fan-out children and the sweep.

\b
    pgbus-worker --app myapp:create_app           # or FLASK_APP=myapp
    PGBUS_DATABASE_URL=... PGBUS_REDIS_URL=... PGBUS_IMPORT=myapp.workflows pgbus-worker
    pgbus-worker --metrics-port 9300              # Prometheus metrics at http://127.0.0.1:9300/
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from contextlib import nullcontext
from typing import Any

import click
import redis.exceptions
from rq.utils import import_attribute

from pgbus_flask import flow, metrics, notify
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


@click.command("pgbus-worker", help=__doc__, context_settings={"max_content_width": 100})
@click.option("--app", "app_spec", metavar="MODULE[:APP_OR_FACTORY]",
              help="MODULE[:APP_OR_FACTORY] of the Flask app (default: $FLASK_APP)")
@click.option("--queues", help="comma-separated queues (default: every queue the workflows use)")
@click.option("--no-bands", is_flag=True,
              help="read only the queues given, not their priority bands (<queue>.high, <queue>.low)")
@click.option("--burst", is_flag=True, help="drain the queues, then exit")
@click.option("--worker-class", help="dotted path of the RQ worker class (default: PGBUS_WORKER_CLASS)")
@click.option("--no-sweep", is_flag=True, help="do not run the sweep in this worker")
@click.option("--no-scheduler", is_flag=True, help="do not run RQ's scheduler for future steps")
@click.option("--name", help="worker name (default: RQ's)")
@click.option("--log-level", default="INFO", show_default=True)
@click.option("--metrics-port", type=int, metavar="PORT",
              help="serve this worker's Prometheus metrics over HTTP on PORT (needs prometheus-client)")
@click.option("--metrics-host", default="127.0.0.1", metavar="HOST",
              help="address the metrics server listens on (default 127.0.0.1; 0.0.0.0: every interface)")
def command(app_spec: str | None, queues: str | None, no_bands: bool, burst: bool, worker_class: str | None,
            no_sweep: bool,
            no_scheduler: bool, name: str | None, log_level: str, metrics_port: int | None,
            metrics_host: str) -> int:
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        app, engine, worker_type = set_up(app_spec or os.environ.get("FLASK_APP"), worker_class)
        if metrics_port is not None:
            serve_metrics(metrics_port, metrics_host)
    except (PgbusError, ImportError, AttributeError) as exc:
        print(f"pgbus-worker: {redact(str(exc))}", file=sys.stderr)
        return 2
    names = [q.strip() for q in queues.split(",")] if queues else engine.queue_names(bands=False)
    if not no_bands:
        names = flow.banded(names)
    worker_type.sweep_enabled = not no_sweep
    log.info("pgbus-worker listening on %s", ", ".join(names))
    with app.app_context() if app is not None else nullcontext():
        work(engine, worker_type, names, name=name, burst=burst, with_scheduler=not no_scheduler,
             log_level=log_level.upper())
    return 0


def main(argv: list[str] | None = None) -> int:
    """The ``pgbus-worker`` console script: its exit status (2: bad options, or it cannot start)."""
    try:
        status = command.main(args=argv, prog_name="pgbus-worker", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return 1
    return status if isinstance(status, int) else 0


def set_up(app_spec: str | None, worker_class: str | None) -> tuple[Any, Engine, Any]:
    """The app (or None), its engine made the default, and the worker class; the workflows imported."""
    app = None
    if app_spec:
        app = load_app(app_spec)
        engine: Engine = app.extensions["pgbus"]
        engine.make_default()
    else:
        engine = Engine(Settings.from_environ()).make_default()
    for module in engine.settings.imports:
        importlib.import_module(module)
    if engine.settings.webhooks:  # before any step runs: the triggers write outbox rows for declared targets
        try:
            notify.declare(engine)
        except Exception as exc:  # PostgreSQL not there yet: not a reason to refuse to start
            log.warning("pgbus-worker: webhook targets not declared yet (%s); the sweep declares them", exc)
    return app, engine, import_attribute(worker_class or engine.settings.worker_class)


def work(engine: Engine, worker_type: Any, queues: list[str], *, name: str | None, burst: bool,
         with_scheduler: bool, log_level: str) -> None:
    """Run RQ workers on ``queues`` until asked to stop (or, with ``burst``, until they are empty)."""

    def make() -> Any:
        return worker_type([engine.queue(queue) for queue in queues], connection=engine.redis, name=name)

    delay = 1.0
    worker = make()  # Redis unreachable at start-up: the command fails
    while True:
        try:
            worker.work(burst=burst, with_scheduler=with_scheduler, logging_level=log_level)
        except redis.exceptions.ConnectionError as exc:
            log.error("pgbus-worker: Redis is unreachable (%s)", exc)
        # RQ marks a SIGTERM/SIGINT with a shutdown date (_stop_requested only when busy).
        if burst or stopping(worker):
            return
        # RQ's loop quits when Redis goes away: start again once it is back (a new worker
        # talks to Redis as it is made, so that too waits and tries again).
        log.warning("pgbus-worker: the worker stopped unexpectedly; starting again in %.0fs", delay)
        while True:
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
            if stopping(worker):
                return
            forget(worker)
            try:
                worker = make()
                break
            except redis.exceptions.ConnectionError as exc:
                log.error("pgbus-worker: Redis is unreachable (%s); trying again in %.0fs", exc, delay)


def stopping(worker: Any) -> bool:
    """Whether ``worker`` was asked to stop (SIGTERM, SIGINT)."""
    return bool(worker._stop_requested or getattr(worker, "_shutdown_requested_date", None))


def forget(worker: Any) -> None:
    """Mark ``worker`` dead in Redis before a worker of the same name starts again.

    A worker that lost Redis could not say it stopped; where its registration outlived the
    outage (a Sentinel failover promotes a replica that holds a copy of it, a network blip
    keeps it), RQ would refuse to start a worker of the same ``--name``: "There exists an active
    worker named ... already". Redis still down: nothing to do yet, the next start will fail
    on the connection again and come back here.
    """
    try:
        worker.register_death()
    except redis.exceptions.RedisError as exc:
        log.info("pgbus-worker: could not mark the stopped worker dead yet (%s)", exc)


if __name__ == "__main__":
    sys.exit(main())
