"""``<prefix>/metrics``: Prometheus's view of pgbus (``PGBUS_METRICS``), behind the dashboard's auth or a token.

A scrape reads three gauges from PostgreSQL, from the same sources as the
dashboard's overview, so its cost does not grow with the runs:

- ``pgbus_runs{workflow_class, status}``: the count rows of ``pgbus_run_counts``;
- ``pgbus_runs_needing_attention{workflow_class, reason}``: the paused ones from
  ``pgbus_run_counts``, the overdue ones counted up to ``queries.COUNT_CAP`` an
  attention group in ``pgbus_workflows_attention_due_groups`` (``queries.stuck_reason_counts``);
- ``pgbus_runs_needing_attention_capped{workflow_class, reason}``: 1 when that count
  stopped at the cap (it is then a lower bound), else 0;
- ``pgbus_oldest_overdue_step_age_seconds{workflow_class}``: the first due run of each
  overdue group;
- ``pgbus_limit_capacity{limit, kind}``, ``pgbus_limit_slots_in_use{limit, kind}`` and
  ``pgbus_limit_runs_waiting{limit, kind}``: each flow-control limit and rate by its name, never by
  a key's value (``queries.limits``, which reads each name's index ranges).

and adds this process's own counters and histograms (:mod:`pgbus_flask.metrics`).

Who may read it: a request whose ``Authorization: Bearer`` token is
``PGBUS_METRICS_TOKEN`` (compared in constant time), or any request the
dashboard's own auth lets in. Anything else is a 401 in plain text, with a
``WWW-Authenticate: Bearer`` challenge (a 400 when an open dashboard's host check refuses it).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
from flask import Blueprint, Flask, Response, g, request
from markupsafe import Markup
from werkzeug.exceptions import Unauthorized

from .. import attention, metrics, queries, states
from ..config import Settings
from ..engine import Engine
from ..errors import PgbusError
from . import security
from .i18n import gettext

log = logging.getLogger("pgbus_flask.web")

ENDPOINT = "pgbus.metrics"


class DatabaseGauges:
    """The gauges read from PostgreSQL when Prometheus scrapes (a ``prometheus_client`` collector)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        up = GaugeMetricFamily("pgbus_database_up",
                               "1 when this scrape read pgbus's counts from PostgreSQL, 0 when it could not"
                               " (the pgbus_runs* gauges are missing then)")
        try:
            counts = queries.status_counts(self.engine)
            stuck = queries.stuck_reason_counts(self.engine)
            oldest = queries.oldest_overdue(self.engine)
            limits = queries.limits(self.engine, top=0)
        except (PgbusError, psycopg.Error) as exc:
            log.warning("pgbus metrics: could not read the gauges from PostgreSQL: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        classes = sorted({cls for cls, _ in counts} | {cls for cls, _ in stuck} | set(oldest))
        runs = GaugeMetricFamily("pgbus_runs", "Runs by workflow class and status",
                                 labels=["workflow_class", "status"])
        needing = GaugeMetricFamily("pgbus_runs_needing_attention",
                                    "Ongoing runs that need a person, by workflow class and stuck reason",
                                    labels=["workflow_class", "reason"])
        capped = GaugeMetricFamily("pgbus_runs_needing_attention_capped",
                                   "1 when pgbus_runs_needing_attention of this class and reason is a lower bound:"
                                   " an attention group had more overdue runs than the read counts (queries.COUNT_CAP)",
                                   labels=["workflow_class", "reason"])
        age = GaugeMetricFamily("pgbus_oldest_overdue_step_age_seconds",
                                "Seconds since the oldest overdue step of each workflow class was due"
                                " (0: none is overdue)", labels=["workflow_class"])
        reasons = attention.PAUSED_REASONS + (
            attention.DUE_REASONS if self.engine.settings.waiting_threshold is not None else ("overdue",))
        for cls in classes:
            for status in states.RUN_STATUSES:
                runs.add_metric([cls, status], counts.get((cls, status), 0))
            for reason in reasons:
                needing.add_metric([cls, reason], stuck.get((cls, reason), 0))
                capped.add_metric([cls, reason], 1 if (cls, reason) in stuck.capped else 0)
            age.add_metric([cls], oldest.get(cls, 0.0))
        yield runs
        yield needing
        yield capped
        yield age
        yield from limit_gauges(limits)


def limit_gauges(limits: list[queries.LimitUse]) -> Iterator[Any]:
    """The flow-control gauges, one series per limit or rate name and kind (a bounded set: the names
    are declared in code; a key's value, which comes from the runs' arguments, is never a label)."""
    from prometheus_client.core import GaugeMetricFamily

    labels = ["limit", "kind"]
    capacity = GaugeMetricFamily("pgbus_limit_capacity", "What a limit allows at once, or a rate per window"
                                 " (kind: run for a class's limit, step for a step's, rate)", labels=labels)
    in_use = GaugeMetricFamily("pgbus_limit_slots_in_use", "Slots of a limit held now, over all its keys (a rate:"
                               " the starts of its current window)", labels=labels)
    waiting = GaugeMetricFamily("pgbus_limit_runs_waiting", "Runs in line for a limit or a rate", labels=labels)
    for use in limits:
        capacity.add_metric([use.name, use.kind], use.capacity)
        in_use.add_metric([use.name, use.kind], use.in_use)
        waiting.add_metric([use.name, use.kind], use.waiting)
    yield capacity
    yield in_use
    yield waiting


def register(bp: Blueprint, engine: Engine) -> None:
    """Add ``/metrics`` to the dashboard blueprint when ``PGBUS_METRICS`` is on (else it is a 404)."""
    if not engine.settings.metrics:
        return
    registry = metrics.registry_of(DatabaseGauges(engine), metrics.REGISTRY)

    @bp.get("/metrics", endpoint="metrics")
    def metrics_view() -> Response:
        body, content_type = metrics.exposition(registry)
        return Response(body, 200, content_type=content_type)


def _plain(text: str) -> str:
    return text.striptags() if isinstance(text, Markup) else text


def _bearer() -> str | None:
    """The token of an ``Authorization: Bearer`` header (the scheme in any case), else None."""
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def authorize(settings: Settings, app: Flask) -> Response | None:
    """None when this request may read the metrics (and ``g.pgbus_actor`` says who), else the 401.

    A bearer token equal to ``PGBUS_METRICS_TOKEN`` is enough; otherwise the dashboard's auth decides
    (so a signed-in operator can open the metrics in a browser), and a Forbidden its auth raises for a
    signed-in user who is not an operator stays a 403.
    """
    token = _bearer()
    expected = settings.metrics_token
    if token is not None and expected is not None and hmac.compare_digest(
            token.encode("latin-1", "replace"), expected.encode("ascii")):
        g.pgbus_actor = "metrics:token"
        return None
    open_dashboard = app.debug or app.testing or settings.dashboard_public
    if settings.dashboard_auth is not None or open_dashboard:
        try:
            g.pgbus_actor = security.authenticate(settings, app)
            return None
        except Unauthorized:
            pass
        except security.HostRefused as refused:
            # An open dashboard at a host it does not answer at (DNS rebinding): the token still works.
            return Response(_plain(refused.description or "") + "\n", 400, content_type="text/plain; charset=utf-8")
    if token is not None:
        message = gettext("This bearer token is not accepted: send the token set in PGBUS_METRICS_TOKEN.")
    else:
        message = gettext("Sign in to the dashboard to read the metrics, or send the header "
                          "“Authorization: Bearer <token>” with the token set in PGBUS_METRICS_TOKEN.")
    return Response(message + "\n", 401, content_type="text/plain; charset=utf-8",
                    headers={"WWW-Authenticate": 'Bearer realm="pgbus metrics"'})
