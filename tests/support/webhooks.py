"""A webhook receiver for the notification tests: a real HTTP server on a free port."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """An HTTP server that records every POST and answers from a script (default: 200)."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.script: list[tuple[int, float]] = []  # (status, seconds to wait first), used in order
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status, delay = receiver.script.pop(0) if receiver.script else (200, 0.0)
                if delay:
                    time.sleep(delay)
                headers = {name.lower(): value for name, value in self.headers.items()}
                receiver.received.append({"headers": headers, "body": body, "status": status, "at": time.time()})
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"ok" if status < 300 else b"receiver is down")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self, status: int | None = 200) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in self.received if status is None or r["status"] == status]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def with_a_delivery(engine: Any) -> None:
    """Give ``engine`` two webhook targets (one on a port nobody serves) and one test message made for
    the first, so that the Notifications page shows both tables (its job is queued, never run here)."""
    from dataclasses import replace

    from pgbus_flask import notify
    from pgbus_flask.notify.targets import parse_targets

    secret = "whsec_" + "c2VjcmV0IG9mIHRoZSBwYWdlcywgMzIgYnl0ZXMhIQ=="
    engine.settings = replace(engine.settings, webhooks=parse_targets("PGBUS_WEBHOOKS", [
        {"name": "ops", "url": "http://127.0.0.1:9/hook", "secret": secret, "events": ["attention", "step_failed"]},
        {"name": "chat", "url": "https://hooks.slack.com/services/T0/B0/X", "format": "slack",
         "classes": ["FailsUntil"]}]))
    notify.send_test(engine, "ops", "dashboard:test")
