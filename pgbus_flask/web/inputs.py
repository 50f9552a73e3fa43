"""Query, form and path values, checked at the edge before any page or API route uses them.

Every value the dashboard takes from a request passes through here. Text holding
characters that PostgreSQL cannot store or that only hide (NUL and the other
control characters, lone surrogates) is refused with 400 naming the parameter;
whole numbers are ASCII digits within bounds (``int()`` alone also takes "²",
"١٢", "+1", "1_000" and surrounding spaces, or fails with a bare ``ValueError``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from flask import request
from markupsafe import Markup
from werkzeug.exceptions import BadRequest

from ..verbs import MOMENT, Verb
from .i18n import code, markup, ugettext

#: The largest value of a PostgreSQL ``bigint`` (run and batch ids, the runs list's cursor).
BIGINT_MAX = 2**63 - 1
#: The largest value of a PostgreSQL ``integer`` (a fan-out child's position).
INT_MAX = 2**31 - 1

# C0 controls but tab, newline and carriage return (a pasted payload keeps those), DEL, C1 controls,
# and surrogates (only lone ones can occur in a Python string).
_REFUSED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_DIGITS = re.compile("[0-9]{1,19}")


class BadParameter(BadRequest):
    """A request value the dashboard refuses (400); ``parameter`` is its name in the query or form."""

    def __init__(self, parameter: str, description: Markup) -> None:
        self.parameter = parameter
        super().__init__(description)


def shown(value: str, limit: int = 60) -> Markup:
    """A value from the request as it may appear in a message: shortened, its hidden characters
    replaced, in an isolating ``<code>``."""
    value = _REFUSED.sub("\ufffd", value)
    return code(value if len(value) <= limit else value[:limit] + "…")


def check(name: str, value: str) -> str:
    """``value`` unchanged, or :class:`BadParameter` if it holds a control character or a lone surrogate."""
    bad = _REFUSED.search(value)
    if bad is not None:
        raise BadParameter(name, markup(
            ugettext("The value of %(name)s contains a control character (such as NUL) or a lone surrogate at "
                     "position %(position)s; the dashboard does not accept those."),
            name=shown(name), position=bad.start() + 1))
    return value


def check_request() -> None:
    """Refuse the request if any query value, form value or path segment holds refused characters."""
    sources: list[Iterable[tuple[str, Any]]] = [request.args.items(multi=True), (request.view_args or {}).items()]
    if request.method == "POST":
        sources.append(request.form.items(multi=True))
    for source in sources:
        for name, value in source:
            if isinstance(value, str):
                check(name, value)


def text(source: Mapping[str, str], name: str) -> str | None:
    """The trimmed value of ``name`` in ``source`` (``request.args`` or ``request.form``); None when empty."""
    value = source.get(name)
    if value is None:
        return None
    return check(name, value).strip() or None


def whole_number(value: str | None, name: str, *, minimum: int = 1, maximum: int = BIGINT_MAX) -> int | None:
    """``value`` as an int within ``[minimum, maximum]`` (None when absent or empty), or
    :class:`BadParameter` naming ``name``."""
    if value is None or value == "":
        return None
    number = int(value) if _DIGITS.fullmatch(value) else None
    if number is None or not minimum <= number <= maximum:
        raise BadParameter(name, markup(
            ugettext("%(name)s must be a whole number from %(minimum)s to %(maximum)s, not %(value)s."),
            name=shown(name), minimum=minimum, maximum=maximum, value=shown(value)))
    return number



def verb_params(verb: Verb, form: Mapping[str, str]) -> tuple[dict[str, Any], str | None]:
    """The parameters of ``verb`` (:mod:`pgbus_flask.verbs`) from a posted form, and the message (a msgid) of a
    required one that is missing (None when none is). A moment that does not parse goes to the verb as its
    text, which the verb refuses naming what it takes."""
    params: dict[str, Any] = {}
    for param in verb.params:
        value = text(form, param.name)
        if param.kind == MOMENT:
            try:
                params[param.name] = datetime.fromisoformat(value or "")
            except ValueError:
                params[param.name] = value or ""
        elif value:
            params[param.name] = value
        elif param.required:
            return params, param.missing
    return params, None
