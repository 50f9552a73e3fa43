"""The MCP server (``flask pgbus mcp``): the runs, for a model, through the Model Context Protocol.

Read tools are always offered; the write tools (every verb, signals, the bulk verbs) only when
``PGBUS_MCP_WRITE`` is true. Every tool is one entry of :data:`READ_TOOLS` or :func:`write_tools`
(a verb is one :class:`Verb` in :data:`VERBS`): its name, the description a model decides by,
the JSON Schemas of its arguments and of its structured result, and the function that answers.

What it reads and writes goes through the same code as the other doors: the JSON shapes of
:mod:`pgbus_flask.present.shapes` (the JSON API's too), :mod:`pgbus_flask.queries`, the run handle's
verbs (built from the table of verbs, :mod:`pgbus_flask.verbs`).
A write records actor ``mcp:<client name>`` (the ``clientInfo`` name the client sent, escaped and
cut) and needs a non-empty reason. A refusal comes back as a tool error (``isError``) in the words
the CLI prints (:func:`pgbus_flask.present.text.error_text`), and changes nothing.

Built on the ``mcp`` package's low-level server (the optional extra ``mcp``): stdio by default,
streamable HTTP with ``--http``. Over HTTP it answers only requests whose ``Host`` (and ``Origin``) is a
loopback name or an ``--allowed-host``, and, when ``PGBUS_MCP_TOKEN`` is set, that bear it; a host that is
not loopback needs all three (``--allow-remote``, the token, ``--allowed-host``), and ``--allowed-host``
needs the token on any host.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence

import anyio
from flask import Flask

from .. import config
from ..errors import ConfigError, InvalidInput
from ..present.text import terminal_safe
from .base import Call, Tool
from .reads import READ_TOOLS
from .server import McpServer, client_actor, is_loopback, tools
from .writes import VERBS, Verb, write_tools

__all__ = ["READ_TOOLS", "VERBS", "Call", "McpServer", "Tool", "Verb", "allowed_host", "client_actor", "mcp_token",
           "parse_http", "serve", "tools", "write_enabled", "write_tools"]


def parse_http(value: str, allow_remote: bool = False, *, token: str | None = None,
               allowed_hosts: Sequence[str] = ()) -> tuple[str, int]:
    """``--http``'s ``HOST:PORT`` (``PORT`` or ``:PORT``: 127.0.0.1; ``[::1]:PORT`` for IPv6), refusing a
    host that is not loopback unless given ``allow_remote``, a ``token`` and ``allowed_hosts``, and
    ``allowed_hosts`` without a ``token`` on any host, naming what is missing."""
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
    missing = [] if is_loopback(host) else [
        name for name, given in (("--allow-remote", allow_remote), ("PGBUS_MCP_TOKEN", token is not None),
                                 ("--allowed-host", bool(allowed_hosts))) if not given]
    if missing:
        raise InvalidInput("--http", f"host {terminal_safe(host)[:80]!r} is not a loopback address; serving there "
                                     "needs --allow-remote, PGBUS_MCP_TOKEN (a bearer token of at least "
                                     f"{config.MIN_MCP_TOKEN_LENGTH} characters every request must send) and "
                                     "--allowed-host NAME (each name clients reach it by); missing: "
                                     f"{', '.join(missing)}. Without them it has no authentication: anyone who "
                                     "reaches it, or any web page, reads every run (and, with PGBUS_MCP_WRITE, "
                                     "changes them). See docs/mcp.md, or serve it on 127.0.0.1")
    if allowed_hosts and token is None:
        # A name other than loopback reaches a loopback bind through a proxy or a tunnel: a network server.
        raise InvalidInput("--allowed-host", "answers requests that reach the server by other names (through a "
                                             "proxy, say), which serves it to the network: that needs "
                                             "PGBUS_MCP_TOKEN too, a bearer token of at least "
                                             f"{config.MIN_MCP_TOKEN_LENGTH} characters that every request must "
                                             "send; missing: PGBUS_MCP_TOKEN")
    return host, int(port_text)


_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_])?)(?::(\d{1,5}))?")


def allowed_host(value: str) -> str:
    """One ``--allowed-host``: a name or address as a client sends it in ``Host`` (``mcp.example.com``,
    ``10.0.0.5:8765``, ``[fd00::5]``), in lower case; without a port it stands for any port."""
    name = value.strip().lower()
    found = _HOST.fullmatch(name)
    if found is None or (found.group(2) is not None and not 0 < int(found.group(2)) < 65536):
        raise InvalidInput("--allowed-host", "wants a host name or address as clients send it in the Host header "
                                             "(mcp.example.com, 10.0.0.5:8765 or [fd00::5]), got "
                                             f"{terminal_safe(value)[:80]!r}")
    return name


def mcp_token(app: Flask, environ: Mapping[str, str] | None = None) -> str | None:
    """``PGBUS_MCP_TOKEN``: the environment's when set there (not empty), or else the app's. A bad one is
    :class:`InvalidInput` naming the key (the token itself is never shown)."""
    env = os.environ if environ is None else environ
    if env.get("PGBUS_MCP_TOKEN"):
        try:
            return config.parse_value("PGBUS_MCP_TOKEN", env["PGBUS_MCP_TOKEN"])  # type: ignore[no-any-return]
        except ConfigError as exc:
            raise InvalidInput(exc.key, exc.problem) from None
    return app.extensions["pgbus"].settings.mcp_token  # type: ignore[no-any-return]


def write_enabled(app: Flask, environ: Mapping[str, str] | None = None) -> bool:
    """``PGBUS_MCP_WRITE``: the environment's (an MCP client's config sets it there) or else the app's."""
    env = os.environ if environ is None else environ
    if "PGBUS_MCP_WRITE" in env:
        return bool(config.parse_value("PGBUS_MCP_WRITE", env["PGBUS_MCP_WRITE"]))
    return bool(app.extensions["pgbus"].settings.mcp_write)


def serve(app: Flask, *, http: str | None = None, allow_remote: bool = False,
          allowed_hosts: Sequence[str] = ()) -> None:
    """Serve the tools of ``app`` over stdio, or over streamable HTTP at ``http`` (``HOST:PORT``): there only to
    ``allowed_hosts`` (and loopback names on a loopback host), and with ``PGBUS_MCP_TOKEN`` set only to requests
    bearing it."""
    if http is None:
        if allowed_hosts:
            raise InvalidInput("--allowed-host", "only applies with --http (over stdio the client starts the server "
                                                 "itself)")
        server = McpServer(app, write=write_enabled(app))
        # stdout is the protocol's: anything else printed there would break it.
        sys.stdout.flush()
        anyio.run(server.serve_stdio)
        return
    hosts = [allowed_host(name) for name in allowed_hosts]
    token = mcp_token(app)
    host, port = parse_http(http, allow_remote, token=token, allowed_hosts=hosts)
    McpServer(app, write=write_enabled(app)).serve_http(host, port, token=token, allowed_hosts=hosts)
