"""``PGBUS_WEBHOOKS``: the webhook targets, checked when the settings load.

A target is a dict (or, in the environment, a JSON list of them)::

    {"name": "ops", "url": "https://hooks.example.com/pgbus", "secret": "whsec_...",
     "events": ["attention", "step_failed"], "classes": ["InvoiceSync"], "format": "standard"}

``events`` are ``attention`` (messages about attention groups: opened, more runs, resolved; the
default), ``run_finished``, ``run_cancelled`` and ``step_failed`` (one message each). ``format`` is
``standard`` (Standard Webhooks: a JSON body, signed with ``secret``) or ``slack`` (a Slack incoming
webhook's ``{"text": ...}``; signed too when a secret is given). A bad target fails at start-up with
a :class:`~pgbus_flask.errors.ConfigError` naming the target and the field, never showing a secret.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError

#: What a target may ask for.
EVENTS: tuple[str, ...] = ("attention", "run_finished", "run_cancelled", "step_failed")
FORMATS: tuple[str, ...] = ("standard", "slack")
_FIELDS = frozenset({"name", "url", "secret", "events", "classes", "format", "timeout"})
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Target:
    """One webhook target of ``PGBUS_WEBHOOKS``."""

    name: str
    url: str = field(repr=False)  # a Slack URL's path is its secret
    secret: str | None = field(repr=False)
    events: tuple[str, ...]
    classes: tuple[str, ...] | None
    format: str
    timeout: float = 10.0

    @property
    def shown_url(self) -> str:
        """The URL as pages and logs show it: its scheme and host only (a path or query may hold a token)."""
        parts = urlsplit(self.url)
        rest = "/…" if parts.path.strip("/") or parts.query else ""
        return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{rest}"

    def wants(self, event: str, workflow_class: str | None) -> bool:
        """Whether this target is told of ``event`` (one of EVENTS) for a run of ``workflow_class``."""
        return event in self.events and (self.classes is None or workflow_class is None
                                          or workflow_class in self.classes)


def parse_targets(key: str, value: Any) -> tuple[Target, ...]:
    """The targets ``value`` describes (a list of dicts, or its JSON), checked; ConfigError naming ``key``."""
    if value is None or value == "" or value == () or value == []:
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(key, f"must be a JSON list of targets, got text that is not JSON ({exc.msg})") from None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(key, f"must be a list of targets (dicts), got a {type(value).__name__}")
    targets = tuple(_target(key, index, item) for index, item in enumerate(value, 1))
    names = [target.name for target in targets]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(key, f"two targets are named {name!r}: each needs its own name")
    if any(target.secret for target in targets):
        try:
            import standardwebhooks  # noqa: F401
        except ImportError:
            raise ConfigError(key, "signed targets need standardwebhooks: pip install 'pgbus-flask[webhooks]'") \
                from None
    return targets


def _target(key: str, index: int, item: Any) -> Target:
    where = f"target {index}"
    if not isinstance(item, dict):
        raise ConfigError(key, f"{where} must be a dict, got a {type(item).__name__}")
    if isinstance(item.get("name"), str):
        where = f"target {item['name']!r}"
    unknown = sorted(set(item) - _FIELDS)
    if unknown:
        raise ConfigError(key, f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(_FIELDS))})")
    url = item.get("url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if not isinstance(url, str) or parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(key, f"{where}: url must be an http:// or https:// URL")
    name = item.get("name", parts.hostname)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(key, f"{where}: name must be 1-64 letters, digits, '.', '_' or '-', got {name!r}")
    fmt = item.get("format", "standard")
    if fmt not in FORMATS:
        raise ConfigError(key, f"{where}: format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    secret = item.get("secret")
    if secret is not None:
        _check_secret(key, where, secret)
    elif fmt == "standard":
        raise ConfigError(key, f"{where}: a standard target needs a secret (whsec_ and base64) to sign with")
    events = item.get("events", ("attention",))
    if isinstance(events, str) or not isinstance(events, (list, tuple)) or not events:
        raise ConfigError(key, f"{where}: events must be a non-empty list among {', '.join(EVENTS)}")
    for event in events:
        if event not in EVENTS:
            raise ConfigError(key, f"{where}: unknown event {event!r} (known: {', '.join(EVENTS)})")
    classes = item.get("classes")
    if classes is not None and (isinstance(classes, str) or not isinstance(classes, (list, tuple))
                                or not all(isinstance(c, str) and c for c in classes)):
        raise ConfigError(key, f"{where}: classes must be a list of workflow class names")
    timeout = item.get("timeout", 10.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 60:
        raise ConfigError(key, f"{where}: timeout must be seconds between 0 and 60, got {timeout!r}")
    return Target(name=name, url=url, secret=secret, events=tuple(dict.fromkeys(events)),
                  classes=tuple(classes) if classes is not None else None, format=fmt, timeout=float(timeout))


def _check_secret(key: str, where: str, secret: Any) -> None:
    problem = "secret must be a string of whsec_ and base64 (at least 24 bytes once decoded)"
    if not isinstance(secret, str):
        raise ConfigError(key, f"{where}: {problem}")
    body = secret.removeprefix("whsec_")
    try:
        decoded = base64.b64decode(body + "==", validate=False)
    except (binascii.Error, ValueError):
        raise ConfigError(key, f"{where}: {problem}") from None
    if len(decoded) < 24 or not re.fullmatch(r"[A-Za-z0-9+/=]+", body):
        raise ConfigError(key, f"{where}: {problem}")
