"""``flask pgbus ...``: migrate, sweep, read runs and act on them (actor ``cli:$USER``)."""

from __future__ import annotations

import getpass
import json
import time
from datetime import datetime
from typing import Any

import click
from flask import current_app
from flask.cli import with_appcontext

from . import payload, queries, runner, states
from .engine import Engine
from .errors import PgbusError
from .handle import Run


def _engine() -> Engine:
    engine = current_app.extensions.get("pgbus")
    if engine is None:
        raise click.ClickException("this app has no PgBus: call PgBus(app) in it")
    return engine  # type: ignore[no-any-return]


def _actor() -> str:
    try:
        return "cli:" + getpass.getuser()
    except Exception:
        return "cli:unknown"


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


def _json(value: Any) -> str:
    return json.dumps(payload.to_json(value), indent=2, default=str, ensure_ascii=False)


class _PgbusGroup(click.Group):
    """Every pgbus error (bad input, PostgreSQL down, schema missing) ends as a one-line message."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PgbusError as exc:
            raise click.ClickException(str(exc)) from None


@click.group("pgbus", cls=_PgbusGroup, help="pgbus-flask workflows: schema, sweep, runs and the verbs on them.")
def pgbus_cli() -> None:
    pass


@pgbus_cli.command("migrate")
@with_appcontext
def migrate_cmd() -> None:
    """Apply missing schema migrations (safe to run twice, and concurrently)."""
    from .migrate import migrate

    try:
        applied = migrate(_engine().db)
    except PgbusError as exc:
        raise _fail(exc) from None
    click.echo("applied: " + ", ".join(applied) if applied else "schema is up to date")


@pgbus_cli.command("sweep")
@click.option("--loop", is_flag=True, help="keep sweeping every PGBUS_SWEEP_INTERVAL")
@with_appcontext
def sweep_cmd(loop: bool) -> None:
    """Run the sweep once (or forever with --loop)."""
    from .sweep import sweep

    engine = _engine()
    while True:
        report = sweep(engine)
        click.echo(str(report) if report.ran else "another sweeper holds the lock; nothing done")
        if not loop:
            return
        time.sleep(engine.settings.sweep_interval.total_seconds())


@pgbus_cli.command("runs")
@click.option("--class", "workflow_class", help="workflow class")
@click.option("--status", type=click.Choice(states.RUN_STATUSES))
@click.option("--step", help="current step")
@click.option("--reason", type=click.Choice(states.STUCK_REASONS), help="stuck reason")
@click.option("--limit", default=50, show_default=True)
@with_appcontext
def runs_cmd(workflow_class: str | None, status: str | None, step: str | None, reason: str | None,
             limit: int) -> None:
    """List runs, newest first."""
    rows, _ = queries.list_runs(_engine(), queries.RunFilter(workflow_class=workflow_class, status=status,
                                                             step=step, reason=reason, limit=limit))
    for row in rows:
        subject = f"{row['subject_type']} {row['subject_id']}" if row["subject_type"] else "-"
        click.echo(f"{row['workflow_id']}  {row['workflow_class']:<24} {row['status']:<9} "
                   f"{row['current_step']:<20} {subject}")
    if not rows:
        click.echo("no runs")


def _run(workflow_id: str) -> Run:
    try:
        return Run(_engine(), workflow_id)
    except PgbusError as exc:
        raise _fail(exc) from None


@pgbus_cli.command("show")
@click.argument("workflow_id")
@with_appcontext
def show_cmd(workflow_id: str) -> None:
    """One run: status, actions, steps and the audit trail."""
    run = _run(workflow_id)
    click.echo(f"{run.workflow_class} {run.workflow_id}")
    click.echo(f"  status: {run.status}   current step: {run.current_step}")
    if run.subject:
        click.echo(f"  subject: {run.subject[0]} {run.subject[1]}")
    click.echo(f"  actions: {', '.join(run.available_actions) or 'none'}")
    plan = run.resume_plan()
    if plan:
        click.echo(f"  resume will: {plan.action} {plan.step or ''}".rstrip())
    if run.definition_outdated:
        click.echo("  started on an older definition of its class")
    click.echo("  steps:")
    for s in run.steps():
        error = f"  {s['error_class']}: {s['error_message']}" if s["error_class"] else ""
        click.echo(f"    {s['step_name']} #{s['attempt']}  {s['status']}{error}")
    click.echo("  events:")
    for e in run.events():
        step = f" {e['step_name']} #{e['attempt']}" if e["step_name"] else ""
        why = f": {e['reason']}" if e["reason"] else ""
        click.echo(f"    {e['created_at']:%Y-%m-%d %H:%M:%S}  {e['event']} by {e['actor']}{step}{why}")


def _verb(name: str, help_text: str, extra: list[Any] | None = None) -> None:
    def command(workflow_id: str, reason: str | None, **params: Any) -> None:
        run = _run(workflow_id)
        try:
            result = run.act(name.replace("-", "_"), actor=_actor(), reason=reason, **params)
        except PgbusError as exc:
            raise _fail(exc) from None
        if name == "resume":
            click.echo(f"resumed: {result.action} {result.step or ''}".rstrip())
        click.echo(f"{run.workflow_id}: {run.status} at {run.current_step}")

    command.__name__ = name.replace("-", "_") + "_cmd"
    command.__doc__ = help_text
    decorated: Any = click.option("--reason", help="why (recorded in the audit trail)")(command)
    for option in extra or []:
        decorated = option(decorated)
    decorated = click.argument("workflow_id")(decorated)
    pgbus_cli.command(name)(with_appcontext(decorated))


_verb("pause", "Pause a run.")
_verb("resume", "Resume a paused run (what its resume plan says).")
_verb("resume-at", "Cancel the open step and run STEP fresh.", [click.argument("step")])
_verb("run-now", "Send a run's future step now.")
_verb("reschedule", "Move a ready run's step to AT (ISO 8601 with a timezone).",
      [click.argument("at", type=datetime.fromisoformat)])
_verb("skip", "Skip the current step.")
_verb("rerun", "Run a finished or cancelled run again, from its first step or --step.",
      [click.option("--step", default=None)])
_verb("cancel", "Cancel a run.")


@pgbus_cli.command("signal")
@click.argument("workflow_id")
@click.argument("name")
@click.option("--payload", "data", default=None, help="JSON payload")
@click.option("--key", default=None, help="idempotency key")
@click.option("--reason", default=None)
@with_appcontext
def signal_cmd(workflow_id: str, name: str, data: str | None, key: str | None, reason: str | None) -> None:
    """Send signal NAME to a run."""
    try:
        value = json.loads(data) if data is not None else None
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"--payload is not JSON: {exc}") from None
    run = _run(workflow_id)
    try:
        result = run.signal(name, value, idempotency_key=key, actor=_actor(), reason=reason)
    except PgbusError as exc:
        raise _fail(exc) from None
    what = "duplicate delivery: already stored as" if result.duplicate_delivery else "stored"
    click.echo(f"{what} signal {result.id} ({result.status}); run is {run.status}")


@pgbus_cli.command("attention")
@click.option("--class", "workflow_class")
@with_appcontext
def attention_cmd(workflow_class: str | None) -> None:
    """Stuck runs grouped by class, step, reason and error, biggest first."""
    groups = queries.attention_groups(_engine(), workflow_class)
    for g in groups:
        click.echo(f"{g.count:>6}  {g.workflow_class}  {g.step_name}  {g.reason}  {g.error_class or '-'}"
                   f"  last {g.last_seen_at:%Y-%m-%d %H:%M}  {g.error_message or ''}"[:200])
    if not groups:
        click.echo("nothing needs attention")


@pgbus_cli.command("bulk")
@click.argument("action", type=click.Choice(states.BULK_ACTIONS))
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
    moved = refused = 0
    verb = getattr(runner, action)
    with click.progressbar(ids, label=f"{action} {len(ids)} runs") as bar:
        for workflow_id in bar:
            try:
                verb(engine, workflow_id, actor=_actor(), reason=reason)
                moved += 1
            except PgbusError:
                refused += 1
    click.echo(f"{action}: {moved} moved, {refused} refused")
