"""The shape of the code, in the figures issue 20 set targets for.

    python -m bench.house            # a table of figures
    python -m bench.house --details  # and where each comes from

- modules that spell out the run verbs (five or more of them as string literals or definitions);
- SQL string literals in Python (strings that start with a statement's keyword), and in how many modules
  (the library's: the demo in ``pgbus_flask/demo/`` is an app built on it, like ``examples/shop``, and
  keeps its own SQL; ``pgbus_flask.filters`` is where the statements built from arguments live);
- import cycles among the library's modules, counting imports inside functions;
- the longest functions;
- README.md's length, and files that cite a design document the repository does not hold.

It reads the code as text (``ast``): nothing is imported or run.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pgbus_flask", "worker")
VERBS = ("pause", "resume", "resume_at", "run_now", "reschedule", "skip", "rerun", "cancel", "upgrade")
SQL_START = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|LOCK|TRUNCATE|SET|LISTEN|NOTIFY|"
                       r"BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|VALUES|PREPARE|DO)\b")


def modules() -> Iterator[tuple[str, Path, ast.Module]]:
    """(dotted name, path, tree) of every library module; ``worker/`` ships as ``pgbus_flask.worker``."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[0] == "worker":
                parts = ["pgbus_flask", *parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def _strings(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, ast.JoinedStr):
            yield "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))


def verb_modules() -> dict[str, list[str]]:
    found = {}
    for name, _path, tree in modules():
        named = {text for text in _strings(tree) if text in VERBS}
        named |= {node.name for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in VERBS}
        if len(named) >= 5:
            found[name] = sorted(named)
    return found


#: Packages that are apps built on the library rather than the library: their SQL is their own.
APPS = ("pgbus_flask.demo",)


def sql_literals() -> dict[str, int]:
    found: dict[str, int] = {}
    for name, _path, tree in modules():
        if name == APPS[0] or name.startswith(tuple(app + "." for app in APPS)):
            continue
        count = sum(1 for text in _strings(tree) if SQL_START.match(text) and len(text.split()) > 2)
        if count:
            found[name] = count
    return found


def import_graph() -> dict[str, set[str]]:
    names = {name for name, _path, _tree in modules()}
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path, tree in modules():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and ast.unparse(node.test).endswith("TYPE_CHECKING") for inner in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in typing_only:  # not imported at run time
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # ``from pkg import mod`` depends on ``mod``; ``from pkg import name`` on ``pkg``.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in names else base
                           for alias in node.names]
            for target in targets:
                while target and target not in names:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def cycles_without_package_inits(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles left once a package's ``__init__`` re-exporting its own modules is not counted as a way back."""
    trimmed = {name: {t for t in targets if not (t.startswith(name + ".") and name in graph)}
               for name, targets in graph.items()}
    return cycles(trimmed)


def functions() -> list[tuple[int, str]]:
    found = []
    for name, _path, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))  # type: ignore[operator]
    return sorted(found, reverse=True)


#: What a citation of the design notes the project was planned from looks like: a document kept beside
#: the repository, never in it (the project's own notes are docs/architecture.md and docs/decisions.md).
OUTSIDE_NOTES = ("DESIGN" + ".md", ".." + "/shared")


def design_citations() -> list[str]:
    found = []
    for path in ROOT.rglob("*"):
        if any(part in (".git", ".venv", "node_modules", "build", "dist") or part.endswith(".egg-info")
               for part in path.relative_to(ROOT).parts):
            continue
        if path.suffix in (".py", ".md", ".cfg", ".html", ".sql", ".toml") and path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            if any(mark in text for mark in OUTSIDE_NOTES):
                found.append(str(path.relative_to(ROOT)))
    return sorted(found)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--details", action="store_true", help="say where each figure comes from")
    args = parser.parse_args(argv)
    verbs = verb_modules()
    sql = sql_literals()
    graph = import_graph()
    circles = cycles(graph)
    longest = functions()
    readme = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    citing = design_citations()
    rows = [
        ("modules that spell out >= 5 run verbs", str(len(verbs))),
        ("SQL string literals in Python", f"{sum(sql.values())} in {len(sql)} modules"),
        ("import cycles (imports inside functions too)",
         f"{len(circles)} ({', '.join(str(len(c)) for c in circles)} modules)" if circles else "0"),
        ("the longest function", f"{longest[0][1]} {longest[0][0]} lines" if longest else "-"),
        ("functions over 60 lines", str(sum(1 for lines, _ in longest if lines > 60))),
        ("README.md", f"{readme} lines"),
        ("files citing design notes outside the repository", str(len(citing))),
    ]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    if args.details:
        print("\nverbs:", *(f"  {m}: {', '.join(v)}" for m, v in sorted(verbs.items())), sep="\n")
        print("\nSQL literals:", *(f"  {m}: {n}" for m, n in sorted(sql.items(), key=lambda i: -i[1])), sep="\n")
        print("\ncycles:", *(f"  {' <-> '.join(c)}" for c in circles), sep="\n")
        print("\nfunctions over 60 lines:", *(f"  {n:4d}  {f}" for n, f in longest if n > 60), sep="\n")
        print("\nciting:", *(f"  {p}" for p in citing), sep="\n")


if __name__ == "__main__":
    main()
