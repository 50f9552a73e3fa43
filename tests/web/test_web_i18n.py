"""The dashboard speaks the viewer's language from its own catalogs, beside (never instead of) the host app's."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from flask import Flask, g, render_template_string
from flask_babel import Babel

from pgbus_flask.web import i18n
from tests.support import work
from tests.support.webtools import engine_of, seed_every_state, text_of, work_some
from tests.workflows import FailsUntil, FansOut


def lang(page: str) -> str:
    found = re.search(r'<html lang="([\w-]+)"', page)
    assert found
    return found.group(1)


def test_locale_from_the_query_then_the_cookie(app: Flask) -> None:
    client = app.test_client()
    response = client.get("/pgbus/runs?locale=de")
    page = response.get_data(as_text=True)
    assert lang(page) == "de" and "Läufe" in text_of(page) and "Keine Läufe passen zu diesen Filtern." in text_of(page)
    assert any(h.startswith("pgbus_locale=de") for h in response.headers.getlist("Set-Cookie"))
    assert lang(client.get("/pgbus/attention").get_data(as_text=True)) == "de", "the cookie remembers it"
    assert lang(client.get("/pgbus/?locale=ja", headers={"Accept-Language": "de"}).get_data(as_text=True)) == "ja"


@pytest.mark.parametrize(("header", "expected"), [
    ("ja", "ja"), ("ko, de;q=0.8", "de"), ("ko", "en"), ("fr-CA,fr;q=0.9", "fr"), ("pt-BR", "pt"),
    ("nb-NO", "nb"), ("sv-SE,en;q=0.5", "sv"), ("", "en"), ("ja-JP,ja;q=0.9", "ja"),
    ("ar-EG,ar;q=0.9", "ar"), ("he-IL", "he"), ("pl-PL,pl;q=0.9,en;q=0.5", "pl"),
    # Chinese: a region written in simplified characters, or none, picks zh_Hans; one written in
    # traditional characters matches nothing shipped and falls through to the next choice.
    ("zh-CN,zh;q=0.9", "zh-Hans"), ("zh", "zh-Hans"), ("zh-Hans-CN", "zh-Hans"), ("zh-SG", "zh-Hans"),
    ("zh-TW,zh;q=0.9", "zh-Hans"), ("zh-TW", "en"), ("zh-HK,ja;q=0.5", "ja"), ("zh-Hant", "en"),
])
def test_locale_from_accept_language(app: Flask, header: str, expected: str) -> None:
    page = app.test_client().get("/pgbus/", headers={"Accept-Language": header}).get_data(as_text=True)
    assert lang(page) == expected


def test_an_unknown_locale_is_ignored(app: Flask) -> None:
    response = app.test_client().get("/pgbus/?locale=xx", headers={"Accept-Language": "de"})
    assert lang(response.get_data(as_text=True)) == "de"
    assert not any(h.startswith("pgbus_locale=") for h in response.headers.getlist("Set-Cookie"))


@pytest.mark.settings(PGBUS_LOCALES="en,de", PGBUS_DEFAULT_LOCALE="de")
def test_only_the_configured_locales_are_offered(app: Flask) -> None:
    client = app.test_client()
    page = client.get("/pgbus/?locale=ja", headers={"Accept-Language": "ja"}).get_data(as_text=True)
    assert lang(page) == "de", "ja is not offered here, so the default applies"
    assert 'data-testid="locale-ja"' not in page and 'data-testid="locale-en"' in page


def test_switching_language_keeps_the_filters(app: Flask) -> None:
    page = app.test_client().get("/pgbus/runs?status=paused").get_data(as_text=True)
    assert 'href="/pgbus/runs?status=paused&amp;locale=de"' in page


@pytest.mark.parametrize("locale", ["en", "de", "ja"])
def test_every_page_in_every_locale(app: Flask, locale: str) -> None:
    ids = seed_every_state(app)
    client = app.test_client()
    urls = ["/pgbus/", "/pgbus/runs", "/pgbus/attention"] + [f"/pgbus/runs/{i}" for i in ids.values()]
    for url in urls:
        response = client.get(url, query_string={"locale": locale})
        assert response.status_code == 200, url
        page = response.get_data(as_text=True)
        assert lang(page) == locale
        assert "%(" not in page and "%d" not in page, url
    runs = text_of(client.get("/pgbus/runs", query_string={"locale": locale}).get_data(as_text=True))
    expected = {
        "en": ["Waiting for batch FansOut#notify_vendors (2 of 3 jobs done).", "10 minutes ago",
               "Scheduled: reserve runs at "],
        "de": ["Überfällig: reserve war vor 10 Minuten fällig", "Geplant: reserve läuft am ",
               "(2 von 3 Jobs erledigt)"],
        "ja": ["期限超過: reserve は 10 分前に実行予定でしたが",
               "バッチ FansOut#notify_vendors を待っています（3 件中 2 件のジョブが完了）。",
               "実行予定: reserve は ",
               "3 件中 2 件のジョブが完了"],
    }[locale]
    for sentence in expected:
        assert sentence in runs, sentence


def test_plurals(app: Flask) -> None:
    with app.app_context():
        FansOut.start(n=1)
        FansOut.start(n=2)
        work_some(engine_of(app), 2)  # both steps open their batches; no child runs yet
    client = app.test_client()

    def runs(locale: str) -> str:
        return text_of(client.get(f"/pgbus/runs?locale={locale}").get_data(as_text=True))

    assert "(0 of 1 job done)" in runs("en") and "(0 of 2 jobs done)" in runs("en")
    assert "(0 von 1 Job erledigt)" in runs("de") and "(0 von 2 Jobs erledigt)" in runs("de")
    assert "（1 件中 0 件のジョブが完了）" in runs("ja") and "（2 件中 0 件のジョブが完了）" in runs("ja")


def test_times_are_relative_inside_time_tags_in_the_viewers_locale(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9)
        work(engine_of(app))
    page = app.test_client().get(f"/pgbus/runs/{run.workflow_id}?locale=de").get_data(as_text=True)
    tag = re.search(r'<time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', page)
    assert tag
    assert datetime.fromisoformat(tag.group(1)).tzinfo is not None
    assert tag.group(3) in ("gerade eben",) or tag.group(3).startswith("vor ") or tag.group(3).endswith("Sekunde"), \
        tag.group(3)


def test_times_use_the_configured_timezone_and_locale() -> None:
    app = Flask("tz_test")
    moment = datetime(2026, 5, 4, 12, 0, tzinfo=timezone.utc)
    with app.test_request_context("/"):
        g.pgbus_tz = ZoneInfo("Asia/Tokyo")
        g.pgbus_locale = "de"
        assert i18n.absolute(moment) == "04.05.2026, 21:00:00"
        g.pgbus_locale = "en"
        tag = i18n.time_tag(moment, datetime(2026, 5, 4, 12, 3, tzinfo=timezone.utc))
        assert tag.startswith('<time datetime="2026-05-04T12:00:00+00:00" title="May 4, 2026, 9:00:00')
        assert tag.endswith(">3 minutes ago</time>")


@pytest.mark.settings(PGBUS_TIMEZONE="Asia/Tokyo")
def test_the_timezone_setting_reaches_the_pages(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9)
    page = app.test_client().get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    tag = re.search(r'<time datetime="([^"]+)" title="([^"]+)"', page)
    assert tag
    tokyo = datetime.fromisoformat(tag.group(1)).astimezone(ZoneInfo("Asia/Tokyo"))
    assert tokyo.strftime("%-I:%M") in tag.group(2)


def test_the_host_apps_flask_babel_keeps_its_own_messages(app: Flask) -> None:
    Babel(app, locale_selector=lambda: "de")

    @app.get("/host")
    def host() -> str:
        return render_template_string("{{ _('Runs') }}|{{ gettext('Overview') }}|{{ ngettext('%(num)d failed', "
                                      "'%(num)d failed', 2) }}")

    client = app.test_client()
    assert client.get("/host").get_data(as_text=True) == "Runs|Overview|2 failed", \
        "the dashboard's German catalog does not leak into the host app"
    page = client.get("/pgbus/?locale=ja").get_data(as_text=True)
    assert lang(page) == "ja" and "進行中の実行" in text_of(page)
    page = app.test_client().get("/pgbus/", headers={"Accept-Language": "en"}).get_data(as_text=True)
    assert lang(page) == "en" and "Ongoing runs" in text_of(page), "Flask-Babel's selector does not pick ours"
    assert client.get("/host").get_data(as_text=True) == "Runs|Overview|2 failed"


def test_without_flask_babel_the_catalogs_still_load(app: Flask) -> None:
    assert "babel" not in app.extensions
    assert "Übersicht" in app.test_client().get("/pgbus/?locale=de").get_data(as_text=True)


def test_catalogs_load_from_the_installed_package() -> None:
    assert i18n.translations_for("ja").gettext("Overview") == "概要"
    assert i18n.translations_for("de").ngettext("%(num)s failed", "%(num)s failed", 2) == "%(num)s fehlgeschlagen"


def test_language_links_work_under_a_script_root(app: Flask) -> None:
    page = app.test_client().get("/pgbus/runs", environ_overrides={"SCRIPT_NAME": "/shop"}).get_data(as_text=True)
    assert 'href="/shop/pgbus/runs?locale=de"' in page
    assert 'href="/shop/pgbus/static/pgbus.css"' in page


@pytest.mark.parametrize(("locale", "tag", "direction", "name"), [
    ("ar", "ar", "rtl", "العربية"), ("he", "he", "rtl", "עברית"), ("pl", "pl", "ltr", "polski"),
    ("zh_Hans", "zh-Hans", "ltr", "简体中文"), ("de", "de", "ltr", "Deutsch"),
])
def test_each_locale_says_its_direction_and_its_own_name(app: Flask, locale: str, tag: str, direction: str,
                                                         name: str) -> None:
    page = app.test_client().get(f"/pgbus/runs?locale={locale}").get_data(as_text=True)
    assert f'<html lang="{tag}" dir="{direction}">' in page
    link = r'<a href="[^"]*locale=' + locale + r'" hreflang="([^"]+)" lang="([^"]+)" dir="(\w+)"[^>]*>([^<]+)</a>'
    menu = re.search(link, app.test_client().get("/pgbus/runs").get_data(as_text=True))
    assert menu and menu.groups() == (tag, tag, direction, name), "the menu offers it in its own name"


def test_counts_in_plural_messages_are_grouped_as_the_locale_groups_numbers() -> None:
    """"1200 kørsler" beside "1.200" elsewhere on the page read as two different numbers."""
    for locale, grouped in (("en", "1,200"), ("da", "1.200"), ("de", "1.200"), ("fr", "1\u202f200"),
                            ("ja", "1,200"), ("pl", "1\xa0200"), ("ar", "1,200")):
        words = i18n.words_for(locale, timezone.utc)
        said = words.ngettext("Show the %(num)s run", "Show the %(num)s runs", 1200)
        assert grouped in said and "1200" not in said, (locale, said)
        assert words.number(1200) == grouped


def test_a_bulk_question_groups_its_count_and_keeps_it_unisolated() -> None:
    from pgbus_flask.present import sentences
    from pgbus_flask.queries import AttentionGroup

    group = AttentionGroup("FailsUntil", "capture", "paused_error", "TimeoutError", 400, None, None, None)
    words = i18n.words_for("da", timezone.utc)
    assert "400 kørsler" in sentences.bulk_confirm(words, "resume", group, sentences.HTML)
    html = sentences.bulk_confirm(i18n.words_for("en", timezone.utc), "resume",
                                  AttentionGroup("FailsUntil", "capture", "paused_manual", None, 1200, None, None,
                                                 None), sentences.HTML)
    assert "the 500 oldest" in html and "<bdi>500</bdi>" not in html, html


@pytest.mark.parametrize(("seconds", "locale", "said"), [
    (3600, "en", "Every hour"), (7200, "en", "Every 2 hours"), (86400 * 3, "en", "Every 3 days"),
    (90, "en", "Every 90 seconds"), (3600 * 1_000_000, "en", "Every 1,000,000 hours"),
    # Not "Toutes les 1000000 d'heures": an interval is said around CLDR's own unit, not counted.
    (3600 * 1_000_000, "fr", "Toutes les 1\u202f000\u202f000\xa0heures"),
    (3600 * 2, "fr", "Toutes les 2\xa0heures"), (86400 * 2, "fr", "Tous les 2\xa0jours"),
    (300, "pl", "Co 5 minut"), (120, "pl", "Co 2 minuty"),
])
def test_intervals_have_their_own_wording(seconds: int, locale: str, said: str) -> None:
    from pgbus_flask.present.schedules import timing

    words = i18n.words_for(locale, timezone.utc)
    assert str(timing(words, {"kind": "interval", "schedule": str(seconds), "timezone": "UTC"})) == said


def test_engine_messages_say_their_counts_as_the_locale_writes_numbers() -> None:
    from pgbus_flask.present import sentences

    now = datetime(2026, 12, 6, tzinfo=timezone.utc)
    german = i18n.words_for("de", timezone.utc)
    html = sentences.system_message(german, "children_failed_unknown", {"failed": 1200, "total": 5000}, "english", now)
    assert "<bdi>1.200</bdi>" not in html and "1.200" in html and "5.000" in html, html
    text = sentences.system_message(german, "children_failed_unknown", {"failed": 1200, "total": 5000}, "english",
                                    now, html=False)
    assert "1.200" in text and "5.000" in text and "1200" not in text, text


def test_an_address_nothing_takes_is_the_dashboards_own_404_in_the_viewers_language(app: Flask) -> None:
    client = app.test_client()
    for method in ("GET", "POST"):
        response = client.open("/pgbus/no/such/page?locale=de", method=method)
        page = response.get_data(as_text=True)
        assert response.status_code == 404, method
        assert 'data-testid="error-page" data-code="404"' in page and lang(page) == "de", method
        assert "Not Found" not in page and "The requested URL" not in page, "not Werkzeug's English page"
    wrong = client.get(f"/pgbus/runs/{'0' * 8}-0000-0000-0000-{'0' * 12}/actions/cancel")
    assert wrong.status_code == 405 and "POST" in wrong.headers["Allow"], "a form's address stays a wrong method"
    assert client.get("/pgbus/api/no/such").get_json()["status"] == 404, "the API keeps its JSON 404"
    host = client.get("/elsewhere")
    assert host.status_code == 404 and "error-page" not in host.get_data(as_text=True), "the host app's 404 is its own"


def test_a_signal_the_form_cannot_take_is_refused_in_the_viewers_words(app: Flask) -> None:
    from tests.support.webtools import csrf
    from tests.workflows import WaitsForPayment

    with app.app_context():
        run = WaitsForPayment.start()
        work(engine_of(app))
    client = app.test_client()
    token = csrf(client)
    bad_json = client.post(f"/pgbus/runs/{run.workflow_id}/signals?locale=de",
                           data={"csrf_token": token, "name": "paid", "payload": '{"ok": 1,\n oops}'})
    said = text_of(bad_json.get_data(as_text=True))
    assert bad_json.status_code == 400 and "Zeile 2, Spalte 2" in said, said
    no_name = client.post(f"/pgbus/runs/{run.workflow_id}/signals?locale=de",
                          data={"csrf_token": token, "name": " ", "payload": ""})
    said = text_of(no_name.get_data(as_text=True))
    assert no_name.status_code == 400 and "200" in said and "signal name must be" not in said, said
