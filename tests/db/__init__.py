"""Tests on PostgreSQL and Redis, steps run by the in-process worker (``work()``): the engine, CLI, MCP tools."""

from __future__ import annotations
