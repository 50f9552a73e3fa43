"""The words of one viewer: a :class:`Words` holds the catalogs of a locale and a timezone, and says
messages, numbers and moments in them. Every door that speaks a language takes one as an argument
(the dashboard makes it from the request, see :mod:`pgbus_flask.web.i18n`); nothing here reads
``flask.g`` or a request.

The markers :func:`N_` and :func:`C_` mark messages for ``pybabel extract`` (the ``pgbus`` domain);
:func:`markup`, :func:`code`, :func:`bdi` and :func:`isolated` put names into HTML or plain text so that
they cannot break or reorder what is around them.
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
from babel.lists import format_list
from babel.numbers import format_decimal
from babel.support import NullTranslations, Translations
from babel.units import format_unit
from markupsafe import Markup, escape

from ..verbs import C_, N_

DOMAIN = "pgbus"

__all__ = ["C_", "DOMAIN", "N_", "Name", "Words", "bdi", "catalog_dir", "code", "english", "identifier", "isolated",
           "markup", "name_tag", "translations_for", "words_for", "zone"]


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


def zone(name: str) -> tzinfo:
    return timezone.utc if name == "UTC" else ZoneInfo(name)


def _format(text: str, variables: dict[str, Any]) -> str:
    if any(isinstance(value, Markup) for value in variables.values()):
        return markup(text, **variables)
    return text % variables


def markup(translated: str, /, **variables: Any) -> Markup:
    """Fill a translated message with HTML fragments: the message is escaped, then every
    variable is escaped unless it is already :class:`Markup` (links, ``<code>``, ``<time>``).

    ``markup(words.ugettext("Waiting at %(step)s."), step=code(name))``
    """
    return escape(translated) % variables


def code(value: Any) -> Markup:
    """``value`` as escaped ``<code>`` (isolated: the stylesheet gives it ``unicode-bidi: isolate``)."""
    text = Markup(_balanced(value)) if isinstance(value, Markup) else _balanced(str(value))
    return Markup('<code class="pgbus-code" dir="ltr">%s</code>') % text


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


class Name(str):
    """A name from code (a workflow class, a step, an error class, a run id): written left to right
    wherever it stands, so ``חשבונית.Billing`` keeps the order it has in the code inside an Arabic or
    Hebrew sentence. :func:`~pgbus_flask.present.sentences.fill` puts it in ``<bdi dir="ltr">`` (HTML)
    or :func:`identifier` (plain text); text someone typed stays a plain ``str`` (first strong
    character decides)."""

    __slots__ = ()


LRI = "\u2066"


def identifier(value: Any) -> str:
    """A name from code for plain-text places (``<title>``, attributes, SVG text, a confirm dialog):
    wrapped in LRI ... PDI (left to right, isolated) when its order could change, that is when it
    holds a right-to-left or directional character or does not start with a left-to-right letter
    (a run id such as ``070f55b4-…`` starts with digits that an Arabic line would move)."""
    text = str(value)
    if text and unicodedata.bidirectional(text[0]) == "L" and not any(
            unicodedata.bidirectional(ch) in _DIRECTIONAL for ch in text):
        return text
    return LRI + _balanced(text) + PDI


def name_tag(value: Any) -> Markup:
    """A name from code in HTML: escaped ``<bdi dir="ltr">`` (see :class:`Name`)."""
    return Markup('<bdi dir="ltr">%s</bdi>') % _balanced(str(value))


@cache
def _parsed(locale: str) -> Locale:
    return Locale.parse(locale)


@cache
def _medium_pattern(locale: str) -> str:
    """The locale's medium date-and-time pattern as one CLDR pattern (what ``format_datetime(...,
    "medium")`` assembles at every call from three: a run page formats some two hundred times)."""
    parsed = _parsed(locale)
    glue = str(get_datetime_format("medium", locale=parsed))
    return (glue.replace("{0}", get_time_format("medium", locale=parsed).pattern)
            .replace("{1}", get_date_format("medium", locale=parsed).pattern))


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


class Words:
    """Messages, numbers and moments in one ``locale`` (its catalogs, with the host app's ``overrides``
    folders before them) and one timezone ``tz``."""

    def __init__(self, locale: str = "en", tz: tzinfo = timezone.utc, overrides: tuple[str, ...] = ()) -> None:
        self.locale = locale
        self.tz = tz
        self.translations = translations_for(locale, overrides)
        self.babel_locale = _parsed(locale)

    def __repr__(self) -> str:
        return f"Words({self.locale!r}, {self.tz!r})"

    # -- messages ---------------------------------------------------------------------------------

    def gettext(self, message: str, /, **variables: Any) -> str:
        """``message`` in this locale, ``%``-formatted with ``variables`` if given.

        When a variable is :class:`Markup` (``bdi(name)``, ``code(step)``) the result is
        Markup too, every other variable escaped (see :func:`markup`).
        """
        text = self.translations.gettext(message)
        return _format(text, variables) if variables else text

    def ngettext(self, singular: str, plural: str, num: int, /, **variables: Any) -> str:
        """The plural form for ``num``; ``%(num)s`` is always available, written as this locale writes
        numbers ("1,200", "1.200", "1 200"): a count is a number like any other on the page."""
        text = self.translations.ngettext(singular, plural, num)
        return _format(text, {"num": self.number(num), **variables})

    def pgettext(self, context: str, message: str, /, **variables: Any) -> str:
        """``message`` in its role ``context`` (the same English as a button, an audit event, a
        column), translated separately for each role."""
        text = str(self.translations.pgettext(context, message))
        return _format(text, variables) if variables else text

    def npgettext(self, context: str, singular: str, plural: str, num: int, /, **variables: Any) -> str:
        """:meth:`ngettext` in the role ``context``."""
        text = str(self.translations.npgettext(context, singular, plural, num))
        return _format(text, {"num": self.number(num), **variables})

    def ugettext(self, message: str) -> str:
        """The translation of ``message``, unformatted (for :func:`markup`; an extraction keyword)."""
        return self.translations.gettext(message)

    def ungettext(self, singular: str, plural: str, num: int) -> str:
        """The plural form for ``num``, unformatted (for :func:`markup`; an extraction keyword)."""
        return self.translations.ngettext(singular, plural, num)

    def label(self, labels: Any, key: str | None) -> str:
        """The translated label of ``key`` in its role (``labels`` maps keys to ``C_(...)`` pairs; the key
        itself when it has none, "—" for None)."""
        if key is None:
            return "—"
        if key not in labels:
            return key
        context, message = labels[key]
        return self.pgettext(context, message)

    # -- numbers and moments ----------------------------------------------------------------------

    def number(self, value: int | float) -> str:
        return format_decimal(value, locale=self.babel_locale)

    def absolute(self, moment: datetime) -> str:
        """``moment`` as a medium date and time in this locale and timezone."""
        return format_datetime(_aware(moment), _medium_pattern(self.locale), tzinfo=self.tz,
                               locale=self.babel_locale)

    def relative(self, moment: datetime, now: datetime) -> str:
        """"3 minutes ago" / "in 5 minutes"."""
        delta = _aware(moment) - _aware(now)
        if abs(delta) < timedelta(seconds=1):
            return self.gettext("just now")
        return format_timedelta(delta, add_direction=True, locale=self.babel_locale)

    def time_tag(self, moment: datetime | None, now: datetime) -> Markup:
        """``<time datetime=ISO title=absolute>3 minutes ago</time>``; "—" for no time."""
        if moment is None:
            return Markup("—")
        moment = _aware(moment)
        return Markup('<time datetime="%s" title="%s">%s</time>') % (
            moment.astimezone(timezone.utc).isoformat(), self.absolute(moment), self.relative(moment, now)
        )

    def clock(self, moment: datetime, now: datetime) -> str:
        """A clock time in this timezone: "14:02" today, "4 Dec 2026, 14:02" on another day."""
        local, today = _aware(moment).astimezone(self.tz), _aware(now).astimezone(self.tz)
        parsed = self.babel_locale
        if local.date() == today.date():
            return format_datetime(local, get_time_format("short", locale=parsed).pattern, tzinfo=self.tz,
                                   locale=parsed)
        glue = str(get_datetime_format("medium", locale=parsed))
        pattern = (glue.replace("{0}", get_time_format("short", locale=parsed).pattern)
                   .replace("{1}", get_date_format("medium", locale=parsed).pattern))
        return format_datetime(local, pattern, tzinfo=self.tz, locale=parsed)

    def clock_tag(self, moment: datetime | None, now: datetime) -> Markup:
        """``<time datetime=ISO title="in 5 minutes">14:02</time>``: a clock time, the relative time as tooltip."""
        if moment is None:
            return Markup("—")
        moment = _aware(moment)
        return Markup('<time datetime="%s" title="%s">%s</time>') % (
            moment.astimezone(timezone.utc).isoformat(), self.relative(moment, now), self.clock(moment, now))

    def span(self, since: datetime, now: datetime) -> str:
        """How long from ``since`` to ``now``: "3 hours", "2 days" (no direction)."""
        seconds = max((_aware(now) - _aware(since)).total_seconds(), 1)
        return format_timedelta(timedelta(seconds=seconds), locale=self.babel_locale)

    def span_tag(self, since: datetime | None, now: datetime) -> Markup:
        """``<time datetime=ISO title=absolute>3 hours</time>``: how long something has lasted, since when as
        tooltip."""
        if since is None:
            return Markup("—")
        since = _aware(since)
        return Markup('<time datetime="%s" title="%s">%s</time>') % (
            since.astimezone(timezone.utc).isoformat(), self.absolute(since), self.span(since, now))

    def period(self, seconds: float) -> str:
        """A window of time in its largest whole unit, written out: "30 seconds", "2 minutes", "6 hours",
        "1.5 seconds" (a rate's window)."""
        for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
            if seconds >= size and seconds % size == 0:
                return format_unit(int(seconds // size), f"duration-{unit}", length="long", locale=self.babel_locale)
        value: float = int(seconds) if float(seconds).is_integer() else round(seconds, 3)
        return format_unit(value, "duration-second", length="long", locale=self.babel_locale)

    def listed(self, items: list[str]) -> str:
        """``items`` joined as this locale joins a list ("a, b and c", "a، b و c", "a、b和c")."""
        return format_list(items, style="standard", locale=self.babel_locale) if items else ""

    def duration(self, seconds: float) -> str:
        """A duration such as "3 seconds" or "2 hours" (narrow, localized)."""
        if seconds < 1:
            return self.gettext("under a second")
        return format_timedelta(timedelta(seconds=seconds), format="short", locale=self.babel_locale)


@cache
def words_for(locale: str, tz: tzinfo, overrides: tuple[str, ...] = ()) -> Words:
    """The :class:`Words` of a locale, timezone and override folders, made once."""
    return Words(locale, tz, overrides)


def english() -> Words:
    """The shipped English words in UTC: what the JSON API, the CLI and the MCP server say."""
    return words_for("en", timezone.utc)
