"""The engine's own messages (:mod:`pgbus_flask.messages`) in the viewer's language: the sentences of
:mod:`pgbus_flask.present.sentences`, said in this request's words."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..present import sentences
from ..present.sentences import SYSTEM_MESSAGES
from .i18n import words

__all__ = ["SYSTEM_MESSAGES", "system_message"]


def system_message(code_: str | None, params: Mapping[str, Any] | None, english: str | None,
                   now: datetime, *, html: bool = True) -> str:
    """The message of ``code_`` in the viewer's language (Markup when ``html``), else ``english``
    (escaped by the template, isolated in plain text)."""
    return sentences.system_message(words(), code_, params, english, now, html=html)
