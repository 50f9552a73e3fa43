"""Text someone else wrote cannot reorder the page: every occurrence is bidi-isolated.

A right-to-left override (U+202E) in a subject, a reason, an actor or an error
message reverses everything after it up to the end of its paragraph, unless
an isolating element (``<bdi>``, ``dir``, or a class the stylesheet gives
``unicode-bidi: isolate``) or, in plain text (attributes shown to the
operator, ``<title>``, a confirm dialog), FSI ... PDI holds it.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from flask import Flask

from pgbus_flask.workflow import Workflow, step
from tests.support import work
from tests.support.webtools import csrf, engine_of

RLO = "\u202e"
OPENERS, PDI = "\u2066\u2067\u2068", "\u2069"
MARKERS = {"subject": f"S{RLO}UBJ", "reason": f"R{RLO}EASON", "actor": f"A{RLO}CTOR", "error": f"E{RLO}RROR"}
CSS = Path(__file__).resolve().parents[2] / "templates" / "pgbus" / "static" / "pgbus.css"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
#: Attributes a person reads (the rest, such as data-step or href, are never shown as text).
SHOWN_ATTRIBUTES = {"title", "data-confirm", "placeholder", "aria-label", "alt"}
#: Form controls lay their text out on its own: it cannot reach the page around them.
CONTROLS = {"textarea", "option", "select"}


class BidiHostile(Workflow):
    """Fails with the message it was started with."""

    @step
    def hostile(self) -> None:
        raise ValueError(self.kwargs["msg"])


def isolating_selectors() -> tuple[set[str], set[str]]:
    """The tags and classes the stylesheet isolates."""
    tags: set[str] = set()
    classes: set[str] = set()
    for selectors in re.findall(r"([^{}]+)\{[^}]*unicode-bidi:\s*isolate[^}]*\}", CSS.read_text()):
        for selector in selectors.split(","):
            last = selector.strip().split()[-1]
            classes.update(re.findall(r"\.([\w-]+)", last))
            if re.fullmatch(r"[a-z]+", last):
                tags.add(last)
    return tags, classes


def wrapped(text: str, index: int) -> bool:
    """Whether position ``index`` of plain ``text`` is inside FSI/LRI/RLI ... PDI."""
    depth = 0
    for ch in text[:index]:
        if ch in OPENERS:
            depth += 1
        elif ch == PDI and depth:
            depth -= 1
    return depth > 0 and PDI in text[index:]


class BidiAudit(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags, self.classes = isolating_selectors()
        self.stack: list[tuple[str, bool]] = []
        self.bad: list[str] = []
        self.seen: list[str] = []

    def isolating(self, tag: str, attrs: dict[str, str | None]) -> bool:
        classes = set((attrs.get("class") or "").split())
        return tag == "bdi" or "dir" in attrs or tag in self.tags or bool(classes & self.classes) or tag in CONTROLS

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        for name, value in attrs:
            if value and RLO in value and name in SHOWN_ATTRIBUTES:
                self.seen.append(value)
                if not all(wrapped(value, m.start()) for m in re.finditer(RLO, value)):
                    self.bad.append(f"<{tag} {name}={value!r}>")
        if tag not in VOID:
            self.stack.append((tag, self.isolating(tag, found)))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data: str) -> None:
        if RLO not in data:
            return
        self.seen.append(data)
        inside = any(isolating for _, isolating in self.stack)
        if not inside and not all(wrapped(data, m.start()) for m in re.finditer(RLO, data)):
            self.bad.append(f"{data.strip()[:60]!r} in {'/'.join(t for t, _ in self.stack)}")


def audit(page: str) -> BidiAudit:
    parser = BidiAudit()
    parser.feed(page)
    parser.close()
    return parser


def test_the_stylesheet_isolates_the_classes_the_pages_rely_on() -> None:
    tags, classes = isolating_selectors()
    assert "bdi" in tags and {"pgbus-code", "error-text", "json", "actor"} <= classes


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: MARKERS["actor"],
                      PGBUS_SUBJECT_URL=lambda kind, ident: f"/orders/{ident}")
def test_every_hostile_string_on_every_page_is_isolated(app: Flask) -> None:
    with app.app_context():
        run = BidiHostile.start(msg=MARKERS["error"], subject=("Order", MARKERS["subject"]))
        work(engine_of(app))
    client = app.test_client()
    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    resumed = client.post(f"/pgbus/runs/{run.workflow_id}/actions/resume",
                          data={"csrf_token": token, "confirmed": "1", "reason": MARKERS["reason"]})
    assert resumed.status_code == 303
    with app.app_context():
        work(engine_of(app))  # fails again: paused, with the resume in its audit trail
    signal = client.post(f"/pgbus/runs/{run.workflow_id}/signals",
                         data={"csrf_token": token, "name": "go", "reason": MARKERS["reason"]})
    assert signal.status_code == 303
    group = {"csrf_token": token, "action": "resume", "workflow_class": "BidiHostile", "step_name": "hostile",
             "stuck_reason": "paused_error", "error_class": "ValueError", "reason": MARKERS["reason"]}
    pages = {
        "run": client.get(f"/pgbus/runs/{run.workflow_id}"),
        "runs": client.get("/pgbus/runs"),
        "runs filtered": client.get("/pgbus/runs", query_string={"subject": f"Order {MARKERS['subject']}"}),
        "attention": client.get("/pgbus/attention"),
        "api-free overview": client.get("/pgbus/"),
        "action confirm": client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel",
                                      data={"csrf_token": token, "reason": MARKERS["reason"]}),
        "bulk confirm": client.post("/pgbus/attention/bulk", data=group),
        "unknown status": client.get("/pgbus/runs", query_string={"status": MARKERS["error"]}),
        "unknown action": client.post(f"/pgbus/runs/{run.workflow_id}/actions/{MARKERS['error']}",
                                      data={"csrf_token": token}),
        "unknown run": client.get(f"/pgbus/runs/{MARKERS['error']}"),
        "refused signal": client.post(f"/pgbus/runs/{run.workflow_id}/signals",
                                      data={"csrf_token": token, "name": "go", "payload": "[1",
                                            "reason": MARKERS["reason"]}),
    }
    seen = ""
    for name, response in pages.items():
        assert response.status_code < 500, name
        found = audit(response.get_data(as_text=True))
        assert found.bad == [], f"{name}: not isolated: {found.bad}"
        seen += "".join(found.seen)
    for kind, marker in MARKERS.items():
        assert marker in seen, f"the {kind} was shown somewhere"
    run_page = pages["run"].get_data(as_text=True)
    assert run_page.count(RLO) >= 8, "subject, actor (top bar, sent by, audit), reason, error (attempt, audit)"
