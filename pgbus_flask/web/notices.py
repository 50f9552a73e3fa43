"""What a form post did, carried across its redirect in the session: never taken from the URL.

A post that changed something stores a small record (the action, the run, the
counts) under one session key; the page it redirects to takes it out once and
words it in the viewer's language. Its own key rather than Flask's flashed
messages: ``get_flashed_messages`` empties every category at once, so the
dashboard would eat the host app's messages (and the host's pages ours).

Without a ``SECRET_KEY`` the host app has no session: the post still happens,
the page after it shows no notice (its audit trail says what was done).
"""

from __future__ import annotations

from typing import Any

from flask import session
from flask.sessions import NullSession

from . import live

SESSION_KEY = "pgbus_notice"


def _usable() -> bool:
    return not isinstance(session._get_current_object(), NullSession)  # type: ignore[attr-defined]


def keep(kind: str, **fields: Any) -> None:
    """Remember what was just done for the next page (a no-op without a session)."""
    if _usable():
        session[SESSION_KEY] = {"kind": kind, **fields}


def take(*kinds: str, **match: Any) -> dict[str, Any] | None:
    """The stored notice if it is one of ``kinds`` and has the ``match`` fields; it is
    removed either way, so a notice never outlives the next page that could show one.

    A live refresh takes nothing: its page already showed its notice, and the notice
    now in the session may be another tab's, on its way to the page after its post."""
    if live.requested() or not _usable() or SESSION_KEY not in session:
        return None
    notice = session.pop(SESSION_KEY)
    if not isinstance(notice, dict) or notice.get("kind") not in kinds:
        return None
    if any(notice.get(key) != value for key, value in match.items()):
        return None
    return notice
