"""Log lines never show a password: a filter on pgbus's loggers redacts every URL and
``password=`` in the message, its arguments and the traceback (config.redact)."""

from __future__ import annotations

import logging

from .config import redact

#: The loggers pgbus writes to (a logger's filters do not reach its children).
LOGGERS = ("pgbus_flask", "pgbus_flask.web")


class RedactPasswords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it to logging's own error report
            return True
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def install() -> None:
    """Put the filter on pgbus's loggers once."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactPasswords) for f in logger.filters):
            logger.addFilter(RedactPasswords())
