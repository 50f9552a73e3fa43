"""A pseudo-locale for the tests: every message the code holds NOW, accented, 40% longer and between markers.

:func:`extract` runs ``pybabel extract`` on the code and templates as they are (as
``tests/unit/test_catalogs.py`` does), so a message added to the code but not yet to
``translations/pgbus.pot`` is covered too; :func:`install` writes the transformed catalog as
``<folder>/en/LC_MESSAGES/pgbus.mo``, a ``PGBUS_TRANSLATIONS`` override folder for the ``en`` locale
(no shipped locale is added). A page rendered with it shows every message as ``⟦Ŕûñšéö⟧``: what is
left in plain ASCII letters, or outside the markers, did not come from the catalog. A string that is
not marked for extraction is exactly what stays English.

:func:`english_on` is the checker: it walks a page's visible text (and the attributes a person reads:
``title``, ``aria-label``, ``placeholder``, ``alt``, the ``data-confirm`` question of a form) and names
every piece that is neither a pseudo message nor data. What counts as data is listed in :data:`DATA_TAGS`,
:data:`DATA_CONTEXTS`, :data:`BRANDS`, :func:`mark_cldr` (Babel's output, marked where it is made) and
:func:`data_values` (what the database holds that a person or the app's own code wrote).
"""

from __future__ import annotations

import math
import re
import tempfile
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import psycopg
from babel.messages.catalog import Catalog
from babel.messages.frontend import CommandLineInterface
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

from tests.support import ROOT

OPEN, CLOSE = "⟦", "⟧"
#: Babel's own output (dates, durations, units, numbers, percentages) while :func:`mark_cldr` is on.
CLDR_OPEN, CLDR_CLOSE = "⸨", "⸩"
LOCALE = "en"
#: How much longer a pseudo message is than its English (besides its two markers).
GROWTH = 0.4

_LETTERS = dict(zip(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "áƀçðéƒĝĥíĵķļɱñöþǫŕšţûṽŵẋýžÁƁÇÐÉƑĜĤÍĴĶĻṀÑÖÞǪŔŠŢÛṼŴẊÝŽ", strict=True))
_ACCENT = str.maketrans(_LETTERS)
#: A placeholder (``%(name)s``, ``%(num)d``, ``%s``) or an escaped percent sign: kept as it is.
PLACEHOLDER = re.compile(r"%\([^)]*\)[-#0 +]*\d*(?:\.\d+)?[sdifr]|%[sdifr%]")
_WORD = re.compile(r"[A-Za-z]+")
_FILLER = "éöáíû"


# -- the catalog ----------------------------------------------------------------------------------


def extract(out_dir: str | Path | None = None) -> Catalog:
    """What ``pybabel extract -F babel.cfg`` finds in the code and templates now (the keywords of
    docs/i18n.md: ``C_`` with a context, ``NP_`` singular and plural pairs)."""
    folder = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="pgbus-pot-"))
    out = folder / "pgbus.pot"
    CommandLineInterface().run(["pybabel", "-q", "extract", "-F", str(Path(ROOT) / "babel.cfg"),
                                "-k", "C_:1c,2", "-k", "NP_:1,2",
                                "-o", str(out), "--no-wrap", str(ROOT)])
    with out.open("rb") as fh:
        catalog = read_po(fh)
    assert len([m for m in catalog if m.id]) > 100, "extraction found the dashboard's messages"
    return catalog


def pseudo(text: str) -> str:
    """``text`` accented letter by letter, about 40% longer, between ⟦ and ⟧; placeholders kept.

    The growth is spread over the words (each gets accented vowels appended in proportion to its
    length, as a longer language's words are longer), so lines still break where the English breaks.
    """
    pieces = PLACEHOLDER.split(text)
    holders = PLACEHOLDER.findall(text)
    visible = sum(len(p) for p in pieces)
    letters = sum(len(w) for p in pieces for w in _WORD.findall(p))
    extra = math.ceil(visible * GROWTH)
    share = extra / letters if letters else 0.0
    owed = 0.0

    def longer(match: re.Match[str]) -> str:
        nonlocal owed, extra
        word = match.group()
        owed += len(word) * share
        add = min(int(owed), extra)
        owed -= add
        extra -= add
        return word.translate(_ACCENT) + "".join(_FILLER[i % len(_FILLER)] for i in range(add))

    out = []
    for index, piece in enumerate(pieces):
        out.append(_WORD.sub(longer, piece))
        if index < len(holders):
            out.append(holders[index])
    return OPEN + "".join(out) + "·" * extra + CLOSE


def pseudo_catalog(extracted: Catalog, without: Iterable[Any] = ()) -> Catalog:
    """The pseudo catalog of ``extracted`` (every plural form, every context), leaving out the
    messages whose id (a string, or the singular of a plural message) is in ``without``."""
    left_out = set(without)
    catalog = Catalog(locale=LOCALE, domain="pgbus", project="pgbus-flask pseudo-locale")
    for message in extracted:
        if not message.id:
            continue
        ids = message.id if isinstance(message.id, (list, tuple)) else (message.id,)
        if ids[0] in left_out:
            continue
        if message.pluralizable:
            strings: Any = tuple(pseudo(ids[min(i, len(ids) - 1)]) for i in range(catalog.num_plurals))
        else:
            strings = pseudo(ids[0])
        catalog.add(message.id, strings, context=message.context)
    return catalog


def install(folder: str | Path, catalog: Catalog) -> str:
    """Compile ``catalog`` to ``<folder>/en/LC_MESSAGES/pgbus.mo``; the folder (for ``PGBUS_TRANSLATIONS``)."""
    target = Path(folder) / LOCALE / "LC_MESSAGES"
    target.mkdir(parents=True, exist_ok=True)
    with (target / "pgbus.mo").open("wb") as fh:
        write_mo(fh, catalog)
    return str(folder)


# -- Babel's output, marked where it is made ------------------------------------------------------

#: The Babel functions the app says dates, durations, units, numbers and percentages with, where it
#: imported them (module, name). Their output is CLDR's, which no catalog of ours can hold.
CLDR_FUNCTIONS = [
    ("pgbus_flask.present.words", "format_datetime"), ("pgbus_flask.present.words", "format_timedelta"),
    ("pgbus_flask.present.words", "format_decimal"), ("pgbus_flask.present.words", "format_unit"),
    ("pgbus_flask.web.insights", "format_percent"), ("pgbus_flask.web.insights", "format_unit"),
    ("pgbus_flask.web.live", "format_timedelta"),
    ("babel.dates", "format_timedelta"),  # pgbus_flask.web.insights._span_words imports it when called
]


def mark_cldr(monkeypatch: Any) -> None:
    """Wrap what Babel's formatting functions return in ⸨ ⸩, so the checker can tell CLDR's words
    ("3 minutes ago", "Dec 5, 2026", "12.3%", "2 min") from English that missed the catalog."""
    import importlib

    for module_name, name in CLDR_FUNCTIONS:
        module = importlib.import_module(module_name)
        original = getattr(module, name)

        def marked(*args: Any, __original: Any = original, **kwargs: Any) -> str:
            return f"{CLDR_OPEN}{__original(*args, **kwargs)}{CLDR_CLOSE}"

        monkeypatch.setattr(module, name, marked)


# -- data: what may show as it is -----------------------------------------------------------------

#: Elements whose text is data, never a message: identifiers and JSON (``code``, ``pre``, ``kbd``,
#: ``samp``), a stored payload being edited (``textarea``), a moment (``time``: CLDR's words, its
#: title too), and what a browser does not show as text (``script``, ``style``).
DATA_TAGS = frozenset({"code", "pre", "kbd", "samp", "textarea", "time", "script", "style"})

#: Other places that hold data, as (tag, attribute, value-or-None) the element or one of its
#: ancestors has, and why each is safe.
DATA_CONTEXTS: list[tuple[str, str, str | None, str]] = [
    ("text", "class", "tl-tick", "the timeline's axis: clock times written by strftime('%H:%M:%S')"),
    ("text", "class", "tl-label", "the timeline's row names: a step name and its attempt number"),
    ("g", "class", "tl-row", "a timeline row's <title>: its step name and attempt number (segments are checked)"),
    ("select", "name", "step", "the step menu of resume-at/skip: the class's step names"),
    ("select", "name", "workflow_class", "the runs filter's class menu: the workflow class names"),
    ("span", "class", "actor", "the signed-in operator's name, from PGBUS_DASHBOARD_AUTH"),
    ("a", "class", "brand", "the product's name, pgbus"),
    ("a", "hreflang", None, "the language menu's entries: each language's own name (CLDR's autonym)"),
    ("span", "lang", None, "the language menu's button: the current language's own name (CLDR's autonym)"),
]

#: Brand and format names, the same in every language: the product, and the two webhook formats
#: the Notifications page names (Slack's, and the Standard Webhooks specification).
BRANDS = ("Standard Webhooks", "Slack", "pgbus")

#: The attributes a person reads (a tooltip, a screen reader's label, a field's hint, a confirm dialog).
READ_ATTRIBUTES = ("title", "aria-label", "placeholder", "alt", "data-confirm", "aria-valuetext")

_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
                   "wbr"})

#: Text the database holds that a person or the app's own code wrote (names, ids, subjects, actors,
#: reasons, keys, queue and function names, the app's own error messages). Left out: the engine's
#: messages, stored with a code and said through the catalogs, and the reasons the engine ("system")
#: wrote that are not an error of the app's step code.
DATA_SQL = """
SELECT workflow_id::text FROM pgbus_workflows
UNION SELECT workflow_class FROM pgbus_workflows UNION SELECT current_step FROM pgbus_workflows
UNION SELECT subject_type FROM pgbus_workflows UNION SELECT subject_id FROM pgbus_workflows
UNION SELECT subject_type || ' ' || subject_id FROM pgbus_workflows
UNION SELECT idempotency_key FROM pgbus_workflows UNION SELECT started_by FROM pgbus_workflows
UNION SELECT parent_step_name FROM pgbus_workflows
UNION SELECT step_name FROM pgbus_workflow_steps UNION SELECT worker FROM pgbus_workflow_steps
UNION SELECT app_revision FROM pgbus_workflow_steps UNION SELECT error_class FROM pgbus_workflow_steps
UNION SELECT error_message FROM pgbus_workflow_steps WHERE error_code IS NULL
UNION SELECT actor FROM pgbus_workflow_events
UNION SELECT reason FROM pgbus_workflow_events WHERE NOT details ? 'message_code'
  AND (actor <> 'system' OR details ? 'error_class')
UNION SELECT step_name FROM pgbus_workflow_events
UNION SELECT name FROM pgbus_workflow_signals UNION SELECT idempotency_key FROM pgbus_workflow_signals
UNION SELECT sent_by FROM pgbus_workflow_signals
UNION SELECT step_name FROM pgbus_batches UNION SELECT func FROM pgbus_batches UNION SELECT queue FROM pgbus_batches
UNION SELECT error_class FROM pgbus_batch_children
UNION SELECT error_message FROM pgbus_batch_children WHERE error_code IS NULL
UNION SELECT workflow_class FROM pgbus_schedules UNION SELECT schedule FROM pgbus_schedules
UNION SELECT timezone FROM pgbus_schedules UNION SELECT paused_by FROM pgbus_schedules
UNION SELECT paused_reason FROM pgbus_schedules
UNION SELECT actor FROM pgbus_schedule_events UNION SELECT reason FROM pgbus_schedule_events
UNION SELECT name FROM pgbus_limits UNION SELECT limit_key FROM pgbus_limit_slots
UNION SELECT target FROM pgbus_deliveries UNION SELECT requested_by FROM pgbus_deliveries
UNION SELECT last_error FROM pgbus_deliveries UNION SELECT response_body FROM pgbus_deliveries
"""


def data_values(database_url: str, *more: str) -> list[str]:
    """The data strings the pages may show as they are (see :data:`DATA_SQL`), longest first."""
    with psycopg.connect(database_url) as conn:
        found = {row[0] for row in conn.execute(DATA_SQL) if row[0]}
    return sorted(found | {m for m in more if m}, key=len, reverse=True)


# -- the checker ----------------------------------------------------------------------------------


@dataclass
class Piece:
    """One text a person reads: where it is (``<tag data-testid=…>`` or ``@title``) and what it says."""

    where: str
    text: str
    data: bool = False  # inside an element whose text is data
    attribute: bool = False


@dataclass
class _Open:
    tag: str
    attrs: dict[str, str]
    data: bool


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[_Open] = []
        self.pieces: list[Piece] = []

    def _is_data(self, tag: str, attrs: dict[str, str]) -> bool:
        if self.stack and self.stack[-1].data:
            return True
        if tag in DATA_TAGS:
            return True
        for ctx_tag, attr, value, _why in DATA_CONTEXTS:
            if tag == ctx_tag and attr in attrs and (value is None or value in attrs[attr].split()):
                return True
        return False

    def _where(self, own: _Open | None = None) -> str:
        """``<tag>``, and the nearest element around it with a ``data-testid`` or an ``id``."""
        chain = ([own] if own else []) + list(reversed(self.stack))
        if not chain:
            return "<?>"
        here = f"<{chain[0].tag}>"
        for el in chain:
            for name in ("data-testid", "id"):
                if name in el.attrs:
                    return f'{here} in <{el.tag} {name}="{el.attrs[name]}">'
        return here

    def _attributes(self, tag: str, attrs: dict[str, str], data: bool) -> None:
        for name in READ_ATTRIBUTES:
            value = attrs.get(name)
            if value and value.strip():
                self.pieces.append(Piece(f"{self._where(_Open(tag, attrs, data))} @{name}", value, data, True))
        if tag == "input" and attrs.get("type") in ("submit", "button", "reset") and attrs.get("value"):
            self.pieces.append(Piece(f"{self._where(_Open(tag, attrs, data))} @value", attrs["value"], data, True))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        data = self._is_data(tag, found)
        self._attributes(tag, found, data)
        if tag not in _VOID:
            self.stack.append(_Open(tag, found, data))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        self._attributes(tag, found, self._is_data(tag, found))

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index].tag == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        if not data.strip():
            return
        data_here = bool(self.stack) and self.stack[-1].data
        self.pieces.append(Piece(self._where(), data, data_here))


def pieces_of(page: str) -> list[Piece]:
    """The texts of ``page`` a person reads, each with where it is."""
    reader = _Reader()
    reader.feed(page)
    reader.close()
    return reader.pieces


_ENGLISH = re.compile(r"[A-Za-z]+")
_CUT_ID = re.compile(r"\b([0-9a-f]{8}-[0-9a-f-]{0,27})…")


def _has_letters(text: str) -> bool:
    return any(unicodedata.category(ch).startswith("L") for ch in text)


class Marks:
    """Which texts are inside a pseudo message. A message's markers may lie in different text nodes (a
    message holding a ``<code>`` step name or a ``<time>``), so the depth runs on from one text of a page
    to the next; an attribute is a text of its own."""

    def __init__(self) -> None:
        self.depth = 0

    def split(self, text: str) -> tuple[str, str]:
        """``text`` as what is outside every ⟦…⟧ and what is inside one (they nest: a message can hold
        another as a placeholder's value)."""
        out, inside = [], []
        for ch in text:
            if ch == OPEN:
                self.depth += 1
                inside.append(" ")
            elif ch == CLOSE and self.depth:
                self.depth -= 1
                inside.append(" ")
            elif self.depth:
                inside.append(ch)
            else:
                out.append(ch)
        return "".join(out), "".join(inside)


def _without_cldr(text: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == CLDR_OPEN:
            depth += 1
        elif ch == CLDR_CLOSE and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out)


_ENGLISH = re.compile(r"[A-Za-z]+")
_CUT_ID = re.compile(r"\b([0-9a-f]{8}-[0-9a-f-]{0,27})…")


def _has_letters(text: str) -> bool:
    return any(unicodedata.category(ch).startswith("L") for ch in text)


def english_in(text: str, data: Iterable[str] = (), marks: Marks | None = None) -> str | None:
    """What of ``text`` is neither a pseudo message nor data (None when nothing is): letters
    outside the markers, or plain ASCII letters anywhere (the pseudo catalog writes none). ``marks``
    carries the depth of the markers from the texts before (a fresh one for a text on its own)."""
    original = text
    text = _without_cldr(text)
    values = data if isinstance(data, (list, tuple)) else list(data)
    # A run id's first characters, cut with "…" (the runs list's second line).
    text = _CUT_ID.sub(lambda m: " " if any(v.startswith(m.group(1)) for v in values) else m.group(), text)
    for value in values:
        if value in text:  # a whole value, not the inside of a longer word
            text = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(value)}(?![A-Za-z0-9_])", " ", text)
    for brand in BRANDS:
        text = text.replace(brand, " ")
    outside, inside = (marks or Marks()).split(text)
    if _has_letters(outside) or _ENGLISH.search(inside):
        return re.sub(r"\s+", " ", original.replace(CLDR_OPEN, "").replace(CLDR_CLOSE, "")).strip()
    return None


@dataclass
class Finding:
    page: str
    where: str
    text: str

    def __str__(self) -> str:
        return f"{self.page}: {self.where}: {self.text!r}"


@dataclass
class Checker:
    """Finds the English on pages rendered with the pseudo catalog; ``data`` are :func:`data_values`."""

    data: list[str] = field(default_factory=list)

    def english_on(self, name: str, page: str) -> list[Finding]:
        """The pieces of ``page`` (called ``name`` in the report) that are English, and a message whose
        closing marker never came (a message cut short on the server)."""
        found = []
        marks = Marks()
        for piece in pieces_of(page):
            if piece.data:
                continue
            left = english_in(piece.text, self.data, None if piece.attribute else marks)
            if left is not None:
                found.append(Finding(name, piece.where, left))
        if marks.depth:
            found.append(Finding(name, "the page", f"{marks.depth} message(s) opened with {OPEN} never closed"))
        return found
