"""Every migration upgrades a database that holds rows: for each migration N, a fresh database gets
migrations 1..N-1, rows of every kind that schema has, then N, and the rows must survive it.

The rows are built from the catalogs, so a new table or column is seeded without editing this test:
the tables in foreign-key order (a child row points at a parent row), one row for each value a
``CHECK (col IN (...))`` allows in the table's first such column (every run status, step status,
signal status...), each row twice: once with its nullable columns NULL (an older row that never set
them) and once with all of them set. Tables that triggers fill (the run counts, the insight deltas)
get their rows from those triggers. Events cycle through the names the triggers react to.

After N: it applied (and only it), every row seeded is still there, every foreign key and CHECK
constraint holds for every row, every constraint is validated and every index valid.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from pgbus_flask import migrate
from pgbus_flask.testing import drop_database, fresh_database

VERSIONS = [version for version, _ in migrate.migrations()]
#: The event names the schema's triggers and backfills look at, so that seeded events reach them.
EVENTS = ["started", "step_scheduled", "step_completed", "step_failed", "paused", "resumed", "step_skipped",
          "rerun", "cancelled", "finished"]
#: A CHECK that lists the values a column may take: ``(col = ANY (ARRAY['a'::text, 'b'::text]))``.
ENUM = re.compile(r"^CHECK \(\(?\(?(\w+) = ANY \(\(?ARRAY\[(.*?)\]\)?(?:::text\[\])?\)\)?\)?\)$")


@pytest.fixture
def database(server_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"pgbus_upgrade_{os.getpid()}_{request.node.callspec.id}"
    url = fresh_database(server_url, name)
    yield url
    drop_database(server_url, name)


def apply_versions(conn: psycopg.Connection[Any], versions: list[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Apply the first ``len(versions)`` migrations the way ``flask pgbus migrate`` does."""
    chosen = [(v, text) for v, text in migrate.migrations() if v in versions]
    monkeypatch.setattr(migrate, "migrations", lambda: chosen)
    try:
        return migrate.apply(conn)
    finally:
        monkeypatch.undo()


def query(conn: psycopg.Connection[Any], statement: str, *params: Any) -> list[tuple[Any, ...]]:
    return conn.execute(statement.encode(), params or None).fetchall()


def tables(conn: psycopg.Connection[Any]) -> list[str]:
    """The pgbus tables, parents before children."""
    names = [r[0] for r in query(conn, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
                                       " AND table_type = 'BASE TABLE' AND table_name LIKE 'pgbus%%'"
                                       " AND table_name <> 'pgbus_schema_migrations' ORDER BY 1")]
    parents = {name: {p for (p,) in query(conn, "SELECT DISTINCT confrelid::regclass::text FROM pg_constraint"
                                             " WHERE contype = 'f' AND conrelid = %s::regclass", name)} - {name}
               for name in names}
    ordered: list[str] = []
    while len(ordered) < len(names):
        ready = [n for n in names if n not in ordered and parents[n] <= set(ordered)]
        assert ready, f"a foreign-key cycle among {set(names) - set(ordered)}"
        ordered.extend(ready)
    return ordered


def columns(conn: psycopg.Connection[Any], table: str) -> list[dict[str, Any]]:
    rows = query(conn, "SELECT column_name, data_type, is_nullable = 'YES', column_default IS NOT NULL,"
                       " is_identity = 'YES' OR column_default LIKE 'nextval(%%'"
                       " FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s"
                       " ORDER BY ordinal_position", table)
    return [dict(zip(("name", "type", "nullable", "has_default", "serial"), r, strict=True)) for r in rows]


def enums(conn: psycopg.Connection[Any], table: str) -> dict[str, list[str]]:
    """The values each ``CHECK (col IN (...))`` of ``table`` allows, by column."""
    found: dict[str, list[str]] = {}
    for (definition,) in query(conn, "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                                     " WHERE contype = 'c' AND conrelid = %s::regclass ORDER BY conname", table):
        match = ENUM.match(definition)
        if match:
            found[match[1]] = re.findall(r"'([^']*)'::text", match[2])
    return found


def left_null(conn: psycopg.Connection[Any], table: str) -> set[str]:
    """The columns a ``CHECK (a IS NULL OR b IS NULL)`` of ``table`` keeps NULL beside ``a`` (its ``b``s)."""
    found = set()
    for (definition,) in query(conn, "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                                     " WHERE contype = 'c' AND conrelid = %s::regclass", table):
        match = re.fullmatch(r"CHECK \(\(\(\w+ IS NULL\) OR \((\w+) IS NULL\)\)\)", definition)
        if match:
            found.add(match[1])
    return found


def foreign_keys(conn: psycopg.Connection[Any], table: str) -> dict[str, tuple[str, str]]:
    """``{column: (parent table, parent column)}`` for the single-column foreign keys of ``table``."""
    rows = query(conn, "SELECT a.attname, c.confrelid::regclass::text, pa.attname FROM pg_constraint c"
                       " JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]"
                       " JOIN pg_attribute pa ON pa.attrelid = c.confrelid AND pa.attnum = c.confkey[1]"
                       " WHERE c.contype = 'f' AND c.conrelid = %s::regclass AND cardinality(c.conkey) = 1", table)
    return {column: (parent, parent_column) for column, parent, parent_column in rows}


def value(column: dict[str, Any], i: int) -> Any:
    """A value of the column's type, distinct for each row ``i`` (unique indexes hold)."""
    kind, name = column["type"], column["name"]
    if kind == "text":
        return f"{name}-{i}"
    if kind in ("integer", "bigint", "smallint"):
        return i + 1
    if kind in ("numeric", "double precision", "real"):
        return i + 0.5
    if kind == "boolean":
        return i % 2 == 0
    if kind.startswith("timestamp"):
        return sql.SQL("now() - {} * interval '1 minute'").format(sql.Literal(i))
    if kind == "interval":
        return sql.SQL("{} * interval '1 second'").format(sql.Literal(i + 1))
    if kind == "jsonb" or kind == "json":
        return Jsonb({"seeded": i})
    if kind == "uuid":
        return sql.SQL("gen_random_uuid()")
    if kind == "ARRAY":
        return sql.SQL("'{}'")
    raise AssertionError(f"no seed value for {name} of type {kind}: add it to value()")


#: The tables whose rows only triggers write, from the other tables' rows. (Flow control's triggers,
#: 0017, also write runs, steps, events and slots: tables the seed fills itself.)
DERIVED = {"pgbus_run_counts", "pgbus_insight_deltas"}


def trigger_targets(conn: psycopg.Connection[Any]) -> set[str]:
    """The tables of DERIVED the schema's trigger functions write (the run counts, the insight deltas)."""
    bodies = [r[0] for r in query(conn, "SELECT p.prosrc FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
                                        " WHERE NOT t.tgisinternal")]
    return {m for body in bodies for m in re.findall(r"(?:INSERT INTO|UPDATE)\s+(pgbus_\w+)", body, re.I)} & DERIVED


def seed(conn: psycopg.Connection[Any]) -> tuple[list[str], list[str]]:
    """Rows of every kind in every table the schema has: the tables seeded, and those triggers filled."""
    counter = 0
    seeded, derived = [], []
    for table in tables(conn):
        if table in trigger_targets(conn):
            derived.append(table)  # filled by triggers from the other tables
            continue
        seeded.append(table)
        allowed = enums(conn, table)
        if "event" in {c["name"] for c in columns(conn, table)}:
            allowed.setdefault("event", EVENTS)
        fks = foreign_keys(conn, table)
        exclusive = left_null(conn, table)
        parents = {col: [r[0] for r in query(conn, f"SELECT {pcol} FROM {parent} ORDER BY 1")]
                   for col, (parent, pcol) in fks.items()}
        spread = next((name for name in allowed if name in ("status", "kind", "event")), next(iter(allowed), None))
        kinds = allowed[spread] if spread else [None]
        for fill_nullable in (False, True):
            for k, kind_value in enumerate(kinds):
                counter += 1
                names, values = [], []
                for column in columns(conn, table):
                    name = column["name"]
                    if column["serial"] or (column["nullable"] and not fill_nullable) or name in exclusive:
                        continue
                    if column["has_default"] and not fill_nullable:
                        continue
                    if name == spread:
                        chosen: Any = kind_value
                    elif name in allowed:
                        chosen = allowed[name][counter % len(allowed[name])]
                    elif name in fks:
                        if not parents[name]:
                            continue
                        chosen = parents[name][(counter + k) % len(parents[name])]
                    else:
                        chosen = value(column, counter)
                    if isinstance(chosen, sql.Composable):
                        values.append(chosen)
                    else:
                        values.append(sql.Literal(chosen))
                    names.append(sql.Identifier(name))
                statement = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                    sql.Identifier(table), sql.SQL(", ").join(names), sql.SQL(", ").join(values))
                conn.execute(statement)
    return seeded, derived


def keys(conn: psycopg.Connection[Any], table: str) -> list[tuple[Any, ...]]:
    """The table's rows by their primary key (or every column when it has none)."""
    pk = [r[0] for r in query(conn, "SELECT a.attname FROM pg_index i JOIN pg_attribute a"
                                    " ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)"
                                    " WHERE i.indrelid = %s::regclass AND i.indisprimary ORDER BY a.attnum", table)]
    chosen = sql.SQL(", ").join(map(sql.Identifier, pk)) if pk else sql.SQL("t::text")
    statement = sql.SQL("SELECT {} FROM {} AS t ORDER BY 1").format(chosen, sql.Identifier(table))
    return conn.execute(statement).fetchall()


def broken_constraints(conn: psycopg.Connection[Any]) -> list[str]:
    """Rows that break a CHECK or a foreign key, constraints not validated, indexes not valid."""
    problems = [f"constraint {name} on {table} is not validated" for table, name in query(
        conn, "SELECT conrelid::regclass::text, conname FROM pg_constraint WHERE NOT convalidated"
              " AND connamespace = 'public'::regnamespace AND conrelid::regclass::text LIKE 'pgbus%%'")]
    problems += [f"index {name} is not valid" for (name,) in query(
        conn, "SELECT indexrelid::regclass::text FROM pg_index WHERE NOT indisvalid"
              " AND indrelid::regclass::text LIKE 'pgbus%%'")]
    for table, name, definition in query(
            conn, "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
                  " WHERE contype = 'c' AND connamespace = 'public'::regnamespace"
                  " AND conrelid::regclass::text LIKE 'pgbus%%'"):
        expression = definition.removeprefix("CHECK ").removesuffix(" NOT VALID")
        bad = query(conn, f"SELECT count(*) FROM {table} WHERE NOT {expression}")[0][0]
        if bad:
            problems.append(f"{bad} rows of {table} break {name}: {definition}")
    for table, name, column, parent, parent_column in query(
            conn, "SELECT c.conrelid::regclass::text, c.conname, a.attname, c.confrelid::regclass::text, pa.attname"
                  " FROM pg_constraint c"
                  " JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]"
                  " JOIN pg_attribute pa ON pa.attrelid = c.confrelid AND pa.attnum = c.confkey[1]"
                  " WHERE c.contype = 'f' AND c.conrelid::regclass::text LIKE 'pgbus%%'"):
        bad = query(conn, f"SELECT count(*) FROM {table} c WHERE c.{column} IS NOT NULL AND NOT EXISTS"
                          f" (SELECT 1 FROM {parent} p WHERE p.{parent_column} = c.{column})")[0][0]
        if bad:
            problems.append(f"{bad} rows of {table} break {name}")
    return problems


@pytest.mark.parametrize("version", VERSIONS[1:])
def test_a_migration_upgrades_a_database_holding_rows_of_every_kind(
        database: str, version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    before = VERSIONS[:VERSIONS.index(version)]
    with psycopg.connect(database, autocommit=True) as conn:
        assert apply_versions(conn, before, monkeypatch) == before
        with conn.transaction():
            seeded, derived = seed(conn)
        rows = {table: keys(conn, table) for table in seeded}
        assert all(rows.values()), f"a table got no rows: { {t: len(r) for t, r in rows.items()} }"
        assert broken_constraints(conn) == []  # the seed itself is consistent
        for table in derived:
            assert query(conn, f"SELECT count(*) FROM {table}")[0][0], f"the seed reached no trigger filling {table}"

        assert apply_versions(conn, [*before, version], monkeypatch) == [version]

        for table, kept in rows.items():
            assert set(kept) <= set(keys(conn, table)), f"rows of {table} lost"
        for table in derived:  # rebuilt by a migration maybe, never emptied
            assert query(conn, f"SELECT count(*) FROM {table}")[0][0], f"{table} lost its rows"
        assert broken_constraints(conn) == []


def test_every_migration_is_covered() -> None:
    """The first migration starts from nothing; every later one is upgraded with rows by the test above."""
    assert VERSIONS[0].startswith("0001") and len(VERSIONS) >= 2
    assert [int(v[:4]) for v in VERSIONS] == list(range(1, len(VERSIONS) + 1)), VERSIONS
