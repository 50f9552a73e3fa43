"""Write docs/configuration.md from the settings table, ``pgbus_flask.config.KEYS``.

    python docs/make_configuration.py           # rewrite docs/configuration.md
    python docs/make_configuration.py --check   # exit 1 if the file is out of date

The names, defaults and meanings come from ``KEYS`` only; this script adds the
grouping and a few sentences per group. Every key must sit in exactly one group,
so a new key cannot be left out of the reference without this script saying so.
``tests/unit/test_docs.py`` fails when the file differs from what this script writes.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "configuration.md"

#: Keys the engine cannot run without: their default (None) is shown as "(required)".
REQUIRED = ("PGBUS_DATABASE_URL", "PGBUS_REDIS_URL")

#: (title, what to know about the group, its keys in the order shown).
GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("PostgreSQL and Redis",
     "Every process that starts runs, works steps or serves the dashboard needs both URLs. All workflow state lives"
     " in the PostgreSQL database; Redis holds only RQ's queues, so losing it loses no run (the sweep resends what"
     " it lost). A URL is shown in errors and logs with its password replaced by `***`. Behind a transaction-mode"
     " pooler (PgBouncer's `pool_mode = transaction`, Supavisor's transaction port, ...) set"
     " `PGBUS_DATABASE_POOLER = \"transaction\"`: see [deploy.md](deploy.md#pgbouncer-and-other-poolers).",
     ("PGBUS_DATABASE_URL", "PGBUS_DATABASE_POOLER", "PGBUS_REDIS_URL", "PGBUS_POOL_SIZE")),
    ("Steps and workers",
     "How step jobs are queued and how much one job may run. Every worker should import the same workflow modules"
     " (`PGBUS_IMPORT`, or the app that imports them): a worker runs only the steps and fan-out functions of"
     " workflows it knows. How inline continuation works:"
     " [architecture.md](architecture.md#inline-continuation).",
     ("PGBUS_QUEUE", "PGBUS_IMPORT", "PGBUS_WORKER_CLASS", "PGBUS_STEP_TIMEOUT", "PGBUS_INLINE_STEPS",
      "PGBUS_INLINE_SECONDS", "PGBUS_MAX_PENDING_SIGNALS", "PGBUS_APP_REVISION")),
    ("The sweep and attention",
     "Each worker runs the sweep every `PGBUS_SWEEP_INTERVAL`, one at a time across machines (what it"
     " does: [architecture.md](architecture.md#the-sweep)). The"
     " thresholds decide when a run is called stuck: the dashboard, `flask pgbus attention` and the"
     " metrics show those runs. Retention: the sweep deletes finished runs older than"
     " `PGBUS_RETENTION_FINISHED` and cancelled ones older than `PGBUS_RETENTION_CANCELLED`, each"
     " `PGBUS_RETENTION` unless set (`\"forever\"` or None keeps them); a run's age counts from its last change."
     " Paused runs, those whose step failed among them, are never deleted: a person ends them (cancel, skip,"
     " resume), and their retention counts from then. A child run is a run of its own, kept by its own"
     " status.",
     ("PGBUS_SWEEP_INTERVAL", "PGBUS_STALL_THRESHOLD", "PGBUS_WAITING_THRESHOLD", "PGBUS_RETENTION",
      "PGBUS_RETENTION_FINISHED", "PGBUS_RETENTION_CANCELLED")),
    ("Dashboard",
     "`PgBus(app)` mounts the dashboard at `PGBUS_DASHBOARD_PREFIX`. It refuses to serve unless"
     " `PGBUS_DASHBOARD_AUTH` is set, the app is in debug or testing mode, or `PGBUS_DASHBOARD_PUBLIC` is true."
     " Without the hook it answers only at loopback names (`localhost`, `127.0.0.1`, `[::1]`) and at the hosts in"
     " `PGBUS_DASHBOARD_HOSTS` or Flask's `TRUSTED_HOSTS`, against DNS rebinding. The auth hook's answer must be a"
     " `str` or `int` (recorded as `dashboard:NAME`), `True` (an anonymous operator) or a falsy value (refused);"
     " any other type is a 500 naming it. See [dashboard.md](dashboard.md).",
     ("PGBUS_DASHBOARD_PREFIX", "PGBUS_DASHBOARD_AUTH", "PGBUS_DASHBOARD_PUBLIC", "PGBUS_DASHBOARD_HOSTS",
      "PGBUS_SUBJECT_URL", "PGBUS_LIVE_REFRESH", "PGBUS_TIMEZONE")),
    ("Languages",
     "The dashboard's twelve catalogs, and how to narrow or override them without touching the host app's"
     " Flask-Babel setup. See [i18n.md](i18n.md).",
     ("PGBUS_LOCALES", "PGBUS_DEFAULT_LOCALE", "PGBUS_TRANSLATIONS")),
    ("Metrics",
     "Prometheus gauges at `<prefix>/metrics`, behind the dashboard's auth or the bearer token; they need"
     " `pip install 'pgbus-flask[metrics]'`. Workers serve their own counters with"
     " `pgbus-worker --metrics-port`. See [metrics.md](metrics.md).",
     ("PGBUS_METRICS", "PGBUS_METRICS_TOKEN")),
    ("MCP server",
     "`flask pgbus mcp` (with `pip install 'pgbus-flask[mcp]'`). For these two keys the environment of the"
     " `flask pgbus mcp` process wins over `app.config`, so an MCP client's configuration can set them. Serving"
     " beyond loopback also needs `--allow-remote` and `--allowed-host`. See [mcp.md](mcp.md).",
     ("PGBUS_MCP_WRITE", "PGBUS_MCP_TOKEN")),
    ("Telling a person",
     "Signals (`pgbus_flask.signals`) need no setting. Webhooks do: `PGBUS_WEBHOOKS` names the targets (a list of"
     " dicts, JSON in the environment), `PGBUS_NOTIFY_INTERVAL` is the most a target hears about one attention"
     " group, and `PGBUS_DASHBOARD_URL` gives their messages a link. Set them where the workers run: the pump and"
     " the deliveries are RQ jobs. `PGBUS_ERROR_REPORTER` hears of every failure pgbus handles by itself. See"
     " [notifications.md](notifications.md).",
     ("PGBUS_WEBHOOKS", "PGBUS_NOTIFY_INTERVAL", "PGBUS_DASHBOARD_URL", "PGBUS_ERROR_REPORTER")),
)

HEADER = """\
# Configuration

<!-- Written by docs/make_configuration.py from pgbus_flask.config.KEYS: edit those, then run
     `python docs/make_configuration.py`. tests/unit/test_docs.py fails when this file is out of date. -->

Every setting is a `PGBUS_*` key. Set it in any of three places:

- `app.config["PGBUS_DATABASE_URL"] = ...` in a Flask app;
- as a keyword argument of `PgBus(...)`, in lower case without the prefix
  (`PgBus(database_url=..., redis_url=...)`), with or without an app;
- in the environment, for `pgbus-worker` started without an app (and for the
  keys of the MCP server).

A bad value fails at start-up with a `ConfigError` that names the key, and so
does an unknown `PGBUS_*` key (a typo is not ignored). Durations take a
`timedelta` or a number of seconds (`"300"` in the environment); lists take a
Python list or a comma-separated string. A callable may be given as a dotted
path (`"myapp.auth:operator"`).
"""


def show_default(name: str, default: Any) -> str:
    """A key's default as the reference shows it."""
    if name in REQUIRED:
        return "(required)"
    if default is None or default == ():
        return "none"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, timedelta):
        return show_duration(default)
    if isinstance(default, int):
        return f"{default:,}"
    if isinstance(default, tuple):
        return ", ".join(f"`{item}`" for item in default)
    return f"`{default}`"


def show_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    if seconds % 86_400 == 0:
        return f"{seconds // 86_400} days" if seconds != 86_400 else "1 day"
    if seconds % 60 == 0 and seconds >= 60:
        return f"{seconds // 60} min ({seconds} s)"
    return f"{seconds} s"


def cell(text: str) -> str:
    """Text fit for one cell of a Markdown table."""
    # "<locale>" would read as an HTML tag: escape it.
    return text.replace("|", "\\|").replace("<", "\\<").replace("\n", " ")


def render() -> str:
    """The whole of docs/configuration.md."""
    from pgbus_flask.config import KEYS

    by_name = {key.name: key for key in KEYS}
    grouped = [name for _title, _text, names in GROUPS for name in names]
    unknown = sorted(set(grouped) - set(by_name))
    twice = sorted({name for name in grouped if grouped.count(name) > 1})
    left_out = [name for name in by_name if name not in grouped]
    if unknown or twice or left_out:
        raise SystemExit(f"docs/make_configuration.py: GROUPS names keys KEYS does not have {unknown}, names"
                         f" {twice} twice, or leaves out {left_out}: put each key in one group")
    parts = [HEADER]
    parts.append("## Contents\n\n" + "\n".join(f"- [{title}](#{anchor(title)})" for title, _t, _n in GROUPS)
                 + "\n")
    for title, text, names in GROUPS:
        rows = ["| key | default | meaning |", "|---|---|---|"]
        for name in names:
            key = by_name[name]
            rows.append(f"| `{name}` | {cell(show_default(name, key.default))} | {cell(key.meaning)} |")
        parts.append(f"## {title}\n\n{wrap(text)}\n\n" + "\n".join(rows) + "\n")
    return "\n".join(parts)


def anchor(title: str) -> str:
    """GitHub's anchor for a heading (lower case, spaces to hyphens, punctuation dropped)."""
    kept = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


def words(text: str) -> list[str]:
    """``text`` split at spaces, but never inside a `code span`."""
    found: list[str] = []
    for word in text.split():
        if found and found[-1].count("`") % 2:
            found[-1] += " " + word
        else:
            found.append(word)
    return found


def wrap(text: str, width: int = 100) -> str:
    lines, line = [], ""
    for word in words(text):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/configuration.md is out of date")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    text = render()
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print("docs/configuration.md is out of date: run python docs/make_configuration.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
