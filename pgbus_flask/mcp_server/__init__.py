"""The MCP server (``flask pgbus mcp``): the runs, for a model, through the Model Context Protocol.

Read tools are always offered; the write tools (every verb, signals, the bulk verbs) only when
``PGBUS_MCP_WRITE`` is true. Every tool is one entry of :data:`READ_TOOLS` or :func:`write_tools`
(a verb is one :class:`Verb` in :data:`VERBS`): its name, the description a model decides by,
the JSON Schemas of its arguments and of its structured result, and the function that answers.

What it reads and writes goes through the same code as the other doors: the JSON API's
serialisation (:mod:`pgbus_flask.web.api`), :mod:`pgbus_flask.queries`, the run handle's verbs.
A write records actor ``mcp:<client name>`` (the ``clientInfo`` name the client sent, escaped and
cut) and needs a non-empty reason. A refusal comes back as a tool error (``isError``) in the words
the CLI prints (:func:`pgbus_flask.cli.error_text`), and changes nothing.

Built on the ``mcp`` package's low-level server (the optional extra ``mcp``): stdio by default,
streamable HTTP on a loopback address with ``--http``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

import anyio
from flask import Flask

from .. import config
from ..cli import terminal_safe
from ..errors import InvalidInput
from .base import Call, Tool
from .reads import READ_TOOLS
from .server import McpServer, client_actor, is_loopback, tools
from .writes import VERBS, Verb, write_tools

__all__ = ["READ_TOOLS", "VERBS", "Call", "McpServer", "Tool", "Verb", "client_actor", "parse_http", "serve",
           "tools", "write_enabled", "write_tools"]


def parse_http(value: str, allow_remote: bool) -> tuple[str, int]:
    """``--http``'s ``HOST:PORT`` (``PORT`` or ``:PORT``: 127.0.0.1; ``[::1]:PORT`` for IPv6), refusing a
    host that is not loopback unless ``allow_remote``."""
    text = value.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host or "127.0.0.1"
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidInput("--http", f"wants HOST:PORT with a port from 1 to 65535, as 127.0.0.1:8765, got "
                                     f"{terminal_safe(value)[:80]!r}")
    if not is_loopback(host) and not allow_remote:
        raise InvalidInput("--http", f"host {terminal_safe(host)[:80]!r} is not a loopback address. The MCP "
                                     "server has no authentication of its own: anyone who can reach it reads "
                                     "every run (and, with PGBUS_MCP_WRITE, changes them). Serve it on 127.0.0.1, "
                                     "or pass --allow-remote to serve it there anyway (behind a proxy that "
                                     "authenticates)")
    return host, int(port_text)


def write_enabled(app: Flask, environ: Mapping[str, str] | None = None) -> bool:
    """``PGBUS_MCP_WRITE``: the environment's (an MCP client's config sets it there) or else the app's."""
    env = os.environ if environ is None else environ
    if "PGBUS_MCP_WRITE" in env:
        return bool(config.parse_value("PGBUS_MCP_WRITE", env["PGBUS_MCP_WRITE"]))
    return bool(app.extensions["pgbus"].settings.mcp_write)


def serve(app: Flask, *, http: str | None = None, allow_remote: bool = False) -> None:
    """Serve the tools of ``app`` over stdio, or over streamable HTTP at ``http`` (``HOST:PORT``)."""
    address = parse_http(http, allow_remote) if http is not None else None
    server = McpServer(app, write=write_enabled(app))
    if address is not None:
        server.serve_http(*address)
        return
    # stdout is the protocol's: anything else printed there would break it.
    sys.stdout.flush()
    anyio.run(server.serve_stdio)
