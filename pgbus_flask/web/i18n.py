"""The dashboard's own Babel domain (``pgbus``): catalogs, locale choice, times.

The blueprint never touches Flask-Babel's state: it loads its catalogs with
:class:`babel.support.Translations` and hands its own ``_``/``gettext``/
``ngettext`` to its templates through a blueprint context processor, so the
host app's messages and ours never mix, with or without Flask-Babel.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime, timedelta, timezone, tzinfo
from functools import cache
from importlib.resources import files
from typing import Any
from zoneinfo import ZoneInfo

from babel import Locale
from babel.dates import format_datetime, format_timedelta, get_date_format, get_datetime_format, get_time_format
from babel.numbers import format_decimal
from babel.support import NullTranslations, Translations
from flask import g, has_request_context, request
from markupsafe import Markup, escape

DOMAIN = "pgbus"
LOCALE_COOKIE = "pgbus_locale"
LOCALE_PARAM = "locale"


def N_(message: str) -> str:
    """Mark ``message`` for extraction without translating it (Babel's default ``N_`` keyword)."""
    return message


def catalog_dir() -> str:
    """The folder holding ``<locale>/LC_MESSAGES/pgbus.mo`` (works for editable and wheel installs)."""
    return str(files("pgbus_flask.translations"))


@cache
def translations_for(locale: str, overrides: tuple[str, ...] = ()) -> NullTranslations:
    """The compiled catalog of ``locale`` (an empty one when it is missing), behind the host app's
    own ``<folder>/<locale>/LC_MESSAGES/pgbus.mo`` of each ``overrides`` folder (``PGBUS_TRANSLATIONS``):
    a message the app translates there wins, every other comes from the shipped catalog."""
    shipped = Translations.load(catalog_dir(), [locale], domain=DOMAIN)
    if not overrides:
        return shipped
    chain: NullTranslations | None = None
    for folder in overrides:
        found = Translations.load(folder, [locale], domain=DOMAIN)
        if isinstance(found, Translations):
            if chain is None:
                chain = found
            else:
                chain.add_fallback(found)
    if chain is None:
        return shipped
    chain.add_fallback(shipped)
    return chain


def _translations() -> NullTranslations:
    """The catalogs of this request's locale, with the host app's overrides."""
    overrides = g.get("pgbus_translations", ()) if has_request_context() else ()
    return translations_for(current_locale(), overrides)


def choose_locale(offered: tuple[str, ...], default: str) -> str:
    """``?locale=``, then the cookie, then Accept-Language, among ``offered``; else ``default``."""
    asked = request.args.get(LOCALE_PARAM)
    if asked in offered:
        return asked  # type: ignore[return-value]
    cookie = request.cookies.get(LOCALE_COOKIE)
    if cookie in offered:
        return cookie  # type: ignore[return-value]
    return accepted(offered) or default


def accepted(offered: tuple[str, ...]) -> str | None:
    """The offered locale the browser's Accept-Language prefers, a region falling back on its
    language: "sv-SE,en;q=0.5" picks ``sv``, "pt-BR" picks ``pt``; None when nothing matches."""
    for value, quality in request.accept_languages:  # best first
        if quality <= 0:
            continue
        tag = value.replace("_", "-").lower()
        for candidate in (tag, tag.split("-")[0]):
            if candidate in offered:
                return candidate
    return None


def current_locale() -> str:
    """The locale of this request (``en`` outside a dashboard request)."""
    if has_request_context():
        return str(g.get("pgbus_locale", "en"))
    return "en"


def current_tz() -> tzinfo:
    if has_request_context() and g.get("pgbus_tz") is not None:
        return g.pgbus_tz  # type: ignore[no-any-return]
    return timezone.utc


def zone(name: str) -> tzinfo:
    return timezone.utc if name == "UTC" else ZoneInfo(name)


def gettext(message: str, /, **variables: Any) -> str:
    """``message`` in the viewer's locale, ``%``-formatted with ``variables`` if given.

    When a variable is :class:`Markup` (``bdi(name)``, ``code(step)``) the result is
    Markup too, every other variable escaped (see :func:`markup`).
    """
    text = _translations().gettext(message)
    return _format(text, variables) if variables else text


def _format(text: str, variables: dict[str, Any]) -> str:
    if any(isinstance(value, Markup) for value in variables.values()):
        return markup(text, **variables)
    return text % variables


_ = gettext


def ngettext(singular: str, plural: str, num: int, /, **variables: Any) -> str:
    """The plural form for ``num``; ``%(num)d`` is always available."""
    text = _translations().ngettext(singular, plural, num)
    return _format(text, {"num": num, **variables})


def pgettext(context: str, message: str, /, **variables: Any) -> str:
    """``message`` in its role ``context`` (the same English as a button, an audit event, a
    column), translated separately for each role."""
    text = str(_translations().pgettext(context, message))
    return _format(text, variables) if variables else text


def npgettext(context: str, singular: str, plural: str, num: int, /, **variables: Any) -> str:
    """:func:`ngettext` in the role ``context``."""
    text = str(_translations().npgettext(context, singular, plural, num))
    return _format(text, {"num": num, **variables})


def C_(context: str, message: str) -> tuple[str, str]:
    """Mark ``message`` in the role ``context`` for extraction (keyword ``C_:1c,2``); look it up
    with :func:`pgettext` (``label()`` does)."""
    return context, message


def ugettext(message: str) -> str:
    """The translation of ``message``, unformatted (for :func:`markup`; an extraction keyword)."""
    return _translations().gettext(message)


def ungettext(singular: str, plural: str, num: int) -> str:
    """The plural form for ``num``, unformatted (for :func:`markup`; an extraction keyword)."""
    return _translations().ngettext(singular, plural, num)


def markup(translated: str, /, **variables: Any) -> Markup:
    """Fill a translated message with HTML fragments: the message is escaped, then every
    variable is escaped unless it is already :class:`Markup` (links, ``<code>``, ``<time>``).

    ``markup(ugettext("Waiting at %(step)s."), step=code(name))``
    """
    return escape(translated) % variables


def code(value: Any) -> Markup:
    """``value`` as escaped ``<code>`` (isolated: the stylesheet gives it ``unicode-bidi: isolate``)."""
    text = Markup(_balanced(value)) if isinstance(value, Markup) else _balanced(str(value))
    return Markup('<code class="pgbus-code">%s</code>') % text


# Bidi isolates: FSI opens one, PDI closes it (or whichever opened last).
_OPENERS = "\u2066\u2067\u2068"
FSI, PDI = "\u2068", "\u2069"


def _balanced(value: str) -> str:
    """``value`` with every isolate it opens closed, and without a PDI that would close ours."""
    if PDI not in value and not any(ch in value for ch in _OPENERS):
        return value
    depth, out = 0, []
    for ch in value:
        if ch in _OPENERS:
            depth += 1
        elif ch == PDI:
            if depth == 0:
                continue
            depth -= 1
        out.append(ch)
    return "".join(out) + PDI * depth


def bdi(value: Any) -> Markup:
    """``value`` (text someone typed or a program produced) as escaped ``<bdi>``: right-to-left
    text or override characters in it cannot reorder what is around it."""
    if isinstance(value, Markup):
        return Markup("<bdi>%s</bdi>") % Markup(_balanced(value))
    return Markup("<bdi>%s</bdi>") % _balanced(str(value))


_DIRECTIONAL = frozenset({"R", "AL", "AN", "LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})


def isolated(value: Any) -> str:
    """``value`` for plain-text places (attributes, ``<title>``, SVG text, a confirm dialog):
    wrapped in FSI ... PDI when it holds anything that could reorder the text around it."""
    text = str(value)
    if not any(unicodedata.bidirectional(ch) in _DIRECTIONAL for ch in text):
        return text
    return FSI + _balanced(text) + PDI


@cache
def _parsed(locale: str) -> Locale:
    return Locale.parse(locale)


def _babel_locale() -> Locale:
    """The viewer's locale as Babel's object, parsed once per locale (a run page formats hundreds of times)."""
    return _parsed(current_locale())


def number(value: int | float) -> str:
    return format_decimal(value, locale=_babel_locale())


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


@cache
def _medium_pattern(locale: str) -> str:
    """The locale's medium date-and-time pattern as one CLDR pattern (what ``format_datetime(...,
    "medium")`` assembles at every call from three: a run page formats some two hundred times)."""
    parsed = _parsed(locale)
    glue = str(get_datetime_format("medium", locale=parsed))
    return (glue.replace("{0}", get_time_format("medium", locale=parsed).pattern)
            .replace("{1}", get_date_format("medium", locale=parsed).pattern))


def absolute(moment: datetime) -> str:
    """``moment`` as a medium date and time in the viewer's locale and the configured timezone."""
    return format_datetime(_aware(moment), _medium_pattern(current_locale()), tzinfo=current_tz(),
                           locale=_babel_locale())


def relative(moment: datetime, now: datetime) -> str:
    """"3 minutes ago" / "in 5 minutes" in the viewer's locale."""
    delta = _aware(moment) - _aware(now)
    if abs(delta) < timedelta(seconds=1):
        return gettext("just now")
    return format_timedelta(delta, add_direction=True, locale=_babel_locale())


def time_tag(moment: datetime | None, now: datetime) -> Markup:
    """``<time datetime=ISO title=absolute>3 minutes ago</time>``; "—" for no time."""
    if moment is None:
        return Markup("—")
    moment = _aware(moment)
    return Markup('<time datetime="%s" title="%s">%s</time>') % (
        moment.astimezone(timezone.utc).isoformat(), absolute(moment), relative(moment, now)
    )


def clock(moment: datetime, now: datetime) -> str:
    """A clock time in the viewer's timezone: "14:02" today, "4 Dec 2026, 14:02" on another day."""
    local, today = _aware(moment).astimezone(current_tz()), _aware(now).astimezone(current_tz())
    parsed = _babel_locale()
    if local.date() == today.date():
        return format_datetime(local, get_time_format("short", locale=parsed).pattern, tzinfo=current_tz(),
                               locale=parsed)
    glue = str(get_datetime_format("medium", locale=parsed))
    pattern = (glue.replace("{0}", get_time_format("short", locale=parsed).pattern)
               .replace("{1}", get_date_format("medium", locale=parsed).pattern))
    return format_datetime(local, pattern, tzinfo=current_tz(), locale=parsed)


def clock_tag(moment: datetime | None, now: datetime) -> Markup:
    """``<time datetime=ISO title="in 5 minutes">14:02</time>``: a clock time, the relative time as tooltip."""
    if moment is None:
        return Markup("—")
    moment = _aware(moment)
    return Markup('<time datetime="%s" title="%s">%s</time>') % (
        moment.astimezone(timezone.utc).isoformat(), relative(moment, now), clock(moment, now))


def span(since: datetime, now: datetime) -> str:
    """How long from ``since`` to ``now``: "3 hours", "2 days" (no direction)."""
    seconds = max((_aware(now) - _aware(since)).total_seconds(), 1)
    return format_timedelta(timedelta(seconds=seconds), locale=_babel_locale())


def span_tag(since: datetime | None, now: datetime) -> Markup:
    """``<time datetime=ISO title=absolute>3 hours</time>``: how long something has lasted, since when as tooltip."""
    if since is None:
        return Markup("—")
    since = _aware(since)
    return Markup('<time datetime="%s" title="%s">%s</time>') % (
        since.astimezone(timezone.utc).isoformat(), absolute(since), span(since, now))


def duration(seconds: float) -> str:
    """A duration such as "3 seconds" or "2 hours" (narrow, localized)."""
    if seconds < 1:
        return gettext("under a second")
    return format_timedelta(timedelta(seconds=seconds), format="short", locale=_babel_locale())


def locale_name(locale: str) -> str:
    """A locale's own name ("Deutsch", "日本語")."""
    return str(Locale.parse(locale).get_display_name(locale) or locale)
