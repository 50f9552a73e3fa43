"""What a host app's own layout can show of pgbus: a stats card and a nav link, as Jinja macros
(``templates/pgbus/embed.html``) fed by template globals the blueprint installs on the app.

    {% from "pgbus/embed.html" import pgbus_nav_link, pgbus_stats_card %}
    {{ pgbus_nav_link() }} ... {{ pgbus_stats_card() }}

The counts come from one cheap statement (:func:`pgbus_flask.queries.stats`), read once per
request; the words come from the dashboard's catalogs in the viewer's language (the same choice
as the dashboard's: its cookie, then Accept-Language), never from the host app's catalogs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Blueprint, g
from markupsafe import Markup

from .. import queries
from . import i18n

if TYPE_CHECKING:
    from ..engine import Engine


def register(bp: Blueprint, engine: Engine) -> None:
    settings = engine.settings

    def _locale() -> None:
        if g.get("pgbus_locale") is None:
            g.pgbus_locale = i18n.choose_locale(settings.locales, settings.default_locale)
            g.pgbus_translations = settings.translations

    @bp.app_template_global("pgbus_stats")
    def pgbus_stats() -> queries.Stats:
        if g.get("pgbus_stats") is None:
            g.pgbus_stats = queries.stats(engine)
        return g.pgbus_stats  # type: ignore[no-any-return]

    @bp.app_template_global("pgbus_gettext")
    def pgbus_gettext(message: str, **variables: Any) -> str:
        _locale()
        return i18n.gettext(message, **variables)

    @bp.app_template_global("pgbus_number")
    def pgbus_number(value: int) -> str:
        """A count written as the viewer's locale writes numbers (grouped; CLDR's digits)."""
        _locale()
        return i18n.number(value)

    @bp.app_template_global("pgbus_lang_attrs")
    def pgbus_lang_attrs() -> Markup:
        """``lang`` and ``dir`` of the card's words, which may differ from the host page's own."""
        _locale()
        locale = i18n.current_locale()
        return Markup('lang="%s" dir="%s"') % (i18n.language_tag(locale), i18n.text_direction(locale))

    @bp.app_template_global("pgbus_ngettext")
    def pgbus_ngettext(singular: str, plural: str, num: int, **variables: Any) -> str:
        _locale()
        return i18n.ngettext(singular, plural, num, **variables)
