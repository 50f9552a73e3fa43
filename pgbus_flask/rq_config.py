"""Settings module for a plain ``rq worker``: ``rq worker -c pgbus_flask.rq_config`` (or
``RQ_CONFIG=pgbus_flask.rq_config``).

RQ imports this module in the worker process before it forks any horse. Importing it builds
the pgbus engine from the ``PGBUS_*`` environment, as a step job would (settings read and
checked, PGBUS_IMPORT's modules imported), imports the job functions and parses the library's
statements, all without opening a connection. RQ's own forking ``Worker`` (what ``rq worker``
runs with no ``-w``) then hands every horse the finished engine instead of each horse
importing the library and your workflows and building it again (docs/scaling.md has the
figures). A missing or bad setting stops ``rq worker`` at start, with the setting named.

RQ reads the module's upper-case names as its settings: ``REDIS_URL`` (PGBUS_REDIS_URL, so
``--url`` may be left out; a ``redis+sentinel://`` URL becomes RQ's ``SENTINEL``) and
``QUEUES`` (the queues the registered workflows use with their priority bands, high first,
when no queue is named on the command line). Any other upper-case name here would be read by RQ
too: keep imports lower-case.
"""

from __future__ import annotations

from typing import Any

from pgbus_flask import db as _db
from pgbus_flask import jobs as _jobs  # noqa: F401  (imported here, not in every horse)
from pgbus_flask.config import is_sentinel_url as _is_sentinel_url
from pgbus_flask.config import rq_sentinel_settings as _rq_sentinel_settings
from pgbus_flask.config import sentinel_url as _sentinel_url
from pgbus_flask.engine import engine_from_environ as _engine_from_environ


def _rq_settings() -> dict[str, Any]:
    engine = _engine_from_environ()
    _db.prepare_for_fork()
    url = engine.settings.redis_url
    assert url is not None
    out: dict[str, Any] = {"QUEUES": engine.queue_names()}
    if not _is_sentinel_url(url):
        out["REDIS_URL"] = url
        return out
    out["SENTINEL"] = _rq_sentinel_settings(_sentinel_url(url))
    return out


globals().update(_rq_settings())
