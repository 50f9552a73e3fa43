"""The dashboard's own Babel domain (``pgbus``): the locale and timezone of a request, and its words.

The blueprint never touches Flask-Babel's state: it loads its catalogs with
:class:`babel.support.Translations` and hands its own ``_``/``gettext``/
``ngettext`` to its templates through a blueprint context processor, so the
host app's messages and ours never mix, with or without Flask-Babel.

What is said lives in :mod:`pgbus_flask.present` (every function there takes a
:class:`~pgbus_flask.present.words.Words`); this module picks the request's locale and
timezone and makes its :func:`words`. The functions below say things in them, for the
templates and the pages.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from babel import Locale
from flask import g, has_request_context, request
from markupsafe import Markup

from ..present.words import (
    C_,
    DOMAIN,
    N_,
    Words,
    bdi,
    catalog_dir,
    code,
    identifier,
    isolated,
    markup,
    translations_for,
    words_for,
    zone,
)

__all__ = [
    "C_",
    "DOMAIN",
    "LOCALE_COOKIE",
    "LOCALE_PARAM",
    "N_",
    "Words",
    "absolute",
    "accepted",
    "bdi",
    "catalog_dir",
    "choose_locale",
    "clock",
    "clock_tag",
    "code",
    "counted",
    "current_locale",
    "current_tz",
    "duration",
    "gettext",
    "identifier",
    "isolated",
    "language_tag",
    "listed",
    "locale_name",
    "markup",
    "ngettext",
    "npgettext",
    "number",
    "pgettext",
    "relative",
    "span",
    "span_tag",
    "text_direction",
    "time_tag",
    "translations_for",
    "ugettext",
    "ungettext",
    "words",
    "zone",
]

LOCALE_COOKIE = "pgbus_locale"
LOCALE_PARAM = "locale"


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
    by_tag = {language_tag(loc).lower(): loc for loc in offered}
    for value, quality in request.accept_languages:  # best first
        if quality <= 0:
            continue
        tag = value.replace("_", "-").lower()
        for candidate in (tag, _SCRIPTS.get(tag, ""), tag.split("-")[0]):
            if candidate in by_tag:
                return by_tag[candidate]
    return None


#: Browser tags that name a script by their region or alone: "zh-CN" and "zh" are written in
#: simplified characters (zh-Hans); "zh-TW" and "zh-HK" are not, so they are absent and match nothing
#: we ship ("zh", their language alone, is not an offered tag).
_SCRIPTS = {"zh": "zh-hans", "zh-cn": "zh-hans", "zh-sg": "zh-hans", "zh-my": "zh-hans",
            "zh-hans-cn": "zh-hans", "zh-hans-sg": "zh-hans"}


def current_locale() -> str:
    """The locale of this request (``en`` outside a dashboard request)."""
    if has_request_context():
        return str(g.get("pgbus_locale", "en"))
    return "en"


def current_tz() -> tzinfo:
    if has_request_context() and g.get("pgbus_tz") is not None:
        return g.pgbus_tz  # type: ignore[no-any-return]
    return zone("UTC")


def words() -> Words:
    """The words of this request: its locale and timezone, with the host app's catalogs before ours."""
    overrides = g.get("pgbus_translations", ()) if has_request_context() else ()
    return words_for(current_locale(), current_tz(), tuple(overrides))


def _babel_locale() -> Locale:
    """The viewer's locale as Babel's object, parsed once per locale."""
    return words().babel_locale


def gettext(message: str, /, **variables: Any) -> str:
    """``message`` in the viewer's locale, ``%``-formatted with ``variables`` if given (Markup when one
    of them is)."""
    return words().gettext(message, **variables)


_ = gettext


def ngettext(singular: str, plural: str, num: int, /, **variables: Any) -> str:
    """The plural form for ``num``; ``%(num)s`` is always available."""
    return words().ngettext(singular, plural, num, **variables)


def pgettext(context: str, message: str, /, **variables: Any) -> str:
    """``message`` in its role ``context``."""
    return words().pgettext(context, message, **variables)


def npgettext(context: str, singular: str, plural: str, num: int, /, **variables: Any) -> str:
    """:func:`ngettext` in the role ``context``."""
    return words().npgettext(context, singular, plural, num, **variables)


def ugettext(message: str) -> str:
    """The translation of ``message``, unformatted (for :func:`markup`; an extraction keyword)."""
    return words().ugettext(message)


def ungettext(singular: str, plural: str, num: int) -> str:
    """The plural form for ``num``, unformatted (for :func:`markup`; an extraction keyword)."""
    return words().ungettext(singular, plural, num)


def number(value: int | float) -> str:
    return words().number(value)


def counted(value: int, capped: bool = False) -> str:
    """A count of runs as a page shows it; a capped one (a lower bound: :data:`pgbus_flask.queries.COUNT_CAP`)
    as "1,000+", marked ``data-capped`` and with a title that says counting stopped there."""
    shown = number(value)
    if not capped:
        return shown
    from ..queries import COUNT_CAP

    title = gettext("At least %(num)s: the dashboard stops counting a group's overdue runs at %(cap)s",
                    num=shown, cap=number(COUNT_CAP))
    return Markup('<span class="capped" data-capped="1" title="{}">{}</span>').format(
        title, gettext("%(num)s+", num=shown))


def absolute(moment: datetime) -> str:
    """``moment`` as a medium date and time in the viewer's locale and the configured timezone."""
    return words().absolute(moment)


def relative(moment: datetime, now: datetime) -> str:
    """"3 minutes ago" / "in 5 minutes" in the viewer's locale."""
    return words().relative(moment, now)


def time_tag(moment: datetime | None, now: datetime) -> Markup:
    """``<time datetime=ISO title=absolute>3 minutes ago</time>``; "—" for no time."""
    return words().time_tag(moment, now)


def clock(moment: datetime, now: datetime) -> str:
    """A clock time in the viewer's timezone: "14:02" today, "4 Dec 2026, 14:02" on another day."""
    return words().clock(moment, now)


def clock_tag(moment: datetime | None, now: datetime) -> Markup:
    """``<time datetime=ISO title="in 5 minutes">14:02</time>``: a clock time, the relative time as tooltip."""
    return words().clock_tag(moment, now)


def span(since: datetime, now: datetime) -> str:
    """How long from ``since`` to ``now``: "3 hours", "2 days" (no direction)."""
    return words().span(since, now)


def span_tag(since: datetime | None, now: datetime) -> Markup:
    """``<time datetime=ISO title=absolute>3 hours</time>``: how long something has lasted."""
    return words().span_tag(since, now)


def listed(items: list[str]) -> str:
    """``items`` joined as the viewer's locale joins a list ("a, b and c")."""
    return words().listed(items)


def duration(seconds: float) -> str:
    """A duration such as "3 seconds" or "2 hours" (narrow, localized)."""
    return words().duration(seconds)


#: Names a menu of languages shows where CLDR's own display name is not what speakers look for
#: ("中文 (简体)" is how CLDR names it; Chinese sites' menus say 简体中文).
_OWN_NAMES = {"zh_Hans": "简体中文"}


def locale_name(locale: str) -> str:
    """A locale's own name ("Deutsch", "日本語", "العربية")."""
    return _OWN_NAMES.get(locale) or str(Locale.parse(locale).get_display_name(locale) or locale)


def language_tag(locale: str) -> str:
    """A locale as a BCP 47 tag for ``lang``/``hreflang`` attributes: ``zh_Hans`` is ``zh-Hans``."""
    return locale.replace("_", "-")


def text_direction(locale: str) -> str:
    """``rtl`` for a language written right to left (ar, he), else ``ltr``: CLDR's own character order."""
    return "rtl" if _parsed_locale(locale).text_direction == "rtl" else "ltr"


def _parsed_locale(locale: str) -> Locale:
    return words_for(locale, zone("UTC")).babel_locale
