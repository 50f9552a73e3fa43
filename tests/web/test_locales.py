"""Every shipped locale, on every page: no English left where the catalog has a translation, and
the engine's own messages (a stalled attempt, a wait that timed out) said in the viewer's language
with times in the viewer's timezone, while the JSON API keeps the English and the code."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from flask import Flask

from pgbus_flask import PgBus
from pgbus_flask import engine as engine_module
from pgbus_flask.config import SHIPPED_LOCALES, Settings
from pgbus_flask.errors import ConfigError
from pgbus_flask.web import helpers
from tests.support import TRANSLATIONS, settings_for
from tests.support.seeds import in_line, stall_and_time_out
from tests.support.webhooks import with_a_delivery
from tests.support.webtools import CLOCK, csrf, seed_every_state, sql, text_of
from tests.workflows import ThreeSteps

PLACEHOLDER = re.compile(r"%\(\w+\)[sd]|%[sd]")

#: English that may stay English in a translation: names and words every locale borrows.
BORROWED = {"Dashboard", "Workflows", "Batch", "Worker", "Backtrace", "Payload", "Payload (JSON)", "Status",
            "Queue", "Overview", "Runs", "Run", "Workflow class", "Run id", "App revision", "Job", "Signals"}


@cache
def english_fragments(locale: str) -> list[str]:
    """Pieces of English (3 words or more, between placeholders) of every message the locale
    translates differently: none of them may show on its pages."""
    with open(TRANSLATIONS / locale / "LC_MESSAGES" / "pgbus.po", "rb") as fh:
        catalog = read_po(fh)
    fragments = set()
    for message in catalog:
        if not message.id or message.id in BORROWED:
            continue
        ids = message.id if isinstance(message.id, (list, tuple)) else (message.id,)
        strings = message.string if isinstance(message.string, (list, tuple)) else (message.string,)
        for english in ids:
            if english in strings:
                continue
            for piece in PLACEHOLDER.split(english):
                piece = piece.strip(" .,:;?()")
                if len(piece.split()) >= 3 and not any(piece in s for s in strings):
                    fragments.add(piece)
    return sorted(fragments)


def lang(page: str) -> str:
    """The page's locale, from ``<html lang>`` (a BCP 47 tag: ``zh-Hans`` is the locale ``zh_Hans``)."""
    found = re.search(r'<html lang="([\w-]+)"', page)
    assert found
    return found.group(1).replace("-", "_")


@pytest.mark.parametrize("locale", [loc for loc in SHIPPED_LOCALES if loc != "en"])
def test_every_page_is_in_the_viewers_language(app: Flask, locale: str) -> None:
    ids = {**seed_every_state(app), **stall_and_time_out(app), "in_line": in_line(app)}
    client = app.test_client()
    batch = re.search(r'href="(/pgbus/batches/\d+)"', client.get(f"/pgbus/runs/{ids['waiting_batch']}").get_data(
        as_text=True))
    assert batch
    with_a_delivery(app.extensions["pgbus"])
    token = csrf(client)
    pages = {url: client.get(url + ("&" if "?" in url else "?") + f"locale={locale}")
             for url in ["/pgbus/", "/pgbus/runs", "/pgbus/attention", "/pgbus/limits", "/pgbus/notifications",
                         batch.group(1),
                         "/pgbus/runs?status=bogus",
                         "/pgbus/runs/00000000-0000-0000-0000-000000000000"]
             + [f"/pgbus/runs/{i}" for i in ids.values()]}
    pages["confirm"] = client.post(f"/pgbus/runs/{ids['paused_error']}/actions/cancel?locale={locale}",
                                   data={"csrf_token": token, "confirmed": ""})
    fragments = english_fragments(locale)
    english = text_of(client.get("/pgbus/attention?locale=en").get_data(as_text=True))
    assert len([piece for piece in fragments if piece in english]) >= 5, "the check finds English where it is"
    for url, response in pages.items():
        assert response.status_code in (200, 400, 404), url
        page = response.get_data(as_text=True)
        assert lang(page) == locale, url
        text = text_of(page)
        assert "%(" not in page, url
        left = [piece for piece in fragments if piece in text]
        assert left == [], f"{locale} {url}: English left: {left}"


@pytest.mark.settings(PGBUS_TIMEZONE="Asia/Tokyo")
def test_engine_messages_in_the_viewers_language_and_timezone(app: Flask) -> None:
    ids = stall_and_time_out(app)
    client = app.test_client()
    english = text_of(client.get(f"/pgbus/runs/{ids['swept_stalled']}?locale=en").get_data(as_text=True))
    assert re.search(rf"Attempt 1 of reserve on host-7:4242 passed its stall deadline \({CLOCK}\)"
                     r" without an outcome: its worker probably died\.", english), english
    german = text_of(client.get(f"/pgbus/runs/{ids['swept_stalled']}?locale=de").get_data(as_text=True))
    assert "host-7:4242" in german and "its worker probably died" not in german
    for page in (english, german):
        # A time inside a message is a clock time, never ISO text with microseconds.
        assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}", page)
    waited = text_of(client.get(f"/pgbus/runs/{ids['timed_out']}?locale=en").get_data(as_text=True))
    assert re.search(rf"No payment_confirmed signal arrived by {CLOCK}", waited), waited

    api = client.get(f"/pgbus/api/runs/{ids['swept_stalled']}").get_json()
    failed = next(s for s in api["steps"] if s["status"] == "failed")
    assert failed["error_code"] == "step_stalled"
    assert failed["error_params"]["worker"] == "host-7:4242" and failed["error_params"]["attempt"] == 1
    assert failed["error_message"].startswith("attempt 1 of reserve on host-7:4242 passed its stall deadline 20")
    assert "(its worker probably died)" in failed["error_message"]


@pytest.mark.settings(PGBUS_TIMEZONE="Asia/Tokyo")
def test_the_clock_time_follows_the_configured_timezone(app: Flask) -> None:
    """The test app shows times in Asia/Tokyo (PGBUS_TIMEZONE)."""
    with app.app_context():
        run = ThreeSteps.start(order_id=30)
    due = datetime(2030, 1, 2, 3, 4, tzinfo=timezone.utc)
    sql(app, "UPDATE pgbus_workflow_steps SET scheduled_at = %s WHERE workflow_id = %s", due, run.workflow_id)
    page = app.test_client().get(f"/pgbus/runs/{run.workflow_id}?locale=de").get_data(as_text=True)
    header = re.search(r'data-testid="next-step">(.*?)</p>', page, re.S)
    assert header
    # 03:04 UTC is 12:04 in Tokyo, on another day than today: the date is said too.
    assert "12:04" in text_of(header.group(1)) and "02.01.2030" in text_of(header.group(1)), header.group(1)


def test_a_host_app_overrides_one_message_without_forking_the_catalog(tmp_path: Path, clean: None, pg_url: str,
                                                                     redis_url: str) -> None:
    """PGBUS_TRANSLATIONS: the app's own pgbus.mo wins for the messages it has; the rest stay shipped."""
    catalog = Catalog(locale="de", domain="pgbus")
    catalog.add("Needs attention", "Baustellen")
    catalog.add("Resume", "Weiter", context="action")
    folder = tmp_path / "de" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    with (folder / "pgbus.mo").open("wb") as fh:
        write_mo(fh, catalog)
    app = Flask("override_test")
    app.config.update(TESTING=True, SECRET_KEY="test",
                      **settings_for(pg_url, redis_url, PGBUS_TRANSLATIONS=str(tmp_path)))
    bus = PgBus(app)
    try:
        page = text_of(app.test_client().get("/pgbus/attention?locale=de").get_data(as_text=True))
    finally:
        bus.close()
        engine_module._default = None
    assert "Baustellen" in page and "Handlungsbedarf" not in page
    assert "Übersicht" in page, "every message the app did not override is the shipped German"
    with app.test_request_context("/"):
        from flask import g

        g.pgbus_locale, g.pgbus_translations = "de", (str(tmp_path),)
        assert helpers.label(helpers.ACTION_LABELS, "resume") == "Weiter"
        assert helpers.label(helpers.RUN_STATUS_LABELS, "paused") == "Pausiert"


def test_a_missing_translations_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="PGBUS_TRANSLATIONS names a folder that does not exist"):
        Settings.load({"PGBUS_TRANSLATIONS": str(tmp_path / "nope")})
