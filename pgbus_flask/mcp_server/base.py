"""What every MCP tool is made of: the :class:`Tool` entry, the :class:`Call` it answers, the JSON
Schema pieces its arguments and results are declared with, and the words the descriptions share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from .. import queries, states
from ..engine import Engine
from ..handle import Run
from ..present.text import terminal_safe

SERVER_NAME = "pgbus"
#: The default page of ``list_runs`` (the JSON API's is 50: a model reads fewer at once).
RUNS_PAGE = 20
#: A backtrace longer than this shows its last this many characters unless asked for whole.
BACKTRACE_TAIL = 2_000
#: Longer texts in the one-line summaries are cut (the structured result keeps them whole).
SUMMARY_TEXT = 200
#: Characters of the client's name kept in the actor (4 bytes each at most: within states.ACTOR_LIMIT).
CLIENT_NAME_LIMIT = 48

# -- what a model reads before choosing a tool ----------------------------------------------------

STATUSES = ("Run statuses: ready (its current step is scheduled and runs when due), running (an attempt is "
            "in progress on a worker), waiting (parked until a signal arrives or a fan-out batch ends), "
            "paused (stopped until someone resumes it), finished, cancelled. The first four are ongoing.")
REASONS = ("Stuck reasons (runs that need a person): stalled (paused because an attempt ran past its deadline; "
           "its worker probably died), paused_error (paused after its step raised an error), paused_manual "
           "(paused by a person or by the step itself), overdue (ready, but its step has been due longer than "
           "the stall threshold: no worker took it), waiting_overdue (waiting longer than the waiting threshold "
           "on a step without a wait timeout).")
RUN_ID = ("The run's id (a UUID) or a unique prefix of it of at least 4 hex digits; an ambiguous prefix is "
          "refused and lists a few of the runs it matches.")
WRITE_NOTE = ("It changes the run: `reason` is required (non-empty, at most 1,000 characters) and is recorded in "
              "the run's audit trail with actor mcp:<your client name>. When the run's status does not allow it, "
              "nothing changes and the error names the status and the verbs allowed now (show_run lists them as "
              "available_actions).")
INSTRUCTIONS = (
    "pgbus runs durable workflows: each run is an ordered list of steps, state in PostgreSQL, steps run by "
    "workers. Start with `overview` or `attention_groups` to see what needs a person, `list_runs` to find "
    "runs, `show_run` to understand one (its steps, errors, audit trail, what resume would do, and which "
    "verbs are allowed now). " + STATUSES + " " + REASONS)
READ_ONLY_NOTE = ("This server is read-only: the verbs, signals and bulk verbs are offered only when "
                  "PGBUS_MCP_WRITE is true.")

# -- JSON Schema pieces -----------------------------------------------------------------------------

JSON = dict[str, Any]


def obj(props: Mapping[str, JSON], required: tuple[str, ...] | None = None, *, closed: bool = False) -> JSON:
    """An object schema; ``required`` defaults to every property."""
    schema: JSON = {"type": "object", "properties": dict(props),
                    "required": list(props if required is None else required)}
    if closed:
        schema["additionalProperties"] = False
    return schema


def arr(items: JSON) -> JSON:
    return {"type": "array", "items": items}


def string(description: str | None = None, **extra: Any) -> JSON:
    return {"type": "string", **({"description": description} if description else {}), **extra}


def nullable(kind: str) -> JSON:
    return {"type": [kind, "null"]}


STR, INT, BOOL = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
NSTR, NINT = nullable("string"), nullable("integer")
ANY: JSON = {}
ROW: JSON = {"type": "object"}
CURSOR = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
STATUS = {"type": "string", "enum": list(states.RUN_STATUSES)}
REASON = {"type": "string", "enum": list(states.STUCK_REASONS)}
ACTIONS = arr(STR)
PLAN = {"type": ["object", "null"], "properties": {"action": {"enum": list(states.RESUME_ACTIONS)}, "step": NSTR},
        "required": ["action", "step"]}
RUN_ROW: JSON = {"type": "object",
                 "properties": {"workflow_id": STR, "workflow_class": STR, "status": STATUS, "current_step": STR,
                                "subject_type": NSTR, "subject_id": NSTR},
                 "required": ["workflow_id", "workflow_class", "status", "current_step"]}
PRESENTATION = obj({"badge": STR, "tone": STR, "key": STR, "args": ROW, "sentence": STR, "attention": NSTR})
#: An attention group as the group tools take it (``stuck_reason``: ``reason`` is the why of a write).
GROUP_KEY: dict[str, JSON] = {
    "workflow_class": string("the group's workflow class"),
    "step_name": string("the step its runs are at"),
    "stuck_reason": {**REASON, "description": "the group's stuck reason (its `reason` in attention_groups)"},
    "error_class": {"type": ["string", "null"], "description": "the group's error class (null or omitted: none)"},
}
GROUP = obj({"workflow_class": STR, "step_name": STR, "reason": REASON, "error_class": NSTR, "count": INT,
             "capped": {**BOOL, "description": "count is a lower bound: an overdue group is counted up to "
                                               "count_cap runs"},
             "first_seen_at": NSTR, "last_seen_at": NSTR, "error_message": NSTR, "error_code": NSTR,
             "error_params": {"type": ["object", "null"]}, "bulk_actions": ACTIONS, "confirm": ROW})
AFTER: dict[str, JSON] = {"workflow_id": STR, "status": STATUS, "current_step": STR, "available_actions": ACTIONS}


# -- the tool table -------------------------------------------------------------------------------


@dataclass
class Call:
    """What a tool is called with besides its arguments: the engine, and who is calling."""

    engine: Engine
    actor: str

    def run(self, workflow_id: Any) -> Run:
        """The run named by its id or a unique prefix of it (as the CLI names one)."""
        return Run(self.engine, queries.resolve_run_id(self.engine, workflow_id))


#: A tool's answer: its structured result, and the short text said with it.
Reply = tuple[JSON, str]


@dataclass(frozen=True)
class Tool:
    """One MCP tool."""

    name: str
    description: str
    params: Mapping[str, JSON]
    required: tuple[str, ...]
    output: JSON
    answer: Callable[[Call, dict[str, Any]], Reply]
    write: bool = False
    destructive: bool = False
    title: str | None = None

    def input_schema(self) -> JSON:
        return obj(self.params, self.required, closed=True)

    def as_mcp(self) -> types.Tool:
        read_only = not self.write
        return types.Tool(
            name=self.name, title=self.title, description=self.description, input_schema=self.input_schema(),
            output_schema=self.output,
            annotations=types.ToolAnnotations(read_only_hint=read_only, destructive_hint=self.destructive,
                                              idempotent_hint=read_only, open_world_hint=False))


def shown(text: Any, limit: int = SUMMARY_TEXT) -> str:
    """Text from a run or a step as a summary shows it: control and bidi characters escaped, cut."""
    out = terminal_safe(text)
    return out if len(out) <= limit else out[:limit] + "…"


def runs_text(n: int) -> str:
    return f"{n:,} run" if n == 1 else f"{n:,} runs"


def group_key(args: dict[str, Any]) -> dict[str, Any]:
    """The group a tool names, as :mod:`pgbus_flask.queries` takes it (its stuck reason as ``reason``)."""
    return {"workflow_class": args["workflow_class"], "step_name": args["step_name"],
            "reason": args["stuck_reason"], "error_class": args.get("error_class") or None}


def group_named(args: dict[str, Any]) -> dict[str, Any]:
    """The group a tool names, as the tools say it (what its result echoes)."""
    return {name: args.get(name) or None for name in GROUP_KEY}
