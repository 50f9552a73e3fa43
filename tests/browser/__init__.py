"""The dashboard in Chromium through Playwright; every test here carries the ``browser`` marker."""

from __future__ import annotations
