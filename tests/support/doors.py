"""The CLI and the MCP server as the tests drive them: ``flask pgbus ...`` through Flask's CLI runner,
``flask pgbus mcp`` as a subprocess spoken to over stdio."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from flask import Flask
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, Implementation

from tests.support import ROOT


def invoke(app: Flask, *args: str) -> tuple[int, str]:
    result = app.test_cli_runner().invoke(args=["pgbus", *args])
    return result.exit_code, result.output


FLASK = [sys.executable, "-m", "flask", "--app", "tests.app_factory:create_app", "pgbus", "mcp"]


CLIENT = "pgbus-tests"


# What a summary must never carry raw: C0/C1 controls but newline, and the bidi controls.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def server_env(pg_url: str, redis_url: str, write: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGBUS_")}
    env.update(PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]),
               TEST_APP_DATABASE_URL=pg_url, TEST_APP_REDIS_URL=redis_url, PGBUS_MCP_WRITE="true" if write else "0")
    return env


def talk(env: dict[str, str], body: Callable[[Client], Awaitable[None]], *, name: str | None = CLIENT,
         mode: str = "auto") -> None:
    """Start ``flask pgbus mcp`` as a subprocess, connect over stdio as client ``name``, run ``body``."""
    params = StdioServerParameters(command=FLASK[0], args=FLASK[1:], env=env, cwd=ROOT)
    info = Implementation(name=name, version="1.0") if name is not None else None

    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(params, client_info=info, mode=mode) as client:
                await body(client)

    anyio.run(main)


def text_of(result: CallToolResult) -> str:
    [content] = result.content
    assert content.type == "text"
    return content.text  # type: ignore[union-attr,no-any-return]


async def ok(client: Client, tool: str, args: dict[str, Any] | None = None) -> tuple[Any, str]:
    """Call ``tool``; its structured result and its summary (which carries nothing unsafe)."""
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, text_of(result)
    summary = text_of(result)
    assert summary and not UNSAFE.search(summary), summary
    assert result.structured_content is not None
    return result.structured_content, summary


async def refused(client: Client, tool: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error and result.structured_content is None
    return text_of(result)


def cli_error(app: Flask, *args: str) -> str:
    """What ``flask pgbus ARGS`` says when it refuses (click's "Error: " prefix taken off)."""
    result = app.test_cli_runner().invoke(args=["pgbus", *args])
    assert result.exit_code in (1, 2), result.output
    return result.output.strip().removeprefix("Error: ")
