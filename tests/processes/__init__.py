"""Real ``pgbus-worker`` processes, crashes, built wheels, the demo; every test here carries the ``slow`` marker."""

from __future__ import annotations
