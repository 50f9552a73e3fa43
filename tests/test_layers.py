"""The package's modules import in one direction only: each layer uses the ones below it.

A newcomer reads the layers bottom up; an import that points up (or a cycle,
even one hidden in a function body) fails here with the module and the line.
Imports under ``if TYPE_CHECKING:`` are for annotations only and may point anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pgbus_flask

PACKAGE = Path(pgbus_flask.__file__).parent

#: Lowest first. A module may import modules of its own layer's lower entries and of every
#: layer below; within the runner package its own order is checked separately.
LAYERS: list[set[str]] = [
    {"messages", "sql"},  # the engine's own messages as codes, the named statements: import nothing of pgbus
    {"errors", "states", "metrics"},  # metrics: prometheus_client's counters, no pgbus import
    {"config", "payload", "filters"},  # filters: the statements composed from the arguments
    {"logs", "db"},  # db: the pool, transactions, and the one helper that runs the named statements
    {"attention", "insights", "rq_state"},
    {"definition", "migrate", "testing", "orm", "schedule"},
    {"engine"},
    {"runner"},
    {"handle", "schedules"},
    {"workflow", "queries", "jobs", "sweep"},
    {"extension", "cli", "web", "alembic"},
    {"mcp_server"},  # the MCP server: the JSON API's reads and the CLI's words
    {"__init__"},
    {"demo_workflows"},  # written as an app would: from the package root
    {"demo"},
]

#: The runner's modules, lowest first: each may import only those before it.
RUNNER_ORDER = ["rows", "scheduling", "policy", "fanout", "start", "children", "inline", "attempt", "allowed",
                "signals", "verbs"]

#: Deliberate upward imports made at call time, each with why.
ALLOWED_LATE = {
    ("extension", "cli"): "the flask CLI group is registered only when the app has the extension",
    ("extension", "web"): "the blueprint is built only when the app mounts the dashboard",
    ("extension", "sweep"): "the sweep thread starts only when the app asks for it",
    ("extension", "migrate"): "migrate runs only when asked",
    ("demo", "sweep"): "the demo runs the sweep once while seeding",
    ("cli", "mcp_server"): "the MCP server (and the optional mcp package) loads only when `flask pgbus mcp` runs",
}


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    for number, layer in enumerate(LAYERS):
        if top in layer:
            return number
    raise AssertionError(f"pgbus_flask.{module} is in no layer of tests/test_layers.py: add it to LAYERS")


def imports_of(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module relative to the package, line, at module level) for each package-internal import."""
    tree = ast.parse(path.read_text())
    relative = path.relative_to(PACKAGE).with_suffix("").parts
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
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pgbus_flask"):
            rest = (node.module or "").removeprefix("pgbus_flask").lstrip(".")
            found.append((rest or "__init__", node.lineno, id(node) in top_level))
        elif isinstance(node, ast.Import):
            found += [(alias.name.removeprefix("pgbus_flask").lstrip(".") or "__init__", node.lineno,
                       id(node) in top_level) for alias in node.names if alias.name.startswith("pgbus_flask")]
    return found


def _is_module(base: list[str], name: str) -> bool:
    folder = PACKAGE.joinpath(*base)
    return (folder / f"{name}.py").exists() or (folder / name / "__init__.py").exists()


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def test_every_import_points_down() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        for target, line, _at_top in imports_of(path):
            if target.split(".")[0] == name.split(".")[0]:
                continue  # inside one package (runner, web): checked below for the runner
            if layer_of(target) < layer_of(name):
                continue
            if (name.split(".")[0], target.split(".")[0]) in ALLOWED_LATE and not _at_top:
                continue
            wrong.append(f"pgbus_flask/{path.relative_to(PACKAGE)}:{line}: {name} imports {target},"
                         " which is not in a lower layer")
    assert not wrong, "\n".join(wrong)


def test_the_runner_package_modules_import_lower_ones_only() -> None:
    wrong = []
    for path in sorted((PACKAGE / "runner").glob("*.py")):
        if path.name == "__init__.py":
            continue
        me = RUNNER_ORDER.index(path.stem)
        for target, line, _ in imports_of(path):
            if not target.startswith("runner."):
                continue
            other = target.split(".")[1]
            if other not in RUNNER_ORDER or RUNNER_ORDER.index(other) >= me:
                wrong.append(f"pgbus_flask/runner/{path.name}:{line}: {path.stem} imports {other}")
    assert not wrong, "\n".join(wrong)


def test_only_the_runner_changes_a_status() -> None:
    """DESIGN section 5: every transition goes through the runner. No other module writes a status."""
    writers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "runner" or path.name in ("testing.py", "demo.py", "filters.py"):
            continue  # testing empties tables; the demo ages its seeded rows (both documented there);
            # filters composes the runner's row moves, which only the runner runs (below)
        text = path.read_text()
        for needle in ("SET status", "set status"):
            if needle in text:
                writers.append(str(path.relative_to(PACKAGE)))
    assert not writers, f"status written outside the runner in: {writers}"


def test_only_the_runner_runs_the_statements_that_change_a_status() -> None:
    """The statements that write a status (named in pgbus_flask/sql/*.sql, or composed in filters.py)
    are run from the runner only: no other module names them."""
    from pgbus_flask.sql import CATALOG

    writing = {name for name, (_about, text) in CATALOG.items() if "set status" in text.lower()}
    filters_tree = ast.parse((PACKAGE / "filters.py").read_text())
    composing = {node.name for node in filters_tree.body if isinstance(node, ast.FunctionDef)
                 and "set status" in ast.get_source_segment((PACKAGE / "filters.py").read_text(), node).lower()}
    assert "claim_attempt" in writing and "move_run" in composing
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "runner" or path.name in ("testing.py", "demo.py", "filters.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in writing:
                wrong.append(f"pgbus_flask/{path.relative_to(PACKAGE)}:{node.lineno}: runs {node.value!r}")
            elif (isinstance(node, ast.Attribute) and node.attr in composing and isinstance(node.value, ast.Name)
                  and node.value.id == "filters"):
                wrong.append(f"pgbus_flask/{path.relative_to(PACKAGE)}:{node.lineno}: runs filters.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("filters"):
                wrong += [f"pgbus_flask/{path.relative_to(PACKAGE)}:{node.lineno}: imports filters.{alias.name}"
                          for alias in node.names if alias.name in composing]
    assert not wrong, "\n".join(wrong)
