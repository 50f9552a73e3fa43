"""The verbs on a run, each declared once: the table every door is built from.

One :class:`Verb` says everything a door needs to offer it: its name, its
parameters and their kinds, the run statuses that allow it (and the further
conditions the runner checks), whether it needs the workflow class importable
here, whether the dashboard asks for confirmation, its words (the label and
confirm-sentence msgids, the CLI's help line, the description a model reads),
and whether it is a bulk verb.

The Python API's typed methods (:class:`pgbus_flask.handle.Run`), the CLI's
commands, the JSON API's routes, the dashboard's buttons and confirm pages and
the MCP write tools are all built from :data:`VERBS`; the runner
(:mod:`pgbus_flask.runner.verbs`) does each one, a function of the same name.
Adding a verb means an entry here, that runner function, a typed method on
``Run`` and its words in the catalogs.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import states
from .errors import PgbusError


def N_(message: str) -> str:
    """Mark ``message`` for extraction without translating it (Babel's ``N_`` keyword)."""
    return message


def C_(context: str, message: str) -> tuple[str, str]:
    """Mark ``message`` in the role ``context`` for extraction (keyword ``C_:1c,2``)."""
    return context, message


def NP_(singular: str, plural: str) -> tuple[str, str]:
    """Mark a singular and plural pair for extraction (keyword ``NP_:1,2``), said with ``ngettext``."""
    return singular, plural


#: Parameter kinds: a step name of the run's class, or a moment (ISO 8601 with a timezone).
STEP, MOMENT = "step", "moment"
#: What the runner function returns: the run (the handle, refreshed) or what it decided (resume's plan).
RUN, PLAN = "run", "plan"


@dataclass(frozen=True)
class Param:
    """One argument of a verb besides the run, the actor and the reason."""

    name: str
    kind: str  # STEP or MOMENT
    required: bool
    #: What to give, for a model (MCP) and the CLI's help.
    help: str
    #: The dashboard's and the JSON API's message when a required one is missing (a msgid).
    missing: str | None = None


@dataclass(frozen=True)
class BulkWords:
    """A bulk verb's words over an attention group (msgids; pairs are singular and plural, with
    ``%(num)s``): a paused group has an error class, an overdue or waiting one does not, and one run
    has sentences of its own ("all" is never said of one)."""

    #: The button on a group of one run.
    one: str
    #: The button on several: "Resume these %(num)s runs".
    button: tuple[str, str]
    #: The question on one run, paused on ``%(error)s`` / with no error class.
    one_error: str
    one_plain: str
    #: The question on several, paused on ``%(error)s`` / with no error class.
    many_error: tuple[str, str]
    many_plain: tuple[str, str]
    #: The question on a group bigger than one call moves, or whose count stopped at the cap.
    oldest: str


@dataclass(frozen=True)
class Verb:
    """One verb on a run: its rules, its parameters and its words."""

    name: str
    #: The run statuses that allow it.
    allowed_from: tuple[str, ...]
    #: The CLI's help line.
    help: str
    #: What it does, for a model choosing a tool (MCP).
    description: str
    #: The button's label and the word "Done: ..." says (``C_("action", ...)``).
    label: tuple[str, str]
    params: tuple[Param, ...] = ()
    #: Refused when the run's workflow class cannot be imported here (it needs the step list).
    needs_class: bool = False
    #: Conditions beyond the status, checked in this order (see ``pgbus_flask.runner.allowed.CONDITIONS``).
    needs: tuple[str, ...] = ()
    #: Said when the run's status does not allow it (English, in the refusal).
    status_refusal: str | None = None
    #: The dashboard's confirm question (a msgid with ``%(workflow)s`` and ``%(step)s``); None: the
    #: dashboard has no button for it.
    confirm: str | None = None
    #: The question when the run has no open step (there is no step to cancel).
    confirm_no_open_step: str | None = None
    #: The button's label when the run has an open step it cancels (a msgid with ``%(step)s``).
    label_open_step: str | None = None
    #: The button's label says what the resume plan does ("Retry capture").
    label_from_plan: bool = False
    #: What happens to the run's ongoing child runs, said after the question: "cancelled" or "kept".
    children: str | None = None
    #: The place of its button on the run page (lowest first; None: no button).
    button: int | None = None
    #: The run page's primary button is the first button allowed that is primary: it moves the run on as planned.
    primary: bool = False
    #: It drops work that cannot be got back (a model is told; the dashboard draws it as a warning).
    destructive: bool = False
    #: Offered over an attention group (the dashboard, the CLI's ``bulk``, the MCP ``bulk`` tool), in
    #: these words; None: not a bulk verb.
    bulk: BulkWords | None = None
    #: Built as one generic command, route and tool (the signal has its own, with its payload).
    generic: bool = True
    #: What the typed method returns (RUN or PLAN).
    returns: str = RUN
    #: Its place in a run's ``available_actions`` (the order the dashboard and the doors list them).
    shown: int = 0

    @property
    def action(self) -> str:
        """The name, as :meth:`pgbus_flask.handle.Run.act` and ``available_actions`` say it."""
        return self.name

    @property
    def command(self) -> str:
        """The CLI command: ``resume-at``."""
        return self.name.replace("_", "-")

    @property
    def asks_confirmation(self) -> bool:
        return self.confirm is not None

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


_STEP_EXISTS = "step_exists"

#: Every outside verb, in the order they were added (the MCP tools list them so).
VERBS: tuple[Verb, ...] = (
    Verb("pause", ("ready", "running", "waiting"), "Pause a run.",
         "Pause a run: nothing more is scheduled until someone resumes it (a running attempt finishes and records "
         "its outcome; a waiting step keeps waiting, and its signals are kept).",
         C_("action", "Pause"), shown=6),
    Verb("resume", ("paused",), "Resume a paused run (what its resume plan says).",
         "Resume a paused run as its resume_plan says (show_run): retry the failed step, continue with the next, "
         "keep waiting, or finish the run.",
         C_("action", "Resume"), needs_class=True, needs=(_STEP_EXISTS,),
         confirm=N_("Resume this %(workflow)s run?"), label_from_plan=True, button=0, primary=True,
         bulk=BulkWords(
             N_("Resume this run"), NP_("Resume %(num)s run", "Resume these %(num)s runs"),
             N_("Resume the run paused at %(step)s on %(error)s?"), N_("Resume the run paused at %(step)s?"),
             NP_("Resume %(num)s run paused at %(step)s on %(error)s?",
                 "Resume all %(num)s runs paused at %(step)s on %(error)s?"),
             NP_("Resume %(num)s run paused at %(step)s?", "Resume all %(num)s runs paused at %(step)s?"),
             N_("Resume the %(num)s oldest of these runs at %(step)s? The others stay as they are.")),
         returns=PLAN, shown=0),
    Verb("resume_at", states.ONGOING, "Cancel the open step and run STEP fresh.",
         "Cancel the run's open step and run `step` fresh (a new attempt), then go on from there.",
         C_("action", "Resume at step"),
         (Param("step", STEP, True, "the step to run next (a step of the run's class)",
                missing=N_("Choose the step to resume at.")),),
         needs_class=True,
         confirm=N_("Cancel the open step and resume this %(workflow)s run at the chosen step?"),
         confirm_no_open_step=N_("Resume this %(workflow)s run at the chosen step?"),
         label_open_step=N_("Cancel %(step)s and resume at the chosen step"), children="kept", button=2, shown=1),
    Verb("run_now", ("ready",), "Send a run's future step now.",
         "Send a ready run's future step now instead of at its scheduled time (refused when its step is already "
         "due).",
         C_("action", "Run now"), needs=("due_later",),
         confirm=N_("Run %(step)s now instead of at its scheduled time?"), button=3, primary=True, shown=2),
    Verb("reschedule", ("ready",), "Move a ready run's step to AT (ISO 8601 with a timezone).",
         "Move a ready run's scheduled step to another time.",
         C_("action", "Reschedule"),
         (Param("at", MOMENT, True, "when: ISO 8601 with a timezone, as 2030-01-01T09:00:00+00:00"),),
         needs=("step_scheduled",), shown=3),
    Verb("skip", ("ready", "waiting", "paused"), "Skip the current step.",
         "Skip the run's current step (recorded as skipped; its code does not run again) and go on with the next, "
         "or finish the run when it was the last.",
         C_("action", "Skip step"), needs_class=True, needs=(_STEP_EXISTS, "step_to_skip"),
         confirm=N_("Skip %(step)s and go on with the next step?"), children="kept", button=4, destructive=True,
         bulk=BulkWords(
             N_("Skip the step in this run"),
             NP_("Skip the step in %(num)s run", "Skip the step in these %(num)s runs"),
             N_("Skip %(step)s in the run paused there on %(error)s?"), N_("Skip %(step)s in this run?"),
             NP_("Skip %(step)s in %(num)s run paused there on %(error)s?",
                 "Skip %(step)s in all %(num)s runs paused there on %(error)s?"),
             NP_("Skip %(step)s in %(num)s run?", "Skip %(step)s in all %(num)s runs?"),
             N_("Skip %(step)s in the %(num)s oldest of these runs? The others stay as they are.")),
         shown=4),
    Verb("rerun", states.TERMINAL, "Run a finished or cancelled run again, from its first step or --step.",
         "Run a finished or cancelled run again, from its first step or from `step`, with new attempts.",
         C_("action", "Rerun"), (Param("step", STEP, False, "the step to start from (default: the first)"),),
         needs_class=True, confirm=N_("Run this %(workflow)s run again from the chosen step?"), button=5,
         primary=True, shown=5),
    Verb("cancel", states.ONGOING, "Cancel a run.",
         "Cancel a run: its open step is cancelled and nothing more runs. It cannot be undone (rerun starts it "
         "over).",
         C_("action", "Cancel run"),
         confirm=N_("Cancel this %(workflow)s run? Its open step is cancelled and nothing else runs."),
         confirm_no_open_step=N_("Cancel this %(workflow)s run? Nothing else in it runs."),
         label_open_step=N_("Cancel the run and its open step %(step)s"), children="cancelled", button=6,
         destructive=True,
         bulk=BulkWords(
             N_("Cancel this run"), NP_("Cancel %(num)s run", "Cancel these %(num)s runs"),
             N_("Cancel the run paused at %(step)s on %(error)s?"), N_("Cancel the run at %(step)s?"),
             NP_("Cancel %(num)s run paused at %(step)s on %(error)s?",
                 "Cancel all %(num)s runs paused at %(step)s on %(error)s?"),
             NP_("Cancel %(num)s run at %(step)s?", "Cancel all %(num)s runs at %(step)s?"),
             N_("Cancel the %(num)s oldest of these runs at %(step)s? The others stay as they are.")),
         shown=7),
    Verb("upgrade", states.ONGOING,
         "Continue a run that started on an older definition of its class on the current one.",
         "Continue a run that started on an older definition of its class (show_run's definition_outdated) on the "
         "current one: its current step and everything after it follow the class as declared now. Refused when its "
         "current step no longer exists in the class (then resume_at a step that exists, or cancel).",
         C_("action", "Continue on the current definition"), needs_class=True, needs=(_STEP_EXISTS, "outdated"),
         confirm=N_("Continue this %(workflow)s run on the current definition of its class, at %(step)s?"),
         button=1, shown=9),
    Verb("signal", states.ONGOING, "Send signal NAME to a run.", "Send a signal to an ongoing run.",
         C_("action", "Send signal"), status_refusal="signals go only to ongoing runs", generic=False, shown=8),
)

#: The verbs by name.
BY_NAME: dict[str, Verb] = {verb.name: verb for verb in VERBS}
#: The verbs built as one generic command, route and tool each (every one but signal).
RUN_VERBS: tuple[Verb, ...] = tuple(verb for verb in VERBS if verb.generic)
#: Every outside verb, in the order a run's available actions list them.
ACTIONS: tuple[str, ...] = tuple(verb.name for verb in sorted(VERBS, key=lambda verb: verb.shown))
#: Which run statuses allow each verb (the runner checks its further conditions too).
ALLOWED_FROM: dict[str, tuple[str, ...]] = {verb.name: verb.allowed_from for verb in VERBS}
#: Verbs that need the workflow class importable here (its step list).
CLASS_ACTIONS: tuple[str, ...] = tuple(name for name in ACTIONS if BY_NAME[name].needs_class)
#: The verbs offered over an attention group.
BULK_ACTIONS: tuple[str, ...] = tuple(name for name in ACTIONS if BY_NAME[name].bulk is not None)
#: The run page's buttons, in their order.
DASHBOARD_ACTIONS: tuple[str, ...] = tuple(
    verb.name for verb in sorted((v for v in VERBS if v.button is not None), key=lambda v: v.button or 0))


def verb(name: str) -> Verb:
    """The verb called ``name``; :class:`~pgbus_flask.errors.PgbusError` naming the known ones for another."""
    found = BY_NAME.get(name)
    if found is None:
        raise PgbusError(f"unknown action {name!r} (known: {', '.join(ACTIONS)})")
    return found


def bulk_for(reason: str) -> tuple[str, ...]:
    """The bulk verbs an attention group of stuck reason ``reason`` allows: those its runs' status allows
    (resume needs a paused run)."""
    status = states.STUCK_REASON_STATUS[reason]
    return tuple(name for name in BULK_ACTIONS if status in BY_NAME[name].allowed_from)
