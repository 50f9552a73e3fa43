"""What RQ still holds of pgbus's jobs: the sweep asks before it resends anything.

A step that has waited in the queue longer than the stall threshold is not lost:
its job is still queued. Only a job that is neither queued, scheduled nor
running is lost (Redis restarted without persistence, the job deleted, or it
ended in RQ without its step being claimed). :func:`job_statuses` answers for
a whole batch in two pipelined round trips, whatever its size.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from redis import Redis
from rq import Queue
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, JobStatus
from rq.utils import as_text

#: Statuses of a job RQ will still run (or is running): such a job is not lost.
LIVE = frozenset({JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.STARTED, JobStatus.DEFERRED,
                  JobStatus.CREATED, JobStatus.READY_TO_ENQUEUE, JobStatus.RATE_LIMITED})
#: Statuses of a job that ended in RQ without a result anyone reads (its worker died, or it was stopped).
DIED = frozenset({JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED})


def job_statuses(redis: Redis, job_ids: Sequence[str | None], *, stale_after: float) -> dict[str, JobStatus | None]:
    """RQ's status of each job, checked against where that status says the job is.

    ``None``: Redis holds no such job, or its hash says queued but no queue list holds its id
    (a worker that died between dequeue and start leaves it in the intermediate list, which
    counts as queued), or it says scheduled but the scheduled registry does not hold it, or
    holds it ``stale_after`` seconds past its time (no scheduler is running to enqueue it).
    Everything else is the hash's status, read again after those checks when they were made
    (a job a worker or the scheduler moved on in between has its new status). Two pipelined
    round trips for the whole batch.

    :param job_ids: the ids to check (``None`` entries are skipped).
    :param stale_after: seconds past its time after which a scheduled job counts as lost.
    """
    ids = [job_id for job_id in dict.fromkeys(job_ids) if job_id]
    if not ids:
        return {}
    with redis.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.hmget(Job.key_for(job_id), "status", "origin")
        stored = pipe.execute()
    statuses: dict[str, JobStatus | None] = {}
    probes: list[tuple[str, JobStatus]] = []
    queues: dict[str, Queue] = {}
    with redis.pipeline(transaction=False) as pipe:
        for job_id, (raw_status, raw_origin) in zip(ids, stored, strict=True):
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
            else:
                continue
            pipe.hget(Job.key_for(job_id), "status")
            probes.append((job_id, status))
        answers = iter(pipe.execute() if probes else [])
    cutoff = time.time() - stale_after
    for job_id, status in probes:
        if status == JobStatus.QUEUED:
            in_queue, in_intermediate = next(answers), next(answers)
            held = in_queue is not None or in_intermediate is not None
        else:
            due = next(answers)
            held = due is not None and float(due) >= cutoff
        now = _status(next(answers))
        if now != status:
            statuses[job_id] = now  # it moved on (or ended) since the first look
        elif not held:
            statuses[job_id] = None
    return statuses


def _status(raw: bytes | str | None) -> JobStatus | None:
    if raw is None:
        return None
    try:
        return JobStatus(as_text(raw))
    except ValueError:  # a status a newer RQ added: assume RQ still has plans for the job
        return JobStatus.CREATED
