"""The engine: one set of settings with its PostgreSQL pool and Redis connection.

``PgBus(app)`` makes one per Flask app (kept in ``app.extensions["pgbus"]``);
``PgBus(database_url=..., redis_url=...)`` makes a standalone one; the
worker makes one from the environment or from its app. Job functions find
theirs through :func:`resolve_engine`.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from flask import current_app
from redis import Redis
from redis.client import Pipeline
from redis.sentinel import Sentinel, SentinelConnectionPool
from rq import Queue
from rq.job import Job, JobStatus

from . import flow, reporting, states
from .config import REDIS_SOCKET_TIMEOUT, SentinelURL, Settings, is_sentinel_url, sentinel_url
from .db import Database
from .definition import registry
from .errors import ConfigError, PgbusError

log = logging.getLogger("pgbus_flask")

STEP_JOB = "pgbus_flask.jobs.run_step"
RATE_JOB = "pgbus_flask.jobs.wake_rate"
CHILD_JOB = "pgbus_flask.jobs.run_child"
# RQ's own job timeout sits a little past the stall deadline, so the sweep
# (not RQ) is what declares an attempt stalled.
JOB_TIMEOUT_MARGIN = states.JOB_TIMEOUT_MARGIN
# A step or child job keeps nothing in Redis when it returns (its outcome is in PostgreSQL);
# one that fails in RQ (pgbus could not record, RQ's timeout, a dead worker) stays a week in
# RQ's failed registry with its traceback, for whoever debugs the worker (docs/decisions.md).
FAILURE_TTL = 7 * 24 * 3600

_default: Engine | None = None
# Held while an engine is built from the environment, so concurrent jobs build one.
_default_lock = threading.Lock()


def sentinel_master(where: SentinelURL) -> Redis:
    """A client of the master the sentinels name for ``where.service``, following failovers.

    redis-py's SentinelConnectionPool asks the sentinels for the master's address on every new
    connection; a connection to a master that went away (or became a replica: ReadOnlyError)
    raises ConnectionError and is dropped, so the next command reconnects to whichever master
    the sentinels name by then. The timeouts are those of a plain redis:// URL unless the URL's
    ``socket_timeout`` says otherwise; a question to a sentinel waits 5 s at most, then the next
    sentinel is asked.
    """
    timeout = where.socket_timeout or REDIS_SOCKET_TIMEOUT
    sentinel_kwargs: dict[str, Any] = {"socket_connect_timeout": min(timeout, 5.0), "socket_timeout": min(timeout, 5.0)}
    if where.sentinel_username:
        sentinel_kwargs["username"] = where.sentinel_username
    if where.sentinel_password:
        sentinel_kwargs["password"] = where.sentinel_password
    sentinel = Sentinel(list(where.sentinels), sentinel_kwargs=sentinel_kwargs, socket_connect_timeout=5,
                        socket_timeout=timeout, health_check_interval=30)
    return sentinel.master_for(where.service, db=where.db, username=where.username, password=where.password)


class Engine:
    """Settings, a PostgreSQL pool and a Redis connection, for one app or process."""

    def __init__(self, settings: Settings) -> None:
        settings.require_urls()
        self.settings = settings
        assert settings.database_url is not None
        self.db = Database(settings.database_url, max_size=settings.pool_size, pooler=settings.database_pooler)
        self._redis: Redis | None = None
        self._queues: dict[str, Queue] = {}
        # Tests replace this to deliver every job several times.
        self.deliveries = 1
        # Where each part of the sweep stopped in this process, for the next sweep to go on from.
        self.sweep_cursors: dict[str, Any] = {}
        from .notify import install  # signals and webhooks read each commit's notices (docs/notifications.md)

        install(self)

    @property
    def redis(self) -> Redis:
        if self._redis is None:
            url = self.settings.redis_url
            assert url is not None
            if is_sentinel_url(url):
                self._redis = sentinel_master(sentinel_url(url))
            else:
                self._redis = Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30,
                                             health_check_interval=30)
        return self._redis

    def queue(self, name: str) -> Queue:
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues[name] = Queue(name, connection=self.redis)
        return queue

    def queue_names(self, *, bands: bool = True) -> list[str]:
        """The default queue and every queue a registered workflow names, for the worker to listen on,
        in the order it reads them: their high-priority bands first, their low ones last (flow.banded;
        ``bands=False``: the queues alone)."""
        names = [self.settings.queue]
        for klass in registry().values():
            for name in [klass.queue, *(s.queue for s in klass.steps)]:
                if name and name not in names:
                    names.append(name)
        return flow.banded(names) if bands else names

    def close(self) -> None:
        self.db.close()
        if self._redis is not None:
            self._redis.close()
            pool = self._redis.connection_pool
            if isinstance(pool, SentinelConnectionPool):  # given to the client, so close() left it open
                pool.disconnect()
                for sentinel in pool.sentinel_manager.sentinels:
                    sentinel.close()
            self._redis = None

    def make_default(self) -> Engine:
        global _default
        _default = self
        return self

    # -- sending jobs (only ever from after-commit callbacks) -----------

    def step_job_timeout(self, timeout: timedelta) -> int:
        """RQ's timeout for a step job whose first step has stall deadline ``timeout``: room for
        that step, and for PGBUS_INLINE_SECONDS of inline continuation when it is on."""
        seconds = timeout.total_seconds() + JOB_TIMEOUT_MARGIN
        if self.settings.inline_steps > 0:
            seconds += self.settings.inline_seconds.total_seconds()
        return int(seconds + 0.999)

    def send_step(self, job: StepJob) -> None:
        """Enqueue one step job; a failure is logged and the sweep resends later."""
        self.send_steps([job])

    def send_steps(self, jobs: Sequence[StepJob]) -> None:
        """Enqueue step jobs in one Redis round trip, withdrawing the earlier jobs they replace
        that are still waiting; a failure is logged and the sweep resends later."""
        if not jobs:
            return
        try:
            replaced = [job.replaces for job in jobs if job.replaces]
            waiting = [old for old in Job.fetch_many(replaced, connection=self.redis) if old is not None
                       and old.get_status(refresh=False) in (JobStatus.QUEUED, JobStatus.SCHEDULED)] if replaced else []
            now = datetime.now(timezone.utc)
            with self.redis.pipeline() as pipe:
                pipe.multi()  # one MULTI/EXEC for all (RQ's enqueue with a pipeline expects one)
                for old in waiting:
                    old.delete(pipeline=pipe)
                for job in jobs:
                    self._enqueue_step(pipe, job, now)
                pipe.execute()
        except Exception as exc:
            reporting.report(exc, "enqueue", engine=self, **_shared_by(jobs))
            log.exception("pgbus: step %s could not be enqueued on %s; the sweep will resend it",
                          ", ".join(str(job.step_id) for job in jobs),
                          ", ".join(sorted({repr(job.queue) for job in jobs})))

    def _enqueue_step(self, pipe: Pipeline, job: StepJob, now: datetime) -> None:
        q = self.queue(job.queue)
        options: dict[str, Any] = {
            "args": (job.step_id,),
            "job_timeout": self.step_job_timeout(job.timeout),
            "result_ttl": 0,
            "failure_ttl": FAILURE_TTL,
            "description": job.description,
            "pipeline": pipe,
        }
        for delivery in range(self.deliveries):
            jid = job.job_id if delivery == 0 else f"{job.job_id}-{delivery}"
            if job.at is not None and job.at > now:
                q.enqueue_at(whole_second_after(job.at), STEP_JOB, job_id=jid, **options)
            else:
                q.enqueue(STEP_JOB, job_id=jid, **options)

    def send_rate_wake(self, name: str, queue: str, at: datetime) -> None:
        """Enqueue the wake-up of rate ``name`` for ``at`` (RQ's scheduler holds it); a failure is
        logged, the sweep sends it again."""
        digest = hashlib.sha1(name.encode()).hexdigest()[:16]
        job_id = f"pgbus-rate-{digest}-{int(at.timestamp() * 1000)}"
        try:
            self.queue(queue).enqueue_at(whole_second_after(at), RATE_JOB, name, job_id=job_id, result_ttl=0,
                                         failure_ttl=FAILURE_TTL, description=f"wake rate {name}")
        except Exception as exc:
            reporting.report(exc, "enqueue", engine=self)
            log.exception("pgbus: the wake-up of rate %r could not be enqueued; the sweep will send it", name)

    def send_children(self, batch_id: int, queue: str, children: Iterable[tuple[int, str]]) -> None:
        """Enqueue fan-out children ``(position, job_id)`` in one Redis round trip; a failure is
        logged, the sweep resends."""
        try:
            q = self.queue(queue)
            with self.redis.pipeline() as pipe:
                pipe.multi()
                for position, job_id in children:
                    for delivery in range(self.deliveries):
                        jid = job_id if delivery == 0 else f"{job_id}-{delivery}"
                        q.enqueue_call(CHILD_JOB, args=(batch_id, position), job_id=jid, result_ttl=0,
                                       failure_ttl=FAILURE_TTL, timeout=int(self.settings.step_timeout.total_seconds()),
                                       description=f"pgbus batch {batch_id} child {position}", pipeline=pipe)
                pipe.execute()
        except Exception as exc:
            reporting.report(exc, "enqueue", engine=self)
            log.exception("pgbus: children of batch %s could not be enqueued; the sweep will resend them", batch_id)


def whole_second_after(moment: datetime) -> datetime:
    """``moment`` rounded up to a whole second: RQ's schedule keeps whole seconds and drops the
    fraction, which would send a step up to a second before it is due."""
    return moment if moment.microsecond == 0 else moment.replace(microsecond=0) + timedelta(seconds=1)


@dataclass(frozen=True)
class StepJob:
    """One step job to send: what RQ needs, and the step's earlier job it replaces (withdrawn
    if it is still queued or scheduled, so a step has one live job at a time)."""

    step_id: int
    job_id: str
    queue: str
    at: datetime | None
    timeout: timedelta
    description: str
    replaces: str | None = None
    #: The step's run, class, name and attempt (what an error report of its send is tagged with).
    workflow_id: Any = None
    workflow_class: str | None = None
    step_name: str | None = None
    attempt: int | None = None


def _shared_by(jobs: Sequence[StepJob]) -> dict[str, Any]:
    """The run, class, step and attempt of the jobs, each where they all have the same one (else None)."""
    first = jobs[0]
    return {name: value if all(getattr(job, attr) == value for job in jobs) else None
            for name, attr, value in (("run_id", "workflow_id", first.workflow_id),
                                      ("workflow_class", "workflow_class", first.workflow_class),
                                      ("step", "step_name", first.step_name), ("attempt", "attempt", first.attempt))}


def resolve_engine(bus: Any = None) -> Engine:
    """The engine to act on: ``bus`` if given (an Engine or PgBus), else the current
    Flask app's, else the process default (the worker's, or the last standalone bus),
    else one built once per process from the ``PGBUS_*`` environment (see
    :func:`engine_from_environ`).
    """
    if bus is not None:
        return bus if isinstance(bus, Engine) else bus.engine
    try:
        state = current_app.extensions.get("pgbus")
    except RuntimeError:
        state = None
    if state is not None:
        return state  # type: ignore[no-any-return]
    if _default is not None:
        return _default
    return engine_from_environ()


def default_engine_is_unset() -> bool:
    """True until an engine was made the process default (the first ``PgBus(app)`` does)."""
    return _default is None


def engine_from_environ() -> Engine:
    """The process default engine, built from ``PGBUS_*`` environment variables (and
    ``PGBUS_IMPORT``'s modules imported) the first time it is needed: what lets a plain
    ``rq worker`` of any worker class run step jobs. Thread-safe; a forked child inherits
    the engine and its Database opens a pool of its own.
    """
    global _default
    with _default_lock:
        if _default is not None:
            return _default
        missing = [name for name in ("PGBUS_DATABASE_URL", "PGBUS_REDIS_URL") if not os.environ.get(name)]
        if missing:
            raise PgbusError(
                "no pgbus engine: create PgBus(app) or PgBus(database_url=..., redis_url=...) first,"
                f" or set {' and '.join(missing)} (and PGBUS_IMPORT, the modules declaring your workflows)"
                " in the environment of this process (a plain `rq worker` needs all three)"
            )
        settings = Settings.from_environ()
        engine = Engine(settings)
        try:
            for module in settings.imports:
                try:
                    importlib.import_module(module)
                except ImportError as exc:
                    raise ConfigError("PGBUS_IMPORT", f"names {module!r}, which cannot be imported: {exc}") from exc
        except BaseException:
            engine.close()
            raise
        _default = engine
        log.info("pgbus: engine built from the PGBUS_* environment (imported: %s)",
                 ", ".join(settings.imports) or "nothing")
        return engine


def _after_fork_in_child() -> None:
    # A fork while another thread held the lock would leave it held forever in the child.
    global _default_lock
    _default_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
