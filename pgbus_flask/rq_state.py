"""What RQ still holds of pgbus's jobs: the sweep asks before it resends anything.

A step that has waited in the queue longer than the stall threshold is not lost:
its job is still queued. Only a job that is neither queued, scheduled nor
running is lost (Redis restarted without persistence, the job deleted, or it
ended in RQ without its step being claimed), and a job "running" on a worker
that is gone is not running: RQ would say so only at its next maintenance
(every 10 minutes, once the job's own timeout has passed). :func:`job_statuses`
answers for a whole batch in two pipelined round trips, whatever its size (a
third, rare, for jobs found in RQ's intermediate list).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from redis import Redis
from rq import Queue
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, JobStatus
from rq.utils import as_text, utcparse
from rq.worker import Worker

#: Statuses of a job RQ will still run (or is running): such a job is not lost.
LIVE = frozenset({JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.STARTED, JobStatus.DEFERRED,
                  JobStatus.CREATED, JobStatus.READY_TO_ENQUEUE, JobStatus.RATE_LIMITED})
#: Statuses of a job that ended in RQ without a result anyone reads (its worker died, or it was stopped).
DIED = frozenset({JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED})
#: How long RQ keeps its "first seen in the intermediate list" mark (what RQ's own cleanup uses).
FIRST_SEEN_TTL = 24 * 3600


def job_statuses(redis: Redis, job_ids: Sequence[str | None], *, stale_after: float,
                 claims_at_start: bool = False) -> dict[str, JobStatus | None]:
    """RQ's status of each job, checked against where that status says the job is.

    ``None``: Redis holds no such job, or it says scheduled but the scheduled registry does not
    hold it, or holds it ``stale_after`` seconds past its time (no scheduler is running to
    enqueue it), or its hash says queued while no queue list holds it (a worker took it and
    never started it: from RQ's intermediate list when it reads one queue, from no list at all
    when it reads several, as pgbus-worker does with the priority bands) and an earlier look,
    this function's or RQ's own cleanup's, already found it so (the first look marks it, as RQ's
    cleanup does; a live worker moves a job on within milliseconds).

    ``FAILED`` for a job RQ says started on a worker whose key (``rq:worker:<name>``, which a
    live worker keeps alive past its job's timeout) is gone: what RQ's own cleanup makes of it
    later (AbandonedJobError). With ``claims_at_start`` (step jobs whose step is still
    unclaimed: a step job claims its step before anything else) the same for a started job
    whose heartbeat is older than ``stale_after``: its worker died or hangs before the claim
    (a forking worker refreshes the heartbeat while its horse runs; a simple worker only
    when it starts the job).

    Everything else is the hash's status, read again after those checks when they were made
    (a job a worker or the scheduler moved on in between has its new status).

    :param job_ids: the ids to check (``None`` entries are skipped).
    :param stale_after: seconds past its time after which a scheduled job counts as lost (and,
        with ``claims_at_start``, seconds without a heartbeat after which a started one does).
    """
    ids = [job_id for job_id in dict.fromkeys(job_ids) if job_id]
    if not ids:
        return {}
    with redis.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.hmget(Job.key_for(job_id), "status", "origin", "worker_name")
        stored = pipe.execute()
    statuses, probes, answers = _probe(redis, ids, stored)
    dequeued = _judge(probes, answers, statuses, stale_after=stale_after, claims_at_start=claims_at_start)
    if dequeued:
        _seen_dequeued(redis, dequeued, statuses)
    return statuses


#: A job whose status is checked against where it says it is: (job id, status, its queue).
Probe = tuple[str, JobStatus, Queue]


def _probe(redis: Redis, ids: Sequence[str], stored: Sequence[Sequence[bytes | None]]
           ) -> tuple[dict[str, JobStatus | None], list[Probe], Iterator[Any]]:
    """The statuses of the jobs' hashes (``stored``), and one round trip asking where each job
    that has a queue, a schedule or a worker is: the probes made, and their answers in order."""
    statuses: dict[str, JobStatus | None] = {}
    probes: list[Probe] = []
    queues: dict[str, Queue] = {}
    with redis.pipeline(transaction=False) as pipe:
        for job_id, (raw_status, raw_origin, raw_worker) in zip(ids, stored, strict=True):
            status = _status(raw_status)
            if status is None or raw_origin is None:
                statuses[job_id] = None
                continue
            statuses[job_id] = status
            origin = as_text(raw_origin)
            queue = queues.get(origin) or queues.setdefault(origin, Queue(origin, connection=redis))
            # Probed in the order a job moves (queue, intermediate list, started; or scheduled
            # registry, queue), each followed by its status again: a job that moved on between
            # the two round trips shows a later status instead of looking lost.
            if status == JobStatus.QUEUED:
                pipe.lpos(queue.key, job_id)
                pipe.lpos(IntermediateQueue.get_intermediate_queue_key(queue.key), job_id)
            elif status == JobStatus.SCHEDULED:
                pipe.zscore(queue.scheduled_job_registry.key, job_id)
            elif status == JobStatus.STARTED and raw_worker:
                pipe.exists(Worker.redis_worker_namespace_prefix + as_text(raw_worker))
            else:
                continue
            pipe.hmget(Job.key_for(job_id), "status", "last_heartbeat")
            probes.append((job_id, status, queue))
        answers = iter(pipe.execute() if probes else [])
    return statuses, probes, answers


def _judge(probes: Sequence[Probe], answers: Iterator[Any], statuses: dict[str, JobStatus | None], *,
           stale_after: float, claims_at_start: bool) -> list[tuple[str, Queue]]:
    """Set each probed job's status from the answers (see :func:`job_statuses`); return the queued
    jobs no queue list holds, which one more look decides."""
    now = time.time()
    dequeued: list[tuple[str, Queue]] = []
    for job_id, status, queue in probes:
        only_dequeued = False
        if status == JobStatus.QUEUED:
            in_queue, _in_intermediate = next(answers), next(answers)
            # In no list: a worker reading several queues (BLPOP, no intermediate list) popped it and
            # has not started it yet, or its list was lost: as a job only the intermediate list
            # holds, lost only when an earlier look found it so too.
            held = True
            only_dequeued = in_queue is None
        elif status == JobStatus.SCHEDULED:
            due = next(answers)
            held = due is not None and float(due) >= now - stale_after
        else:
            held = bool(next(answers))  # the worker's key: gone once it died (its TTL ran out)
        raw_now, raw_heartbeat = next(answers)
        again = _status(raw_now)
        if again != status:
            statuses[job_id] = again  # it moved on (or ended) since the first look
        elif status == JobStatus.STARTED:
            if not held or (claims_at_start and _older(raw_heartbeat, now - stale_after)):
                statuses[job_id] = JobStatus.FAILED  # abandoned: what RQ's cleanup will call it
        elif not held:
            statuses[job_id] = None
        elif only_dequeued:
            dequeued.append((job_id, queue))
    return dequeued


def _older(raw: bytes | str | None, cutoff: float) -> bool:
    """Whether a job's ``last_heartbeat`` is older than ``cutoff`` (False when it has none)."""
    if raw is None:
        return False
    try:
        return utcparse(as_text(raw)).timestamp() < cutoff
    except ValueError:
        return False


def _seen_dequeued(redis: Redis, dequeued: Sequence[tuple[str, Queue]],
                   statuses: dict[str, JobStatus | None]) -> None:
    """Jobs queued in no queue list (taken by a worker, not started): lost when an earlier look
    already found them so. The mark is RQ's own (``IntermediateQueue.set_first_seen``), so RQ's
    cleanup and the sweep agree on when a job was first seen; its status is read again with it."""
    with redis.pipeline(transaction=False) as pipe:
        for job_id, queue in dequeued:
            key = IntermediateQueue(queue.key, redis).get_first_seen_key(job_id)
            pipe.set(key, time.time(), nx=True, ex=FIRST_SEEN_TTL)
            pipe.hget(Job.key_for(job_id), "status")
        answers = iter(pipe.execute())
    for job_id, _ in dequeued:
        first_look, again = next(answers), _status(next(answers))
        if again != JobStatus.QUEUED:
            statuses[job_id] = again
        elif not first_look:
            statuses[job_id] = None


def _status(raw: bytes | str | None) -> JobStatus | None:
    if raw is None:
        return None
    try:
        return JobStatus(as_text(raw))
    except ValueError:  # a status a newer RQ added: assume RQ still has plans for the job
        return JobStatus.CREATED
