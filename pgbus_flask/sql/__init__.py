"""Every statement the library runs, by name, read once from the ``.sql`` files of this folder.

Each file holds the statements of one concern (``runner.sql``, ``reads.sql``, ``insights.sql`` ...).
A statement starts with its name and a one-line comment saying what it does::

    -- name: runs_by_id_range
    -- The runs whose ids lie in [low, high]: a range scan of the unique index on workflow_id.
    SELECT workflow_id, workflow_class, status FROM pgbus_workflows
    WHERE workflow_id BETWEEN %s AND %s ORDER BY workflow_id LIMIT %s;

and runs to the next ``-- name:`` line (a trailing ``;`` is dropped). Parameters are psycopg's
(``%(name)s`` or ``%s``; a literal ``%`` is written ``%%`` when the statement takes parameters).
Statements run through :func:`pgbus_flask.db.run` by name; the few whose text depends on the
arguments (the runs list's filters, the attention groups) are composed in :mod:`pgbus_flask.filters`.

``schema.sql`` (the whole schema, for comparison with the migrations) and ``migrations/`` are not
statements of this kind: :mod:`pgbus_flask.migrate` reads them.
"""

from __future__ import annotations

import re
from importlib import resources

#: Files of this folder that are not named statements.
NOT_STATEMENTS = ("schema.sql",)
_NAME = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$")


def parse(text: str, source: str) -> dict[str, tuple[str, str]]:
    """``{name: (what it does, statement)}`` of one file's text (``source`` names it in errors)."""
    found: dict[str, tuple[str, str]] = {}
    name: str | None = None
    about = ""
    body: list[str] = []

    def close() -> None:
        if name is None:
            return
        statement = "\n".join(body).strip().removesuffix(";").rstrip()
        if not about or not statement:
            raise ValueError(f"{source}: statement {name!r} needs a one-line comment and a statement")
        found[name] = (about, statement)

    for number, line in enumerate(text.splitlines(), 1):
        match = _NAME.match(line)
        if match:
            close()
            name, about, body = match.group(1), "", []
            if name in found:
                raise ValueError(f"{source}:{number}: statement {name!r} is named twice")
        elif name is None:
            if line.strip() and not line.startswith("--"):
                raise ValueError(f"{source}:{number}: a statement before any '-- name:' line")
        elif not about and not body and line.startswith("-- "):
            about = line[3:].strip()
        else:
            body.append(line)
    close()
    return found


def load() -> dict[str, tuple[str, str]]:
    """``{name: (what it does, statement)}`` of every file of this folder; a name given twice is an error."""
    found: dict[str, tuple[str, str]] = {}
    folder = resources.files(__name__)
    for file in sorted(folder.iterdir(), key=lambda f: f.name):
        if not file.name.endswith(".sql") or file.name in NOT_STATEMENTS:
            continue
        for name, entry in parse(file.read_text(encoding="utf-8"), file.name).items():
            if name in found:
                raise ValueError(f"{file.name}: statement {name!r} is named in another file too")
            found[name] = entry
    return found


#: Every named statement: ``{name: (what it does, statement)}``.
CATALOG = load()
#: ``{name: statement}``, what :func:`pgbus_flask.db.run` looks names up in.
STATEMENTS: dict[str, str] = {name: statement for name, (_about, statement) in CATALOG.items()}


def statement(name: str) -> str:
    """The text of the statement called ``name`` (KeyError naming it when there is none)."""
    try:
        return STATEMENTS[name]
    except KeyError:
        raise KeyError(f"no statement is named {name!r} in pgbus_flask/sql/*.sql") from None
