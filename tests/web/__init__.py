"""The dashboard and the JSON API through Flask's test client."""

from __future__ import annotations
