"""pgbus-worker stops promptly: RQ's command-channel thread does not hold it for a minute."""

from __future__ import annotations

import time

from pgbus_flask.engine import Engine
from pgbus_flask.worker.runner import PUBSUB_WAIT, PgbusForkWorker, PgbusWorker


def test_the_command_channel_thread_looks_at_its_stop_flag_every_second(engine: Engine) -> None:
    """RQ listens with ``sleep_time=60``; since redis-py 8.2 stopping waits for that thread, so a
    SIGTERMed idle worker could take up to a minute to exit. Ours wait at most PUBSUB_WAIT."""
    for cls in (PgbusWorker, PgbusForkWorker):
        for _ in range(5):
            worker = cls([engine.queue("pgbus")], connection=engine.redis)
            worker.subscribe()
            try:
                assert worker.pubsub_thread.sleep_time == PUBSUB_WAIT == 1.0
                time.sleep(0.05)  # the thread is in its wait
            finally:
                began = time.monotonic()
                worker.unsubscribe()
                took = time.monotonic() - began
            assert took < PUBSUB_WAIT + 2, f"{cls.__name__} took {took:.1f} s to stop listening"
