"""Tests that need no service: catalogs, presenters, the README, the layers, pure helpers."""

from __future__ import annotations
