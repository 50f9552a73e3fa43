"""Plain text every door shares: text made safe for a terminal (and for a model), a refusal cut to one
line, and an ISO 8601 moment read from what someone typed."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from ..errors import InvalidInput

# C0 and C1 controls (escape sequences, cursor moves, 8-bit CSI), DEL, the bidi marks,
# embeddings, overrides and isolates, line/paragraph separators, and lone surrogates
# (which a UTF-8 terminal cannot be sent at all).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: Longer error messages are cut (a 100 kB name must not flood the terminal).
MESSAGE_LIMIT = 500


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def terminal_safe(text: Any) -> str:
    """``text`` with every character that could move the cursor, clear or recolour the screen,
    or reorder the line written as a visible escape (``\\x1b``, ``\\u202e``)."""
    return _UNSAFE.sub(_escape_char, str(text))


def error_text(exc: Exception | str) -> str:
    """The one line a refusal is told in (the CLI prints it, the MCP server answers with it): made
    terminal-safe and cut after :data:`MESSAGE_LIMIT` characters."""
    text = terminal_safe(exc)
    if len(text) > MESSAGE_LIMIT:
        text = f"{text[:MESSAGE_LIMIT]}... ({len(text) - MESSAGE_LIMIT:,} more characters)"
    return text


def _quoted(value: str, limit: int = 60) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit] + "...'"


def moment(value: Any, what: str = "at") -> datetime:
    """An ISO 8601 date and time with a timezone that PostgreSQL can store, from text (a datetime is
    taken as it is); :class:`InvalidInput` naming ``what`` and the value otherwise."""
    if isinstance(value, datetime):
        return value
    example = "such as 2030-01-01T09:00+00:00"
    try:
        at = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise InvalidInput(what, f"{_quoted(value)} is not an ISO 8601 date and time ({example})") from None
    if at.utcoffset() is None:
        raise InvalidInput(what, f"{_quoted(value)} has no timezone ({example})")
    try:
        at.astimezone(timezone.utc)
    except OverflowError:
        raise InvalidInput(what, f"{_quoted(value)} is out of range once converted to UTC") from None
    return at
