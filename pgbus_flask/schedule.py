"""What a workflow class declares about recurring starts, and when its ticks fall.

``schedule = "0 2 * * *"`` is cron, read by cronsim in ``schedule_timezone`` (Debian
cron's rules across DST changes: a time the clocks skip runs at the first minute after
the jump, a time they repeat runs once); ``schedule = timedelta(minutes=5)`` ticks at
whole multiples of the interval since 1970-01-01 00:00 UTC (so at :00, :05, :10 ...,
whoever computes them). The declaration layer: no database here. The stored rows and the
sweep's part are :mod:`pgbus_flask.schedules`; why cronsim is in docs/schedules.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from . import payload, states
from .errors import ArgumentsNotSerializable, DefinitionError

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The keyword argument a scheduled run gets its tick in (``self.tick`` reads it).
TICK_KWARG = "tick"
#: The nicknames cron knows, as the five fields they stand for.
CRON_ALIASES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
#: The class attributes of a schedule; the others need ``schedule``.
ATTRIBUTES = ("schedule", "schedule_timezone", "schedule_missed", "schedule_kwargs")


@dataclass(frozen=True)
class ScheduleSpec:
    """One class's declared schedule: ``kind`` "cron" (``text`` the expression as declared) or
    "interval" (``text`` the whole seconds, ``interval`` the same as a timedelta)."""

    kind: str
    text: str
    timezone: str = "UTC"
    missed: str = "skip"
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    interval: timedelta | None = None

    @property
    def cron(self) -> str:
        """The cron expression cronsim reads (a nickname as its five fields)."""
        return CRON_ALIASES.get(self.text.lower(), self.text)

    def zone(self) -> tzinfo:
        return UTC if self.timezone == "UTC" else ZoneInfo(self.timezone)

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment`` (aware), in UTC."""
        moment = moment.astimezone(UTC)
        if self.interval is not None:
            step = _micros(self.interval)
            return EPOCH + timedelta(microseconds=(_micros(moment - EPOCH) // step + 1) * step)
        return next(CronSim(self.cron, moment.astimezone(self.zone()))).astimezone(UTC)

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        """The last tick at or before ``moment``, in UTC (None: cron found none in 50 years)."""
        moment = moment.astimezone(UTC)
        if self.interval is not None:
            step = _micros(self.interval)
            return EPOCH + timedelta(microseconds=_micros(moment - EPOCH) // step * step)
        # Back two ticks with cronsim's reverse iteration (fast after a long downtime), then
        # forward from there: the ticks are the forward ones, whatever reverse does at a DST change.
        probe = (moment.replace(microsecond=0) + timedelta(seconds=1)).astimezone(self.zone())
        back = CronSim(self.cron, probe, reverse=True)
        try:
            start = [next(back), next(back)][-1].astimezone(UTC) - timedelta(seconds=1)
        except StopIteration:
            return None
        latest = None
        tick = self.next_after(start)
        while tick <= moment:
            latest, tick = tick, self.next_after(tick)
        return latest

    def describe(self) -> dict[str, Any]:
        """What the stored row keeps (and compares) of the declaration."""
        return {"kind": self.kind, "schedule": self.text, "timezone": self.timezone, "missed": self.missed,
                "arguments": payload.to_json(dict(self.kwargs), what="schedule_kwargs")}


def _micros(delta: timedelta) -> int:
    return delta // timedelta(microseconds=1)


def tick_key(workflow_class: str, tick: datetime) -> str:
    """The idempotency key of the run a tick starts: ``schedule:<class>:<tick ISO UTC>``."""
    return f"schedule:{workflow_class}:{tick.astimezone(UTC).isoformat()}"


def from_class(name: str, attrs: Mapping[str, Any], own: Mapping[str, Any]) -> ScheduleSpec | None:
    """The schedule a class declares (``attrs``: its resolved ``schedule*`` attributes; ``own``:
    the ones set in its own body), or None; DefinitionError naming what is wrong."""
    schedule = attrs.get("schedule")
    if schedule is None:
        stray = [a for a in ATTRIBUTES[1:] if a in own and own[a] is not None]
        if stray:
            raise DefinitionError(f"{name}: {', '.join(stray)} needs schedule (a cron string or a timedelta)")
        return None
    zone = attrs.get("schedule_timezone") or "UTC"
    missed = attrs.get("schedule_missed") or "skip"
    kwargs = attrs.get("schedule_kwargs")
    if missed not in states.SCHEDULE_MISSED:
        raise DefinitionError(f"{name}: schedule_missed must be one of {states.SCHEDULE_MISSED}, got {missed!r}")
    kwargs = _kwargs(name, {} if kwargs is None else kwargs)
    if isinstance(schedule, timedelta):
        if schedule <= timedelta(0) or schedule % timedelta(seconds=1):
            raise DefinitionError(f"{name}: a timedelta schedule must be a positive whole number of seconds, "
                                  f"got {schedule!r}")
        if zone != "UTC":
            raise DefinitionError(f"{name}: schedule_timezone is for cron schedules; a timedelta schedule ticks "
                                  f"at whole multiples of it since 1970-01-01 UTC (got {zone!r})")
        return ScheduleSpec("interval", str(int(schedule.total_seconds())), "UTC", missed, kwargs, schedule)
    if not isinstance(schedule, str) or isinstance(schedule, bool):
        raise DefinitionError(f"{name}: schedule must be a cron string such as '0 2 * * *' or a positive "
                              f"timedelta, got {type(schedule).__name__} {schedule!r:.100}")
    _check_zone(name, zone)
    text = " ".join(schedule.split())
    spec = ScheduleSpec("cron", text, zone, missed, kwargs)
    if not text or payload.needs_escape(text) or len(text) > states.NAME_LIMIT:
        raise DefinitionError(f"{name}: schedule {schedule!r:.100} is not a cron expression")
    try:
        spec.next_after(datetime.now(UTC))
    except CronSimError as exc:
        raise DefinitionError(f"{name}: schedule {text!r} is not a cron expression cronsim reads ({exc}; "
                              "five fields: minute hour day-of-month month day-of-week, or a nickname "
                              "such as @daily)") from None
    except StopIteration:
        raise DefinitionError(f"{name}: schedule {text!r} never fires (no tick in the next 50 years)") from None
    return spec


def _check_zone(name: str, zone: Any) -> None:
    if not isinstance(zone, str):
        raise DefinitionError(f"{name}: schedule_timezone must be an IANA timezone name such as "
                              f"'Europe/Berlin', got {zone!r:.100}")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise DefinitionError(f"{name}: schedule_timezone {zone!r:.100} is not a timezone zoneinfo knows "
                              "(an IANA name such as 'Europe/Berlin')") from None


def _kwargs(name: str, kwargs: Any) -> dict[str, Any]:
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise DefinitionError(f"{name}: schedule_kwargs must be a dict with string keys, got {kwargs!r:.100}")
    if TICK_KWARG in kwargs:
        raise DefinitionError(f"{name}: schedule_kwargs cannot hold {TICK_KWARG!r}: a scheduled run gets its "
                              "tick there")
    try:
        payload.to_json(dict(kwargs), what="schedule_kwargs")
    except ArgumentsNotSerializable as exc:
        raise DefinitionError(f"{name}: {exc}") from None
    return dict(kwargs)
