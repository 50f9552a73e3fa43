"""The presentation layer (pgbus_flask/present/): what every door says, said the same way by each.

It takes ``now`` and the viewer's words as arguments and never reads ``flask.g`` (it imports nothing of
Flask); the MCP server and the CLI sit on it and import nothing from the dashboard's package.
"""

from __future__ import annotations

import ast
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from flask import Flask

import pgbus_flask
from pgbus_flask.errors import InvalidInput
from pgbus_flask.present import english, error_text, moment, sentences, terminal_safe
from pgbus_flask.present.state import Presentation
from pgbus_flask.present.words import Words
from pgbus_flask.queries import AttentionGroup
from pgbus_flask.web import helpers

PACKAGE = Path(pgbus_flask.__file__).parent
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)


def imported(path: Path, root: Path = PACKAGE.parent) -> set[str]:
    """The modules ``path`` imports (absolute names; relative imports resolved in the package under ``root``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parts = list(path.relative_to(root).with_suffix("").parts)
    package = parts if path.name == "__init__.py" else parts[:-1]
    if path.name == "__init__.py":
        package = parts[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def test_the_presentation_layer_imports_nothing_of_flask_or_of_the_doors() -> None:
    wrong = []
    for path in sorted((PACKAGE / "present").glob("*.py")):
        for name in imported(path):
            if name.split(".")[0] in ("flask", "werkzeug") or name.startswith(
                    ("pgbus_flask.web", "pgbus_flask.cli", "pgbus_flask.mcp_server")):
                wrong.append(f"{path.name} imports {name}")
    assert not wrong, wrong


def test_the_mcp_server_and_the_cli_import_nothing_from_the_dashboard() -> None:
    paths = [*sorted((PACKAGE / "mcp_server").glob("*.py")), PACKAGE / "cli.py"]
    wrong = [f"{path.name} imports {name}" for path in paths for name in imported(path)
             if name.startswith("pgbus_flask.web")]
    assert not wrong, wrong
    # and the MCP server takes its words from present/, not from the CLI
    assert not [name for path in sorted((PACKAGE / "mcp_server").glob("*.py")) for name in imported(path)
                if name.startswith("pgbus_flask.cli")]


def test_the_check_fails_on_a_violation(tmp_path: Path) -> None:
    """The import reader sees a relative import of the dashboard (what the rules above look for)."""
    (tmp_path / "pgbus_flask" / "present").mkdir(parents=True)
    module = tmp_path / "pgbus_flask" / "present" / "bad.py"
    module.write_text("from ..web import helpers\nfrom flask import g\n")
    assert {"pgbus_flask.web", "pgbus_flask.web.helpers", "flask", "flask.g"} <= imported(module, tmp_path)


def group(count: int, error: str | None = "TimeoutError", reason: str = "paused_error") -> AttentionGroup:
    return AttentionGroup("Order", "capture", reason, error, count, NOW, NOW, "boom")


def test_sentences_take_their_words_as_an_argument() -> None:
    german = Words("de")
    said = sentences.bulk_confirm(english(), "resume", group(3))
    assert said == "Resume all 3 runs paused at capture on TimeoutError?"
    assert sentences.bulk_confirm(german, "resume", group(3)) not in ("", said)
    assert sentences.label(german, sentences.ACTION_LABELS, "resume") == "Fortsetzen"
    assert sentences.label(english(), sentences.ACTION_LABELS, "resume") == "Resume"
    waiting = Presentation("waiting", "yellow", "waiting", {"step": "ship", "since": NOW - timedelta(hours=3)})
    assert sentences.next_sentence(english(), waiting, NOW).striptags() == "Waiting at ship for 3 hours."
    assert "3 Stunden" in sentences.next_sentence(german, waiting, NOW).striptags()


def test_the_dashboard_says_the_same_in_its_request(app: Flask) -> None:
    """The dashboard's helpers are the same functions, bound to the request's words."""
    with app.test_request_context("/pgbus/"):
        from flask import g

        g.pgbus_locale = "de"
        assert helpers.bulk_confirm("skip", group(4)) == sentences.bulk_confirm(Words("de"), "skip", group(4))
        assert helpers.action_confirm("cancel", "Order", "capture") == sentences.action_confirm(
            Words("de"), "cancel", "Order", "capture")


def test_text_for_terminals_and_models() -> None:
    assert terminal_safe("a\x1b[31mb\u202ec") == "a\\x1b[31mb\\u202ec"
    assert error_text("x" * 600).endswith("... (100 more characters)")
    assert moment("2030-01-01T09:00+00:00") == datetime(2030, 1, 1, 9, tzinfo=timezone.utc)
    with pytest.raises(InvalidInput, match="has no timezone"):
        moment("2030-01-01T09:00")
    with pytest.raises(InvalidInput, match=r"^when 'soon' is not an ISO 8601 date and time"):
        moment("soon", "when")
