"""What can be stored, and how: arguments, outputs and signal payloads are JSON plus
datetime, date, Decimal and UUID (which round-trip through a tagged object), and
any Python string, which PostgreSQL cannot always hold as it is.

PostgreSQL text and ``jsonb`` refuse the NUL character and cannot encode lone
surrogates (``"\\udcff"``, what ``surrogateescape`` decoding leaves behind). So:

* In JSON values a string holding either is stored as ``{"__pgbus__": "text",
  "v": ...}`` where ``v`` has every backslash doubled and each such character
  written as ``\\u0000`` / ``\\udcff``; a dict with such a key becomes
  ``{"__pgbus__": "dict", "v": [[key, value], ...]}``. Both read back exactly.
* In text a step produced (error messages, backtraces, pause reasons) the same
  characters are written as ``\\u0000`` / ``\\udcff`` (:func:`storable_text`): what
  an operator reads, with nothing lost but the difference between a real NUL
  and the six characters ``\\u0000``.
* Text from outside that names or explains something (subject, keys, signal
  names, actor, reason) is refused with :class:`InvalidInput` instead
  (:func:`check_text`): nothing is written.
"""

from __future__ import annotations

import json
import math
import re
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from .errors import ArgumentsNotSerializable, InvalidInput

TAG = "__pgbus__"
#: Nesting deeper than this is refused (PostgreSQL's parser and Python's recursion have limits).
MAX_DEPTH = 100
#: Integers longer than this many decimal digits are refused (Python will not print longer ones).
MAX_INT_DIGITS = 4_000

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_UNSTORABLE_OR_BACKSLASH = re.compile("[\\\\\x00\ud800-\udfff]")
_ESCAPED = re.compile(r"\\(\\|u[0-9a-f]{4})")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return "\\\\" if char == "\\" else f"\\u{ord(char):04x}"


def _unescape_char(match: re.Match[str]) -> str:
    body = match.group(1)
    return "\\" if body == "\\" else chr(int(body[1:], 16))


def needs_escape(text: str) -> bool:
    """Whether PostgreSQL cannot hold ``text`` as it is (a NUL or a lone surrogate)."""
    return _UNSTORABLE.search(text) is not None


def storable_text(text: str) -> str:
    """``text`` with NUL and lone surrogates written as ``\\u0000`` / ``\\udcff`` (for text columns)."""
    return _UNSTORABLE.sub(_escape_char, text) if needs_escape(text) else text


def safe_str(value: Any) -> str:
    """``str(value)``, even for an object whose ``__str__`` raises, as storable text."""
    try:
        text = str(value)
    except Exception:  # an exception or object that cannot describe itself
        try:
            text = f"<unprintable {type(value).__name__}>"
        except Exception:
            text = "<unprintable>"
    return storable_text(text)


def check_text(value: Any, field: str, *, max_bytes: int | None = None, required: bool = True,
               allow_newlines: bool = True) -> str | None:
    """``value`` if it is a string PostgreSQL can store within ``max_bytes`` (UTF-8), else
    :class:`InvalidInput` naming ``field``. ``None`` passes when not ``required``."""
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a string, got {type(value).__name__}")
    if required and not value.strip():
        raise InvalidInput(field, "must not be empty")
    bad = _UNSTORABLE.search(value)
    if bad is not None:
        what = "a NUL character" if bad.group() == "\x00" else f"a lone surrogate (\\u{ord(bad.group()):04x})"
        raise InvalidInput(field, f"contains {what} at position {bad.start()}, which cannot be stored")
    if not allow_newlines and ("\n" in value or "\r" in value):
        raise InvalidInput(field, "must be one line")
    if max_bytes is not None:
        size = len(value.encode("utf-8"))
        if size > max_bytes:
            raise InvalidInput(field, f"is {size:,} bytes long; at most {max_bytes:,} bytes (UTF-8) are allowed")
    return value


def to_json(value: Any, *, what: str = "value") -> Any:
    """``value`` as plain JSON data PostgreSQL can store, or :class:`ArgumentsNotSerializable`
    naming the bad part."""
    return _encode(value, what, 0)


def from_json(value: Any) -> Any:
    """The inverse of :func:`to_json`."""
    if isinstance(value, list):
        return [from_json(item) for item in value]
    if isinstance(value, dict):
        tag = value.get(TAG)
        if tag is not None and len(value) == 2 and "v" in value:
            raw = value["v"]
            if tag == "text":
                return _ESCAPED.sub(_unescape_char, raw)
            if tag == "dict":
                return {from_json(key): from_json(item) for key, item in raw}
            if tag == "datetime":
                return datetime.fromisoformat(raw)
            if tag == "date":
                return date.fromisoformat(raw)
            if tag == "decimal":
                return Decimal(raw)
            if tag == "uuid":
                return UUID(raw)
        return {key: from_json(item) for key, item in value.items()}
    return value


def dumps(value: Any, *, what: str = "value") -> str:
    return json.dumps(to_json(value, what=what), separators=(",", ":"))


def _text(value: str) -> Any:
    if not needs_escape(value):
        return value
    return {TAG: "text", "v": _UNSTORABLE_OR_BACKSLASH.sub(_escape_char, value)}


def _encode(value: Any, path: str, depth: int) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_DIGITS * 3.33:
            raise ArgumentsNotSerializable(f"{path} is an integer of more than {MAX_INT_DIGITS:,} digits")
        return int(value)  # an int subclass (an IntEnum) is stored as its value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ArgumentsNotSerializable(f"{path} is {value!r}, which JSON cannot hold")
        return float(value)
    if isinstance(value, datetime):
        return {TAG: "datetime", "v": value.isoformat()}
    if isinstance(value, date):
        return {TAG: "date", "v": value.isoformat()}
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ArgumentsNotSerializable(f"{path} is {value!r}, which cannot be stored")
        return {TAG: "decimal", "v": str(value)}
    if isinstance(value, UUID):
        return {TAG: "uuid", "v": str(value)}
    if isinstance(value, (list, tuple, dict)) and depth >= MAX_DEPTH:
        raise ArgumentsNotSerializable(f"{path} is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, (list, tuple)):
        return [_encode(item, f"{path}[{index}]", depth + 1) for index, item in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        escaped_keys = False
        for key, item in value.items():
            if not isinstance(key, str):
                raise ArgumentsNotSerializable(f"{path} has a non-string key {key!r:.80}")
            if key == TAG:
                raise ArgumentsNotSerializable(f"{path} uses the reserved key {TAG!r}")
            escaped_keys = escaped_keys or needs_escape(key)
            out[key] = _encode(item, f"{path}[{storable_text(repr(key))}]", depth + 1)
        if escaped_keys:
            return {TAG: "dict", "v": [[_text(key), item] for key, item in out.items()]}
        return out
    raise ArgumentsNotSerializable(
        f"{path} is a {type(value).__name__} ({safe_str(_short_repr(value))}); only JSON values, datetime, date, "
        "Decimal and UUID can be stored"
    )


def _short_repr(value: Any) -> str:
    try:
        return f"{value!r:.80}"
    except Exception:
        return "unprintable"


def strip_controls(text: str) -> str:
    """``text`` without control characters other than tab and newline (for one-line displays)."""
    return _CONTROL.sub("", text)
