"""What every door says, and how: the presentation layer the dashboard, the JSON API, the CLI and the
MCP server share.

- :mod:`~pgbus_flask.present.text`: plain text for terminals and models (control and bidi characters
  escaped, a refusal cut to one line) and ISO 8601 moments read from input;
- :mod:`~pgbus_flask.present.words`: a viewer's locale and timezone (:class:`Words`), the markers of
  messages, and names put safely into HTML or text;
- :mod:`~pgbus_flask.present.state`: what a run is doing, as a badge and a sentence key (no I/O);
- :mod:`~pgbus_flask.present.sentences`: labels, badges and sentences of runs, steps and verbs;
- :mod:`~pgbus_flask.present.shapes`: the JSON shapes of a run, a page of runs, an attention group,
  the overview, a batch, a schedule and insights.

Functions here take ``now`` and a :class:`Words` as arguments and never read ``flask.g``; nothing here
imports :mod:`pgbus_flask.web`.
"""

from __future__ import annotations

from .text import error_text, moment, terminal_safe
from .words import Words, english

__all__ = ["Words", "english", "error_text", "moment", "terminal_safe"]
