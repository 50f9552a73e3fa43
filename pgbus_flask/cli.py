"""``flask pgbus ...``: migrate, sweep, read runs and act on them, list, pause and resume schedules
(actor ``cli:$USER``).

A run is named by its id or a unique prefix of it (at least 4 hex digits). Bad
input (a malformed value, an ambiguous prefix, anything pgbus refuses as
:class:`~pgbus_flask.errors.InvalidInput`) ends as a one-line message and exit
status 2 with nothing changed; every other pgbus error (no such run, a verb not
allowed now, PostgreSQL down) as a one-line message and exit status 1. Text that
came from users or steps is printed with control and bidi characters escaped, so
it cannot drive or reorder the terminal.
"""

from __future__ import annotations

import getpass
import json
import time
from datetime import datetime, timezone
from typing import Any

import click
from flask import current_app
from flask.cli import with_appcontext

from . import payload, queries, schedules, states
from .engine import Engine
from .errors import InvalidInput, PgbusError, StepNotDefined
from .handle import Run
from .present.text import error_text, moment, terminal_safe
from .runner import ResumePlan
from .verbs import BULK_ACTIONS, MOMENT, RUN_VERBS, Verb

# What the caller got wrong (exit status 2); every other pgbus error exits with 1.
_BAD_INPUT = (InvalidInput, StepNotDefined)
_message = error_text


def _echo(line: str) -> None:
    click.echo(terminal_safe(line))


class BadInput(click.ClickException):
    """A value the command cannot use: its message, and exit status 2 (as click's usage errors)."""

    exit_code = 2


def _engine() -> Engine:
    engine = current_app.extensions.get("pgbus")
    if engine is None:
        raise click.ClickException("this app has no PgBus: call PgBus(app) in it")
    return engine  # type: ignore[no-any-return]


def _actor() -> str:
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    # The login name comes from the environment: escape and cut it (48 characters stay within
    # states.ACTOR_LIMIT bytes) rather than have every verb refuse it.
    return "cli:" + terminal_safe(user)[:48]


class _PgbusGroup(click.Group):
    """Every pgbus error ends as a one-line message: bad input with exit status 2, the rest 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _BAD_INPUT as exc:
            raise BadInput(_message(exc)) from None
        except PgbusError as exc:
            raise click.ClickException(_message(exc)) from None


def _runs(n: int) -> str:
    """"1 run", "3 runs"."""
    return f"{n:,} run" if n == 1 else f"{n:,} runs"


@click.group("pgbus", cls=_PgbusGroup, help="pgbus-flask workflows: schema, sweep, runs and the verbs on them.")
def pgbus_cli() -> None:
    pass


@pgbus_cli.command("migrate")
@click.option("--refresh-attention", is_flag=True,
              help="then recompute every ongoing run's attention columns (once, after rolling workers of a "
                   "version before migration 0004)")
@with_appcontext
def migrate_cmd(refresh_attention: bool) -> None:
    """Apply missing schema migrations (safe to run twice, and concurrently)."""
    from . import attention
    from .migrate import migrate

    engine = _engine()
    applied = migrate(engine.db)
    click.echo("applied: " + ", ".join(applied) if applied else "schema is up to date")
    if refresh_attention:
        with engine.db.connection() as conn:
            changed = attention.refresh_all(conn)
        click.echo(f"attention columns refreshed: {_runs(changed)} changed")


@pgbus_cli.command("sweep")
@click.option("--loop", is_flag=True, help="keep sweeping every PGBUS_SWEEP_INTERVAL")
@with_appcontext
def sweep_cmd(loop: bool) -> None:
    """Run the sweep once (or forever with --loop)."""
    from .sweep import sweep

    engine = _engine()
    while True:
        report = sweep(engine)
        _echo(str(report) if report.ran else "another sweeper holds the lock; nothing done")
        if not loop:
            return
        time.sleep(engine.settings.sweep_interval.total_seconds())


@pgbus_cli.command("runs")
@click.option("--class", "workflow_class", help="workflow class")
@click.option("--status", type=click.Choice(states.RUN_STATUSES))
@click.option("--step", help="current step")
@click.option("--reason", type=click.Choice(states.STUCK_REASONS), help="stuck reason")
@click.option("--limit", type=click.IntRange(1, queries.MAX_LIMIT), default=50, show_default=True,
              help=f"how many runs (1 to {queries.MAX_LIMIT})")
@with_appcontext
def runs_cmd(workflow_class: str | None, status: str | None, step: str | None, reason: str | None,
             limit: int) -> None:
    """List runs, newest first."""
    rows, _ = queries.list_runs(_engine(), queries.RunFilter(workflow_class=workflow_class, status=status,
                                                             step=step, reason=reason, limit=limit))
    for row in rows:
        subject = f"{row['subject_type']} {row['subject_id']}" if row["subject_type"] else "-"
        _echo(f"{row['workflow_id']}  {terminal_safe(row['workflow_class']):<24} {row['status']:<9} "
              f"{terminal_safe(row['current_step']):<20} {subject}")
    if not rows:
        click.echo("no runs")


def _run(workflow_id: str) -> Run:
    """The run named by its id or a unique prefix of it."""
    engine = _engine()
    return Run(engine, queries.resolve_run_id(engine, workflow_id))


@pgbus_cli.command("show")
@click.argument("workflow_id")
@with_appcontext
def show_cmd(workflow_id: str) -> None:
    """One run (by its id or a unique prefix of it): status, actions, steps and the audit trail."""
    run = _run(workflow_id)
    _echo(f"{run.workflow_class} {run.workflow_id}")
    _echo(f"  status: {run.status}   current step: {run.current_step}")
    if run.subject:
        _echo(f"  subject: {run.subject[0]} {run.subject[1]}")
    _echo(f"  actions: {', '.join(run.available_actions) or 'none'}")
    plan = run.resume_plan()
    if plan:
        _echo(f"  resume will: {plan.action} {plan.step or ''}".rstrip())
    if run.definition_outdated:
        click.echo("  started on an older definition of its class (upgrade, resume-at or cancel it)")
    if run.parent_id:
        _echo(f"  parent: {run.parent_id} (step {run.parent_step})")
    children = run.children()
    if children:
        click.echo("  child runs:")
        for c in children:
            _echo(f"    {c['workflow_id']}  {c['workflow_class']}  {c['status']} at {c['current_step']}"
                  f"  (started by {c['parent_step_name']})")
    click.echo("  steps:")
    for s in run.steps():
        error = f"  {s['error_class']}: {s['error_message']}" if s["error_class"] else ""
        _echo(f"    {s['step_name']} #{s['attempt']}  {s['status']}{error}")
    click.echo("  events:")
    for e in run.events():
        step = f" {e['step_name']} #{e['attempt']}" if e["step_name"] else ""
        why = f": {e['reason']}" if e["reason"] else ""
        _echo(f"    {e['created_at']:%Y-%m-%d %H:%M:%S}  {e['event']} by {e['actor']}{step}{why}")


class _Moment(click.ParamType):
    """An ISO 8601 date and time with a timezone that PostgreSQL can store (:func:`pgbus_flask.present.moment`)."""

    name = "datetime"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        try:
            return moment(value)
        except InvalidInput as exc:
            self.fail(exc.problem, param, ctx)


def _verb_command(verb: Verb) -> None:
    """The command of one verb of the table: its parameters as arguments (required) or options."""
    def command(workflow_id: str, reason: str | None, **params: Any) -> None:
        run = _run(workflow_id)
        result = run.act(verb.name, actor=_actor(), reason=reason, **params)
        if isinstance(result, ResumePlan):
            _echo(f"resumed: {result.action} {result.step or ''}".rstrip())
        _echo(f"{run.workflow_id}: {run.status} at {run.current_step}")

    command.__name__ = f"{verb.name}_cmd"
    command.__doc__ = verb.help + " WORKFLOW_ID is a run's id or a unique prefix of it."
    decorated: Any = click.option("--reason", help="why (recorded in the audit trail)")(command)
    for param in verb.params:
        kind = _Moment() if param.kind == MOMENT else None
        option = click.argument(param.name, type=kind) if param.required else \
            click.option(f"--{param.name}", default=None, type=kind)
        decorated = option(decorated)
    decorated = click.argument("workflow_id")(decorated)
    pgbus_cli.command(verb.command)(with_appcontext(decorated))


for _declared in RUN_VERBS:
    _verb_command(_declared)


@pgbus_cli.command("signal")
@click.argument("workflow_id")
@click.argument("name")
@click.option("--payload", "data", default=None, help="JSON payload")
@click.option("--key", default=None, help="idempotency key")
@click.option("--reason", default=None)
@with_appcontext
def signal_cmd(workflow_id: str, name: str, data: str | None, key: str | None, reason: str | None) -> None:
    """Send signal NAME to a run (by its id or a unique prefix of it)."""
    try:
        value = json.loads(data) if data is not None else None
    except RecursionError:
        raise BadInput("--payload is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
        raise BadInput(f"--payload is not JSON: {_message(exc)}") from None
    # Checked here too so that a bad name or payload is bad input (the runner's SignalRefused
    # also means "the run has ended").
    payload.check_text(name, "signal name", allow_newlines=False)
    if len(name) > states.NAME_LIMIT:
        raise BadInput(f"signal name is {len(name):,} characters long; at most {states.NAME_LIMIT} are allowed")
    payload.to_json(value, what="--payload")
    run = _run(workflow_id)
    result = run.signal(name, value, idempotency_key=key, actor=_actor(), reason=reason)
    what = "duplicate delivery: already stored as" if result.duplicate_delivery else "stored"
    _echo(f"{what} signal {result.id} ({result.status}); run is {run.status}")


@pgbus_cli.command("attention")
@click.option("--class", "workflow_class")
@with_appcontext
def attention_cmd(workflow_class: str | None) -> None:
    """Stuck runs grouped by class, step, reason and error, biggest first."""
    groups = queries.attention_groups(_engine(), workflow_class)
    for g in groups:
        count = f"{g.count}+" if g.capped else str(g.count)  # +: at least (counted up to queries.COUNT_CAP)
        line = terminal_safe(f"{count:>6}  {g.workflow_class}  {g.step_name}  {g.reason}  {g.error_class or '-'}"
                             f"  last {g.last_seen_at:%Y-%m-%d %H:%M}  {g.error_message or ''}")
        click.echo(line[:200])
    if not groups:
        click.echo("nothing needs attention")


@pgbus_cli.command("bulk")
@click.argument("action", type=click.Choice(BULK_ACTIONS))
@click.option("--class", "workflow_class", required=True)
@click.option("--step", required=True)
@click.option("--reason-of-group", "stuck", required=True, type=click.Choice(states.STUCK_REASONS),
              help="the group's stuck reason")
@click.option("--error-class", default=None, help="the group's error class (omit for none)")
@click.option("--reason", default=None, help="why (recorded on every run)")
@with_appcontext
def bulk_cmd(action: str, workflow_class: str, step: str, stuck: str, error_class: str | None,
             reason: str | None) -> None:
    """Resume, skip or cancel every run of one attention group (at most 500, oldest first)."""
    engine = _engine()
    ids = queries.attention_ids(engine, workflow_class, step, stuck, error_class)
    with click.progressbar(ids, label=f"{action} {_runs(len(ids))}") as bar:
        # the same input is refused for every run: stop at the first, nothing changed
        result = queries.act_on_each(engine, action, bar, actor=_actor(), reason=reason, stop_on_bad_input=True)
    click.echo(f"{action}: {result.moved} moved, {result.refused} refused")
    if result.errors:
        workflow_id, message = next(iter(result.errors.items()))
        click.echo(f"first refused: {workflow_id}: {_message(message)}")


def _when(moment: datetime | None) -> str:
    return f"{moment.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC" if moment else "-"


@pgbus_cli.command("schedules")
@with_appcontext
def schedules_cmd() -> None:
    """List the schedules: class, schedule, next and last tick, paused or not."""
    found = schedules.list_schedules(_engine())
    for s in found:
        timing = f"every {s.schedule}s" if s.kind == "interval" else f"cron {s.schedule} ({s.timezone})"
        last = f"{_when(s.last_tick)} (run {s.last_run_id})" if s.last_tick else "-"
        state = f"paused by {s.paused_by}" + (f": {s.paused_reason}" if s.paused_reason else "") if s.paused \
            else "active"
        if not s.declared:
            state += ", no longer declared"
        elif not s.stored:
            state += ", not stored yet (the next sweep stores it)"
        _echo(f"{s.workflow_class}  {timing}  missed: {s.missed}  next: {_when(s.next_tick)}  last: {last}  {state}")
    if not found:
        click.echo("no schedules")


def _schedule_verb(action: str) -> None:
    def command(name: str, reason: str | None) -> None:
        verb = schedules.pause if action == "pause" else schedules.resume
        done = verb(_engine(), name, _actor(), reason)
        _echo(f"{done.workflow_class}: {'paused' if done.paused else 'resumed'}; next tick {_when(done.next_tick)}")

    command.__name__ = f"schedule_{action}_cmd"
    command.__doc__ = ("Pause the schedule of workflow class NAME: no run starts until it is resumed."
                       if action == "pause" else
                       "Resume the schedule of workflow class NAME (its schedule_missed decides about the ticks "
                       "missed while paused: skip starts none, all starts each).")
    decorated: Any = click.option("--reason", help="why (recorded in the schedule's audit trail)")(command)
    decorated = click.argument("name")(decorated)
    pgbus_cli.command(f"schedule-{action}")(with_appcontext(decorated))


_schedule_verb("pause")
_schedule_verb("resume")


@pgbus_cli.command("mcp")
@click.option("--http", "http", metavar="HOST:PORT", default=None,
              help="serve streamable HTTP at HOST:PORT (PORT alone: 127.0.0.1) instead of stdio")
@click.option("--allow-remote", is_flag=True,
              help="let --http serve on a host that is not loopback; needs PGBUS_MCP_TOKEN and --allowed-host too")
@click.option("--allowed-host", "allowed_hosts", metavar="NAME", multiple=True,
              help="a Host (and Origin) the HTTP server answers, as clients reach it (mcp.example.com, "
                   "10.0.0.5:8765); repeatable; needs PGBUS_MCP_TOKEN; loopback names are always allowed on a "
                   "loopback host")
@with_appcontext
def mcp_cmd(http: str | None, allow_remote: bool, allowed_hosts: tuple[str, ...]) -> None:
    """Serve the MCP server for AI clients: read tools, and the write tools when PGBUS_MCP_WRITE is true.

    Over --http every request must bear PGBUS_MCP_TOKEN (from the environment or app.config) when it is set;
    a host that is not loopback needs --allow-remote, the token and --allowed-host."""
    try:
        from . import mcp_server
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in ("mcp", "mcp_types"):
            raise
        raise click.ClickException("the MCP server needs the mcp package: pip install 'pgbus-flask[mcp]'") from None
    mcp_server.serve(current_app._get_current_object(), http=http,  # type: ignore[attr-defined]
                     allow_remote=allow_remote, allowed_hosts=allowed_hosts)
