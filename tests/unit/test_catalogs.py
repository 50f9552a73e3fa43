"""The shipped catalogs are complete, agree with their compiled .mo files, and keep up with the code."""

from __future__ import annotations

import os
import re
from gettext import c2py
from pathlib import Path
from typing import Any

import pytest
from babel.messages.catalog import Catalog
from babel.messages.frontend import CommandLineInterface
from babel.messages.mofile import read_mo
from babel.messages.plurals import get_plural
from babel.messages.pofile import read_po

from pgbus_flask.config import SHIPPED_LOCALES

ROOT = Path(__file__).resolve().parents[2]
TRANSLATIONS = ROOT / "translations"


def load_po(path: Path) -> Catalog:
    with path.open("rb") as fh:
        return read_po(fh)


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    """What ``pybabel extract -F babel.cfg`` finds in the code and templates now."""
    out = tmp_path_factory.mktemp("pot") / "pgbus.pot"
    CommandLineInterface().run(["pybabel", "-q", "extract", "-F", str(ROOT / "babel.cfg"),
                                "-k", "C_:1c,2", "-k", "NP_:1,2",
                                "-o", str(out), "--no-wrap", str(ROOT)])
    catalog = load_po(out)
    assert len([m for m in catalog if m.id]) > 100, "extraction found the dashboard's messages"
    return catalog


def key(message: Any) -> tuple[str | None, Any]:
    """A message's identity: its context (the same English as a button, an event, a column...) and id."""
    return message.context, message.id if isinstance(message.id, str) else tuple(message.id)


def ids(catalog: Catalog) -> set[Any]:
    return {key(m) for m in catalog if m.id}


@pytest.mark.parametrize("locale", SHIPPED_LOCALES)
def test_every_extracted_message_is_translated(extracted: Catalog, locale: str) -> None:
    catalog = load_po(TRANSLATIONS / locale / "LC_MESSAGES" / "pgbus.po")
    problems = []
    for message in extracted:
        if not message.id:
            continue
        found = catalog.get(message.id, context=message.context)
        if found is None:
            problems.append(f"missing: {message.id!r}")
            continue
        strings = found.string if isinstance(found.string, (list, tuple)) else (found.string,)
        if found.fuzzy:
            problems.append(f"fuzzy: {message.id!r}")
        if not all(strings):
            problems.append(f"empty: {message.id!r}")
        if message.pluralizable and len(strings) != catalog.num_plurals:
            problems.append(f"{len(strings)} plural forms, {locale} needs {catalog.num_plurals}: {message.id!r}")
    assert not problems, f"{locale}: " + "; ".join(problems) + " (run the update command in docs/i18n.md)"


@pytest.mark.parametrize("locale", SHIPPED_LOCALES)
def test_no_stale_messages(extracted: Catalog, locale: str) -> None:
    catalog = load_po(TRANSLATIONS / locale / "LC_MESSAGES" / "pgbus.po")
    assert ids(catalog) - ids(extracted) == set()
    assert not catalog.obsolete


@pytest.mark.parametrize("locale", SHIPPED_LOCALES)
def test_placeholders_match(locale: str) -> None:
    catalog = load_po(TRANSLATIONS / locale / "LC_MESSAGES" / "pgbus.po")
    errors = [(message.id, [str(e) for e in errs]) for message, errs in catalog.check()]
    assert errors == []


@pytest.mark.parametrize("locale", SHIPPED_LOCALES)
def test_po_and_mo_agree(locale: str) -> None:
    folder = TRANSLATIONS / locale / "LC_MESSAGES"
    po = load_po(folder / "pgbus.po")
    with (folder / "pgbus.mo").open("rb") as fh:
        mo = read_mo(fh)
    want = {key(m): m.string for m in po if m.id and not m.fuzzy}
    got = {key(m): m.string for m in mo if m.id}
    changed = sorted(str(k) for k in want.keys() | got.keys()
                     if _strings(want.get(k)) != _strings(got.get(k)))
    assert not changed, f"{locale}: the .mo is out of date for {changed[:5]} (run the compile command)"


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def test_the_template_is_current(extracted: Catalog) -> None:
    assert ids(load_po(TRANSLATIONS / "pgbus.pot")) == ids(extracted), "run the extract command in docs/i18n.md"


def test_each_shipped_locale_has_a_catalog() -> None:
    found = sorted(p.name for p in TRANSLATIONS.iterdir() if (p / "LC_MESSAGES" / "pgbus.po").exists())
    assert found == sorted(SHIPPED_LOCALES)
    assert os.path.exists(TRANSLATIONS / "__init__.py")


#: The plural forms CLDR gives each language, as gettext counts them: a catalog with fewer would
#: say "5 przebieg" in Polish or one Arabic form for 3 and 11 runs alike.
PLURAL_FORMS = {"ar": 6, "he": 3, "pl": 3, "zh_Hans": 1, "ja": 1, "fr": 3, "es": 3, "it": 3, "pt": 3, "de": 2}


@pytest.mark.parametrize(("locale", "forms"), sorted(PLURAL_FORMS.items()))
def test_each_locale_has_its_languages_plural_forms(locale: str, forms: int) -> None:
    catalog = load_po(TRANSLATIONS / locale / "LC_MESSAGES" / "pgbus.po")
    assert catalog.num_plurals == forms
    assert catalog.plural_expr == get_plural(locale).plural_expr, "the header's formula is CLDR's"


def _names(text: str) -> set[str]:
    return set(re.findall(r"%\((\w+)\)s", text))


def _numbers_of_each_form(catalog: Catalog) -> dict[int, set[int]]:
    """Which counts (0 to 10,000, and whole millions) each plural form of the catalog's header serves."""
    plural = c2py(catalog.plural_expr)
    served: dict[int, set[int]] = {}
    for n in [*range(0, 10_001), 1_000_000, 2_000_000]:
        served.setdefault(plural(n), set()).add(n)
    return served


@pytest.mark.parametrize("locale", SHIPPED_LOCALES)
def test_every_plural_form_keeps_the_names_and_the_count(locale: str) -> None:
    """Each form of a plural message is a whole sentence: it names what the English names (the step,
    the class, the error) and says the count, except in a form that serves only 0, 1 or 2 in a
    language that says those as words ("تشغيلان", "שתי הרצות")."""
    catalog = load_po(TRANSLATIONS / locale / "LC_MESSAGES" / "pgbus.po")
    served = _numbers_of_each_form(catalog)
    problems = []
    for message in catalog:
        if not message.id or not message.pluralizable:
            continue
        english = _names(message.id[0]) | _names(message.id[1])
        # The number the form is chosen by: %(num)s, or the count a message names itself (%(count)s).
        counted = "num" if "num" in english else "count" if "count" in english else None
        for index, text in enumerate(message.string):
            names = _names(text)
            if names - english:
                problems.append(f"form {index} adds {sorted(names - english)}: {text!r}")
            needed = english - {counted} if served.get(index, set()) <= {0, 1, 2} else set(english)
            if "num" not in _names(message.id[1]) and counted == "num":
                needed = needed - {"num"}
            if needed - names:
                problems.append(f"form {index} (for {sorted(served.get(index, set()))[:4]}...) lacks "
                                f"{sorted(needed - names)}: {text!r}")
    assert not problems, f"{locale}: " + "; ".join(problems)


STATUS_CONTEXTS = ("run status", "step status", "signal status", "child job status")


def test_each_kind_of_status_has_its_own_context(extracted: Catalog) -> None:
    """One context for every status made gendered languages pick one gender for all of them."""
    contexts = {m.context for m in extracted if m.id}
    assert set(STATUS_CONTEXTS) <= contexts and "status" not in contexts
    from pgbus_flask.present import sentences
    from pgbus_flask.web import timeline

    assert {c for c, _ in sentences.STEP_STATUS_LABELS.values()} == {"step status"}
    assert timeline.SERIES_LABELS["cancelled"] == sentences.STEP_STATUS_LABELS["cancelled"], \
        "the timeline's legend says a step attempt's status in the steps table's words"
