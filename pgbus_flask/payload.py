"""What can be stored as arguments, outputs and signal payloads: JSON plus
datetime, date, Decimal and UUID, which round-trip through a tagged object.
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from .errors import ArgumentsNotSerializable

TAG = "__pgbus__"


def to_json(value: Any, *, what: str = "value") -> Any:
    """``value`` as plain JSON data, or :class:`ArgumentsNotSerializable` naming the bad part."""
    return _encode(value, what)


def from_json(value: Any) -> Any:
    """The inverse of :func:`to_json`."""
    if isinstance(value, list):
        return [from_json(item) for item in value]
    if isinstance(value, dict):
        tag = value.get(TAG)
        if tag is not None and len(value) == 2 and "v" in value:
            raw = value["v"]
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


def _encode(value: Any, path: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ArgumentsNotSerializable(f"{path} is {value!r}, which JSON cannot hold")
        return value
    if isinstance(value, datetime):
        return {TAG: "datetime", "v": value.isoformat()}
    if isinstance(value, date):
        return {TAG: "date", "v": value.isoformat()}
    if isinstance(value, Decimal):
        return {TAG: "decimal", "v": str(value)}
    if isinstance(value, UUID):
        return {TAG: "uuid", "v": str(value)}
    if isinstance(value, (list, tuple)):
        return [_encode(item, f"{path}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ArgumentsNotSerializable(f"{path} has a non-string key {key!r}")
            if key == TAG:
                raise ArgumentsNotSerializable(f"{path} uses the reserved key {TAG!r}")
            out[key] = _encode(item, f"{path}[{key!r}]")
        return out
    raise ArgumentsNotSerializable(
        f"{path} is a {type(value).__name__} ({value!r:.80}); only JSON values, datetime, date, Decimal and UUID "
        "can be stored"
    )
