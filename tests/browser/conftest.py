"""The browser tests' fixtures: one Chromium per module, and the test's app served on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, Browsing, require_chromium, serve


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def browsing(app: Flask, browser: Any) -> Iterator[Browsing]:
    with serve(app) as base_url:
        session = Browsing(browser, base_url)
        try:
            yield session
        finally:
            session.close()
