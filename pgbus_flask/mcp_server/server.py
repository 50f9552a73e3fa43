"""Serving the tools: listing them, checking a call's arguments, answering it in a worker thread
inside an app context, and saying a refusal as a tool error; over stdio or streamable HTTP (there
behind the Host/Origin checks and, with ``PGBUS_MCP_TOKEN``, the bearer token)."""

from __future__ import annotations

import hmac
import ipaddress
import logging
import re
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.to_thread
import click
import mcp_types as types
import psycopg
from flask import Flask
from jsonschema import Draft202012Validator
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.provider import AccessToken
from mcp.server.stdio import stdio_server
from pydantic import AnyHttpUrl

from .. import db
from ..engine import Engine
from ..errors import PgbusError
from ..present import shapes
from ..present.text import error_text, terminal_safe
from .base import CLIENT_NAME_LIMIT, INSTRUCTIONS, READ_ONLY_NOTE, SERVER_NAME, Call, Tool
from .reads import READ_TOOLS
from .writes import write_tools

log = logging.getLogger("pgbus_flask.mcp")


def tools(write: bool) -> dict[str, Tool]:
    """The tools a server offers, by name."""
    return {tool.name: tool for tool in (*READ_TOOLS, *(write_tools() if write else ()))}


_SURROGATE = re.compile("[\ud800-\udfff]")


def _sendable(value: Any) -> Any:
    """JSON values with each lone surrogate written as its ``\\udcff`` escape (UTF-8 cannot carry one;
    this is how stored text shows them everywhere else)."""
    if isinstance(value, str):
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", value) if _SURROGATE.search(value) else value
    if isinstance(value, list):
        return [_sendable(item) for item in value]
    if isinstance(value, dict):
        return {_sendable(k): _sendable(v) for k, v in value.items()}
    return value


def refusal(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=_sendable(text))], is_error=True)


def client_actor(name: Any) -> str:
    """``mcp:<name>``: the client's name as it said it, escaped (control and bidi characters) and cut;
    ``mcp:unknown`` when it said none."""
    shown = terminal_safe(name.strip())[:CLIENT_NAME_LIMIT].strip() if isinstance(name, str) else ""
    return "mcp:" + (shown or "unknown")


def _client_name(ctx: ServerRequestContext[Any, Any]) -> str | None:
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    return info.name if info is not None else None


def _check_arguments(tool: Tool, args: Any) -> str | None:
    """What is wrong with ``args`` for ``tool`` (naming the argument), or None."""
    if not isinstance(args, dict):
        return "arguments must be an object"
    error = next(iter(sorted(Draft202012Validator(tool.input_schema()).iter_errors(args),
                             key=lambda e: list(e.path))), None)
    if error is None:
        return None
    where = ".".join(str(part) for part in error.path)
    if error.validator == "additionalProperties":
        known = ", ".join(tool.params) or "none"
        extra = sorted(set(args) - set(tool.params))
        return f"{tool.name} takes no argument {extra[0]!r} (its arguments: {known})"
    return f"{where}: {error.message}" if where else error.message


class McpServer:
    """The tools of one app, served to one or more MCP clients."""

    def __init__(self, app: Flask, *, write: bool) -> None:
        self.app = app
        self.engine: Engine = app.extensions["pgbus"]
        self.write = write
        self.tools = tools(write)
        instructions = INSTRUCTIONS + ("" if write else " " + READ_ONLY_NOTE)
        self.server: Server[Any] = Server(SERVER_NAME, version=_version(), instructions=instructions,
                                          on_list_tools=self.list_tools, on_call_tool=self.call_tool)

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool.as_mcp() for tool in self.tools.values()])

    async def call_tool(self, ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = self.tools.get(params.name)
        if tool is None:
            if any(t.name == params.name for t in write_tools()):
                return refusal(f"{params.name} is a write tool, and this server is read-only: "
                               "set PGBUS_MCP_WRITE=true where it starts to offer the write tools")
            return refusal(f"no tool is named {error_text(repr(params.name))} (known: {', '.join(self.tools)})")
        args = params.arguments or {}
        problem = _check_arguments(tool, args)
        if problem is not None:
            return refusal(error_text(problem))
        # JSON Schema counts 20.0 as an integer: the tools get it as one.
        whole = {k: int(v) if isinstance(v, float) and tool.params[k].get("type") == "integer" else v
                 for k, v in args.items()}
        actor = client_actor(_client_name(ctx))
        return await anyio.to_thread.run_sync(self.answer, tool, whole, actor)

    def answer(self, tool: Tool, args: dict[str, Any], actor: str) -> types.CallToolResult:
        """Run ``tool`` (in a worker thread, in an app context): its result, or its refusal."""
        try:
            with self.app.app_context():
                data, text = tool.answer(Call(self.engine, actor), args)
            structured = _sendable(shapes.jsonable(data))
        except PgbusError as exc:
            return refusal(error_text(exc))
        except psycopg.Error as exc:
            translated = db.translate(exc)
            if translated is None:
                log.exception("pgbus MCP: %s failed", tool.name)
                return refusal(f"{tool.name} failed: PostgreSQL refused it ({type(exc).__name__}); nothing was "
                               "changed. The server's log has the details.")
            return refusal(error_text(translated))
        except Exception as exc:
            log.exception("pgbus MCP: %s failed", tool.name)
            return refusal(f"{tool.name} failed with an unexpected {type(exc).__name__}; the server's log has "
                           "the details.")
        return types.CallToolResult(content=[types.TextContent(type="text", text=_sendable(text))],
                                    structured_content=structured, is_error=False)

    # -- transports -------------------------------------------------------------------------------

    async def serve_stdio(self) -> None:
        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())

    def serve_http(self, host: str, port: int, *, token: str | None = None,
                   allowed_hosts: Sequence[str] = ()) -> None:
        """Serve streamable HTTP at ``http://host:port/mcp``: only to requests whose Host (and Origin, when
        sent) is a loopback name (on a loopback bind) or one of ``allowed_hosts``, and, with ``token``, only
        to those sending it as their bearer token."""
        import uvicorn

        starlette = self.server.streamable_http_app(host=host, **http_guards(host, port, token, allowed_hosts))
        shown = f"[{host}]" if ":" in host else host
        guard = "; bearer token required" if token is not None else ""
        click.echo(f"pgbus MCP server ({'read and write' if self.write else 'read-only'}) on "
                   f"http://{shown}:{port}/mcp{guard}", err=True)
        uvicorn.Server(uvicorn.Config(starlette, host=host, port=port, log_level="warning")).run()


class StaticTokenVerifier:
    """The ``mcp`` package's :class:`TokenVerifier` for one shared secret (``PGBUS_MCP_TOKEN``), compared in
    constant time: a token that is not it is no token at all, so its request gets the 401."""

    CLIENT_ID = "pgbus-mcp-token"

    def __init__(self, token: str) -> None:
        self._expected = token.encode("ascii")

    def __repr__(self) -> str:  # the token is a secret: never in a log line or a traceback's locals
        return f"{type(self).__name__}(***)"

    async def verify_token(self, token: str) -> AccessToken | None:
        if not hmac.compare_digest(token.strip().encode("latin-1", "replace"), self._expected):
            return None
        return AccessToken(token="***", client_id=self.CLIENT_ID, scopes=[])


def http_guards(host: str, port: int, token: str | None, allowed_hosts: Sequence[str]) -> dict[str, Any]:
    """The ``transport_security``, ``auth`` and ``token_verifier`` arguments of ``streamable_http_app``."""
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.transport_security import TransportSecuritySettings

    # Refuse other Host and Origin headers (DNS rebinding, and pages of other sites): loopback names on a
    # loopback bind, and the names the operator listed (a proxy's public name, the server's own).
    names = sorted({f"[{h}]" if ":" in h else h for h in (host, "127.0.0.1", "localhost", "::1")}) \
        if is_loopback(host) else []
    hosts = [f"{n}:*" for n in names]
    origins = [f"http://{n}:*" for n in names]
    for allowed in allowed_hosts:
        # Without a port: any port, and none (what a client sends through a proxy on 80 or 443).
        patterns = [allowed] if re.search(r":\d+$", allowed) else [allowed, f"{allowed}:*"]
        hosts += patterns
        origins += [f"{scheme}://{pattern}" for scheme in ("http", "https") for pattern in patterns]
    guards: dict[str, Any] = {"transport_security": TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)}
    if token is not None:
        shown = f"[{host}]" if ":" in host else host
        # The package's bearer middleware is only wired in with an AuthSettings, whose issuer_url is a required
        # field; without an auth_server_provider or a resource_server_url it serves no OAuth route and no
        # metadata, and the URL is never sent. So it names this server, the one place a token comes from here.
        guards["auth"] = AuthSettings(issuer_url=AnyHttpUrl(f"http://{shown}:{port}"), resource_server_url=None)
        guards["token_verifier"] = StaticTokenVerifier(token)
    return guards


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pgbus-flask")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return ""


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
