"""The package's modules import in one direction only: each layer uses the ones below it.

A newcomer reads the layers bottom up; an import that points up (or a cycle,
even one hidden in a function body) fails here with the module and the line.
Imports under ``if TYPE_CHECKING:`` are for annotations only and may point anywhere.

Inside the packages (``runner/``, ``web/``, ``mcp_server/`` and the worker) the
modules have an order of their own, checked the same way. And only the runner
changes a run's or a step's status: no other module imports its row moves or
holds a statement that writes a status (checked on the code's syntax tree).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import pgbus_flask
import pgbus_flask.worker

PACKAGE = Path(pgbus_flask.__file__).parent
#: ``worker/`` in the source tree ships as ``pgbus_flask.worker``.
WORKER = Path(pgbus_flask.worker.__file__).parent

#: Lowest first. A module may import modules of its own layer's lower entries and of every
#: layer below; within a package (runner, web, mcp_server, worker) its own order is checked separately.
LAYERS: list[set[str]] = [
    {"messages", "sql"},  # the engine's own messages as codes, the named statements: import nothing of pgbus
    # metrics: prometheus_client's counters, no pgbus import; reporting and tracing: Sentry and
    # PGBUS_ERROR_REPORTER, OpenTelemetry spans, which every layer above may report to or trace in
    # signals: the blinker signals the host app connects to (blinker only)
    {"errors", "states", "metrics", "reporting", "tracing", "signals"},
    {"config", "payload", "verbs", "filters"},  # verbs: the verb table the doors build on; filters: composed SQL
    # db: the pool, transactions, and the one helper that runs the named statements; flow: Limit, Rate
    # and the priority bands a workflow declares
    {"logs", "db", "flow"},
    {"attention", "insights", "rq_state"},
    {"definition", "migrate", "testing", "orm", "schedule"},
    {"engine"},
    {"runner"},
    {"handle", "schedules"},
    {"workflow", "queries", "jobs", "sweep"},
    {"present"},  # what the doors say (sentences, badges, JSON shapes): no door imports another for it
    {"notify"},  # webhooks: the pump and the deliveries, whose messages are said in words (present)
    {"extension", "cli", "web", "alembic", "worker", "rq_config"},  # rq_config: `rq worker -c` reads it
    {"mcp_server"},  # the MCP server: on present, like the JSON API and the CLI
    {"__init__"},
    {"demo"},  # the demo app and its workflows, written as an app would: from the package root
]

#: Each package's modules, lowest first: each may import only those before it.
PACKAGE_ORDER: dict[str, list[str]] = {
    "runner": ["rows", "scheduling", "limits", "policy", "deadlines", "fanout", "start", "children", "inline",
               "attempt", "allowed", "signals", "verbs", "__init__"],
    "web": ["i18n", "presenter", "inputs", "messages", "live", "notices", "security", "helpers", "timeline",
            "schedules", "embed", "metrics", "views", "api", "insights", "schedule_pages", "notification_pages",
            "hooks", "errors", "__init__"],
    "notify": ["targets", "messages", "__init__", "jobs"],
    "mcp_server": ["base", "reads", "writes", "server", "__init__"],
    "worker": ["__init__", "runner", "cli"],
    "demo": ["workflows", "services", "shop", "seeding", "traffic", "cli", "__init__", "__main__"],
}

#: Deliberate upward imports made at call time, each with why.
ALLOWED_LATE = {
    ("extension", "cli"): "the flask CLI group is registered only when the app has the extension",
    ("extension", "web"): "the blueprint is built only when the app mounts the dashboard",
    ("extension", "sweep"): "the sweep thread starts only when the app asks for it",
    ("extension", "migrate"): "migrate runs only when asked",
    ("demo", "sweep"): "the demo runs the sweep once while seeding",
    ("reporting", "engine"): "report() given no engine finds the process default's PGBUS_ERROR_REPORTER when it runs",
    ("config", "notify"): "PGBUS_WEBHOOKS is checked by notify.targets, beside its use, when settings load",
    ("engine", "notify"): "an engine gives its database the notice hook when made (signals and webhooks at commit)",
    ("sweep", "notify"): "the sweep's notify part runs the pump, whose messages are said in words (present)",
    ("present", "notify"): "the notifications' JSON shape reads the deliveries",
    ("cli", "mcp_server"): "the MCP server (and the optional mcp package) loads only when `flask pgbus mcp` runs",
}

#: The runner's functions that change a status column (guarded UPDATEs): only ``runner/`` calls them.
ROW_MOVES = {"move_run", "move_step", "cancel_open_steps", "close_open_batches", "consume_signal_of"}
#: The tables whose ``status`` only the runner writes.
STATUS_TABLES = ("pgbus_workflows", "pgbus_workflow_steps", "pgbus_workflow_signals", "pgbus_batches",
                 "pgbus_batch_children")
_UPDATE = re.compile(r"\bUPDATE\s+(?:ONLY\s+)?(\w+)(?:\s+(?:AS\s+)?\w+)?\s+SET\b(.*?)(?=\bWHERE\b|\bFROM\b|"
                     r"\bRETURNING\b|$)", re.IGNORECASE | re.DOTALL)
_INSERT = re.compile(r"\bINSERT\s+INTO\s+(\w+)", re.IGNORECASE)


def library_files() -> list[tuple[str, Path]]:
    """(module name relative to the package, path) of every library module, the worker's included."""
    found = [(module_name(path), path) for path in sorted(PACKAGE.rglob("*.py"))]
    if not WORKER.is_relative_to(PACKAGE):
        found += [(module_name(path), path) for path in sorted(WORKER.glob("*.py"))]
    return [(name, path) for name, path in found if not name.startswith("sql")]


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    for number, layer in enumerate(LAYERS):
        if top in layer:
            return number
    raise AssertionError(f"pgbus_flask.{module} is in no layer of tests/test_layers.py: add it to LAYERS")


def _parts(path: Path) -> tuple[str, ...]:
    """The path's module parts relative to the package (``worker/cli.py`` is ``("worker", "cli")``)."""
    if path.is_relative_to(PACKAGE):
        return path.relative_to(PACKAGE).with_suffix("").parts
    return ("worker", *path.relative_to(WORKER).with_suffix("").parts)


def imports_of(path: Path, source: str | None = None) -> list[tuple[str, int, bool]]:
    """(imported module relative to the package, line, at module level) for each package-internal import."""
    tree = ast.parse(path.read_text() if source is None else source)
    relative = _parts(path)
    here = list(relative if path.name == "__init__.py" else relative[:-1])
    if path.name == "__init__.py":
        here = here[:-1]
    type_checking: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_checking.update(id(n) for n in ast.walk(node))
    top_level = {id(n) for n in tree.body}
    found = []
    for node in ast.walk(tree):
        if id(node) in type_checking:
            continue
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
            if node.module:
                targets = [".".join([*base, node.module])]
            else:
                targets = [".".join([*base, alias.name]) if _is_module(base, alias.name)
                           else ".".join(base) or "__init__" for alias in node.names]
            found += [(t, node.lineno, id(node) in top_level) for t in targets]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pgbus_flask":
            base = (node.module or "").split(".")[1:]
            found += [(".".join([*base, alias.name]) if _is_module(base, alias.name) else ".".join(base) or "__init__",
                       node.lineno, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name.removeprefix("pgbus_flask").lstrip(".") or "__init__", node.lineno,
                       id(node) in top_level) for alias in node.names if alias.name.startswith("pgbus_flask")]
    return found


def _is_module(base: list[str], name: str) -> bool:
    folder = WORKER.joinpath(*base[1:]) if base[:1] == ["worker"] else PACKAGE.joinpath(*base)
    return (folder / f"{name}.py").exists() or (folder / name / "__init__.py").exists()


def module_name(path: Path) -> str:
    parts = _parts(path)
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def upward_imports(name: str, path: Path, source: str | None = None) -> list[str]:
    """The imports of module ``name`` that point to a layer not below its own."""
    wrong = []
    for target, line, at_top in imports_of(path, source):
        if target.split(".")[0] == name.split(".")[0]:
            continue  # inside one package: checked by its own order below
        if layer_of(target) < layer_of(name):
            continue
        if (name.split(".")[0], target.split(".")[0]) in ALLOWED_LATE and not at_top:
            continue
        wrong.append(f"{name} (line {line}) imports {target}, which is not in a lower layer")
    return wrong


def test_every_import_points_down() -> None:
    wrong = [problem for name, path in library_files() for problem in upward_imports(name, path)]
    assert not wrong, "\n".join(wrong)


def out_of_order(package: str, path: Path, source: str | None = None) -> list[str]:
    """The imports of a package's module that name a module of that package not before it in its order."""
    order = PACKAGE_ORDER[package]
    me = path.stem
    assert me in order, f"{package}/{path.name} is in no order of tests/test_layers.py: add it to PACKAGE_ORDER"
    wrong = []
    for target, line, _ in imports_of(path, source):
        parts = target.split(".")
        if parts[0] != package or (target == package and me == "__init__"):
            continue
        other = parts[1] if len(parts) > 1 else "__init__"
        if other not in order or order.index(other) >= order.index(me):
            wrong.append(f"{package}/{path.name}:{line}: {me} imports {other}, which is not before it")
    return wrong


@pytest.mark.parametrize("package", sorted(PACKAGE_ORDER))
def test_a_package_modules_import_lower_ones_only(package: str) -> None:
    folder = WORKER if package == "worker" else PACKAGE / package
    wrong = [problem for path in sorted(folder.glob("*.py")) for problem in out_of_order(package, path)]
    assert sorted(path.stem for path in folder.glob("*.py")) == sorted(PACKAGE_ORDER[package])
    assert not wrong, "\n".join(wrong)


def _texts(tree: ast.AST) -> list[tuple[str, int]]:
    """The string literals of a module (f-strings' constant parts, ``+`` of literals joined), with their lines."""
    found = []
    for node in ast.walk(tree):
        text = _literal(node)
        if text is not None:
            found.append((text, node.lineno))  # type: ignore[attr-defined]
    return found


def _literal(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else " ? " for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left), _literal(node.right)
        if left is not None or right is not None:
            return (left or " ? ") + (right or " ? ")
    return None


def status_writes(source: str) -> list[str]:
    """What in ``source`` changes a run's, step's, signal's or batch's status: an import of the
    runner's row moves, a use of them through the package, or a statement that writes a status."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and "runner" in (node.module or "").split("."):
            found += [f"line {node.lineno}: imports {a.name}" for a in node.names if a.name in ROW_MOVES]
        elif isinstance(node, ast.Attribute) and node.attr in ROW_MOVES:
            found.append(f"line {node.lineno}: calls {ast.unparse(node)}")
    for text, line in _texts(tree):
        for table, sets in _UPDATE.findall(text):
            if table.lower() in STATUS_TABLES and re.search(r"\bstatus\s*=", sets, re.IGNORECASE):
                found.append(f"line {line}: UPDATE {table} SET status")
        found += [f"line {line}: INSERT INTO {table}" for table in _INSERT.findall(text)
                  if table.lower() in ("pgbus_workflows", "pgbus_workflow_steps")]
    return found


def test_only_the_runner_changes_a_status() -> None:
    """Every transition goes through the runner (its guarded UPDATEs, its audit events)."""
    writers = []
    for name, path in library_files():
        if name.split(".")[0] == "runner" or name == "filters":
            continue  # filters composes the runner's row moves; only the runner runs them (the test below)
        writers += [f"pgbus_flask/{name.replace('.', '/')}: {what}" for what in status_writes(path.read_text())]
    assert not writers, "status written outside the runner:\n" + "\n".join(writers)


def statements_that_write_a_status() -> tuple[set[str], set[str]]:
    """(names in pgbus_flask/sql/*.sql, functions of filters.py) whose statement writes a status."""
    from pgbus_flask.sql import CATALOG

    named = {name for name, (_about, text) in CATALOG.items() if status_writes(repr(text))}
    source = (PACKAGE / "filters.py").read_text()
    composed = {node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)
                and status_writes(source_segment(source, node))}
    return named, composed


def source_segment(source: str, node: ast.AST) -> str:
    return ast.get_source_segment(source, node) or ""


def runs_of(source: str, named: set[str], composed: set[str]) -> list[str]:
    """Where ``source`` names a status-writing statement or calls filters' composer of one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value in named:
            found.append(f"line {node.lineno}: runs {node.value!r}")
        elif (isinstance(node, ast.Attribute) and node.attr in composed and isinstance(node.value, ast.Name)
              and node.value.id == "filters"):
            found.append(f"line {node.lineno}: runs filters.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("filters"):
            found += [f"line {node.lineno}: imports filters.{a.name}" for a in node.names if a.name in composed]
    return found


def test_only_the_runner_runs_the_statements_that_change_a_status() -> None:
    """The statements that write a status (named in pgbus_flask/sql/*.sql, or composed in filters.py)
    are run from the runner only: no other module names them."""
    named, composed = statements_that_write_a_status()
    assert "claim_attempt" in named and "move_run" in composed
    wrong = []
    for name, path in library_files():
        if name.split(".")[0] == "runner" or name == "filters":
            continue
        wrong += [f"pgbus_flask/{name.replace('.', '/')}: {what}"
                  for what in runs_of(path.read_text(), named, composed)]
    assert not wrong, "\n".join(wrong)


def test_running_a_status_writing_statement_outside_the_runner_is_caught() -> None:
    named, composed = statements_that_write_a_status()
    assert runs_of('db.run(conn, "claim_attempt", params)', named, composed)
    assert runs_of("db.fetch_one(conn, filters.move_run(('paused_at',)), params)", named, composed)
    assert not runs_of('db.fetch_all(conn, "latest_step", params)', named, composed)


# -- each rule fails on a planted violation ----------------------------------------------------


@pytest.mark.parametrize("source", [
    "from .runner import move_run",
    "from pgbus_flask.runner.rows import Row, move_step",
    "from . import runner\nrunner.move_run(conn, wid, ['ready'], 'paused')",
    "SQL = 'UPDATE pgbus_workflows SET paused_at = now(), status = %s WHERE workflow_id = %s'",
    "SQL = ('UPDATE pgbus_workflow_steps s'\n       ' SET status = \\'cancelled\\' WHERE s.id = %s')",
    "SQL = f'UPDATE pgbus_batch_children SET status = {x!r}'",
    "SQL = 'UPDATE pgbus_workflow_signals SET ' + 'status = 1'",
    "SQL = 'INSERT INTO pgbus_workflow_steps (workflow_id) VALUES (%s)'",
])
def test_a_status_write_outside_the_runner_is_found(source: str) -> None:
    assert status_writes(source)


@pytest.mark.parametrize("source", [
    "from .runner import ResumePlan, Row",
    "SQL = 'UPDATE pgbus_batch_children SET job_id = %s WHERE status = \\'pending\\''",
    "SQL = 'UPDATE pgbus_schedules SET paused_at = now() WHERE workflow_class = %s'",
    "SQL = 'SELECT status FROM pgbus_workflows WHERE status = %s'",
])
def test_reads_and_other_writes_are_not_status_writes(source: str) -> None:
    assert not status_writes(source)


def test_an_upward_import_is_found() -> None:
    assert upward_imports("states", PACKAGE / "states.py", "from .runner import Row")
    assert upward_imports("runner.rows", PACKAGE / "runner" / "rows.py", "def f():\n    from ..sweep import sweep")
    assert not upward_imports("sweep", PACKAGE / "sweep.py", "from . import runner")


@pytest.mark.parametrize(("package", "module", "source"), [
    ("runner", "rows", "from .verbs import pause"),
    ("web", "i18n", "def f():\n    from .views import Pages"),
    ("web", "views", "from . import api"),
    ("mcp_server", "base", "from .server import McpServer"),
    ("worker", "runner", "from pgbus_flask.worker.cli import main"),
    ("worker", "runner", "def f():\n    from pgbus_flask.worker import cli"),
])
def test_an_import_against_a_package_order_is_found(package: str, module: str, source: str) -> None:
    folder = WORKER if package == "worker" else PACKAGE / package
    assert out_of_order(package, folder / f"{module}.py", source)
