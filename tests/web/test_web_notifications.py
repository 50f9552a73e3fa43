"""The Notifications page, its "send a test" button, ``/api/notifications`` and the MCP tool
``list_notifications``: the targets without their secrets, the deliveries with their status."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import replace

import pytest
from flask import Flask

from pgbus_flask.mcp_server.server import McpServer
from pgbus_flask.notify.targets import parse_targets
from tests.support import work
from tests.support.webhooks import Receiver
from tests.support.webtools import count_testid, csrf, engine_of, text_of

SECRET = "whsec_" + base64.b64encode(b"another secret, thirty-two bytes").decode()
SLACK = "https://hooks.slack.com/services/T000/B000/XXXXSECRET"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def targets(url: str) -> list[dict[str, object]]:
    return [{"name": "ops", "url": url, "secret": SECRET, "events": ["attention", "step_failed"]},
            {"name": "chat", "url": SLACK, "format": "slack", "classes": ["InvoiceSync"]}]


@pytest.mark.settings(PGBUS_WEBHOOKS=targets("http://127.0.0.1:9/hook"))
def test_the_page_shows_the_targets_never_their_secrets(app: Flask) -> None:
    page = app.test_client().get("/pgbus/notifications").get_data(as_text=True)
    assert count_testid(page, "target-row") == 2
    assert "https://hooks.slack.com/…" in page and "http://127.0.0.1:9/…" in page
    assert "XXXXSECRET" not in page and SECRET not in page and SECRET[6:] not in page
    assert "No message was sent in the last seven days." in text_of(page)
    data = app.test_client().get("/pgbus/api/notifications").get_json()
    assert [(t["name"], t["url"], t["signed"]) for t in data["targets"]] == [
        ("ops", "http://127.0.0.1:9/…", True), ("chat", "https://hooks.slack.com/…", False)]
    assert "XXXXSECRET" not in json.dumps(data)


def test_a_test_message_is_sent_and_says_who_asked(app: Flask, receiver: Receiver) -> None:
    engine = engine_of(app)  # the receiver's port is known only now: its targets set as the app's would be
    engine.settings = replace(engine.settings, webhooks=parse_targets("PGBUS_WEBHOOKS", targets(receiver.url)))
    client = app.test_client()
    token = csrf(client, "/pgbus/notifications")
    refused = client.post("/pgbus/notifications/test", data={"target": "ops"})
    assert refused.status_code == 400  # no CSRF token: nothing sent
    unknown = client.post("/pgbus/notifications/test", data={"target": "nobody", "csrf_token": token})
    assert unknown.status_code == 400 and "No webhook target has that name." in unknown.get_data(as_text=True)
    assert client.get("/pgbus/api/notifications").get_json()["deliveries"] == []
    sent = client.post("/pgbus/notifications/test", data={"target": "ops", "csrf_token": token})
    assert sent.status_code == 303
    page = client.get("/pgbus/notifications").get_data(as_text=True)
    assert "A test message to ops is on its way" in text_of(page)
    work(engine)
    [body] = receiver.bodies()
    assert body["type"] == "test" and "sent by" in body["data"]["sentence"]
    page = client.get("/pgbus/notifications").get_data(as_text=True)
    assert count_testid(page, "delivery-row") == 1
    assert 'data-status="delivered"' in page and "Test sent by" in text_of(page)
    server = McpServer(app, write=False)
    result = server.answer(server.tools["list_notifications"], {}, "mcp:test")
    assert not result.is_error
    assert result.content[0].text.splitlines()[0] == "2 webhook targets; the newest 1 deliveries: 1 delivered."  # type: ignore[union-attr]
    assert result.structured_content["deliveries"][0]["status"] == "delivered"  # type: ignore[index]
