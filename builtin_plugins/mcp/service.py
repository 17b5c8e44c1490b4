"""MCP connections: server definitions in the database, their live sessions, and their tools in the catalog.

Greenlets (requests, the agent) use :class:`McpManager`. Each server's session is a
:class:`~builtin_plugins.mcp.sessions.Connection`, an actor task on the asyncio bridge
(``sessions.py``, imported once a server exists: the ``mcp`` SDK costs ~0.4 s to
import). Every change of a connection is handed to the hub, where the manager makes
it public and brings the catalog in line.
"""
import hashlib
import json
import logging
import math
import re
import secrets
import time
from dataclasses import dataclass, field

from gevent.lock import RLock
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from core.asyncio_bridge import bridge
from core.db import isoformat, utcnow
from core.errors import ApiError, Conflict, NotFound
from core.tools import Tool, ToolError

from .models import McpServer

log = logging.getLogger("agenthost.mcp")

CONNECTING, CONNECTED, FAILED, CLOSED = "connecting", "connected", "failed", "closed"
STDIO, SSE, STREAMABLE_HTTP = "STDIO", "SSE", "STREAMABLE_HTTP"

MASK = "***"


class McpUnavailable(Exception):
    """The server has no live session right now."""

    def __init__(self, state, error=None, retry_in=None):
        super().__init__(error or state)
        self.state, self.error, self.retry_in = state, error, retry_in


class McpConnectionLost(Exception):
    """The session ended while a request was in flight."""


class McpCallTimeout(Exception):
    """No answer within the per-call timeout."""


class McpBadResult(Exception):
    """The server's result breaks the tool's own outputSchema."""


class McpRemoteError(Exception):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class Settings:
    connect_timeout: float = 20.0
    call_timeout: float = 60.0
    request_timeout: float = 30.0
    ping_interval: float = 30.0
    backoff_base: float = 1.0
    backoff_cap: float = 60.0
    shutdown_timeout: float = 5.0
    sse_read_timeout: float = 300.0

    @classmethod
    def from_config(cls, config):
        get = config.get
        return cls(
            connect_timeout=float(get("mcp.connect-timeout-seconds", 20)),
            call_timeout=float(get("mcp.call-timeout-seconds", 60)),
            request_timeout=float(get("mcp.request-timeout-seconds", 30)),
            ping_interval=float(get("mcp.ping-seconds", 30)),
            backoff_base=float(get("mcp.backoff-base-seconds", 1)),
            backoff_cap=float(get("mcp.backoff-cap-seconds", 60)),
            shutdown_timeout=float(get("mcp.shutdown-seconds", 5)),
            sse_read_timeout=float(get("mcp.sse-read-timeout-seconds", 300)),
        )


@dataclass
class ServerSpec:
    """One definition as the connection uses it (credentials in the clear, in memory only)."""

    id: str
    name: str
    transport: str
    command: str | None = None
    args: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict = field(default_factory=dict)
    call_timeout: float | None = None
    unusable: str | None = None  # why it cannot connect at all (credentials that do not open)


def catalog_name(server_name, tool_name, taken):
    """``<server>__<tool>``: sanitised to the catalog's name rule and unique (``taken(name)`` says if used)."""
    prefix = re.sub(r"[^A-Za-z0-9_-]+", "_", server_name).strip("_")[:30] or "mcp"
    base = re.sub(r"[^A-Za-z0-9_-]+", "_", tool_name).strip("_") or "tool"
    name = f"{prefix}__{base}"
    if len(name) > 64:
        digest = hashlib.sha1(f"{server_name}\0{tool_name}".encode()).hexdigest()[:8]
        name = f"{name[:55]}_{digest}"
    candidate, n = name, 2
    while taken(candidate):
        suffix = f"_{n}"
        candidate, n = name[:64 - len(suffix)] + suffix, n + 1
    return candidate


# -- the manager (greenlet side) -------------------------------------------------------------

class McpManager:
    """Server definitions and their connections; one per host (``host.service("mcp")``)."""

    def __init__(self, host):
        self.host = host
        self.settings = Settings.from_config(host.config)
        self.bridge = bridge()
        self._box = None
        self.connections = {}
        self._port = None
        self._catalog_lock = RLock()
        self._locks = {}
        self.stopped = False

    @property
    def box(self):
        if self._box is None:
            from core.secrets import box_for
            self._box = box_for(self.host)
        return self._box

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self):
        """Connect every stored server (in the background: start-up does not wait for them)."""
        with self.host.db.session() as s:
            rows = s.execute(select(McpServer).order_by(McpServer.created_at)).scalars().all()
        for row in rows:
            conn = self._open(self._spec(row))
            if conn.spec.unusable is None:
                self.bridge.call_soon(conn.start)

    def stop(self):
        """Close every session and child process; their tools leave the catalog."""
        self.stopped = True
        conns = list(self.connections.values())
        self.connections.clear()
        live = [c for c in conns if c.spec.unusable is None]
        if live:
            try:
                from .sessions import close_all
                self.bridge.run(close_all(live), timeout=self.settings.shutdown_timeout + 5)
            except Exception:
                log.exception("closing MCP sessions")
            # Whatever outlived the polite close is ended: a host never leaves its servers behind.
            self.bridge.kill_children([c._last_pid for c in live if c._last_pid is not None])
        for conn in conns:
            self._sync(conn)

    def changed(self, conn):
        """From the loop thread: a connection's state or tools changed."""
        if self._port is not None:
            self.bridge.post(self._port, self._sync, conn)

    def _open(self, spec):
        from .sessions import Connection

        if self._port is None:
            self._port = self.bridge.port()
        conn = Connection(self, spec)
        if spec.unusable:
            conn.mark_unusable(spec.unusable)
        self.connections[spec.id] = conn
        return conn

    def _lock(self, server_id):
        lock = self._locks.get(server_id)
        if lock is None:
            lock = self._locks[server_id] = RLock()
        return lock

    # -- definitions -------------------------------------------------------------------------

    def _row(self, session, server_id):
        row = session.get(McpServer, server_id)
        if row is None:
            raise NotFound("MCP server")
        return row

    def _spec(self, row):
        spec = ServerSpec(id=row.id, name=row.name, transport=row.transport, command=row.command,
                          args=json.loads(row.args) if row.args else [], cwd=row.cwd, url=row.url,
                          call_timeout=row.call_timeout)
        try:
            if row.env_sealed:
                spec.env = self.box.open(row.env_sealed, _context(row.id, "env"))
            if row.headers_sealed:
                spec.headers = self.box.open(row.headers_sealed, _context(row.id, "headers"))
        except self._secrets_error() as exc:
            spec.unusable = f"stored credentials cannot be used: {exc}"
        return spec

    @staticmethod
    def _secrets_error():
        from core.secrets import SecretsUnavailable
        return SecretsUnavailable

    def _check_name(self, session, name, server_id=None):
        # Case-insensitive everywhere, as MySQL's collation already is.
        query = select(McpServer.id).where(func.lower(McpServer.name) == name.lower())
        if server_id is not None:
            query = query.where(McpServer.id != server_id)
        if session.execute(query).first() is not None:
            raise Conflict("name_taken", f"An MCP server named {name!r} exists already.")

    def _fill(self, row, data, old_env=None, old_headers=None):
        transport = data["transport"]
        stdio = transport == STDIO
        env = _keep_masked(data.get("env") or {}, old_env, "env") if stdio else {}
        headers = _keep_masked(data.get("headers") or {}, old_headers, "headers") if not stdio else {}
        row.name, row.transport = data["name"], transport
        row.command = data.get("command") if stdio else None
        row.args = json.dumps(data.get("args") or []) if stdio else None
        row.cwd = data.get("cwd") if stdio else None
        row.url = data.get("url") if not stdio else None
        row.env_names = json.dumps(sorted(env))
        row.header_names = json.dumps(sorted(headers))
        try:
            row.env_sealed = self.box.seal(env, _context(row.id, "env")) if env else None
            row.headers_sealed = self.box.seal(headers, _context(row.id, "headers")) if headers else None
        except self._secrets_error() as exc:
            raise ApiError(503, "credentials_unavailable", f"Credentials cannot be stored: {exc}") from None
        row.call_timeout = data.get("callTimeoutSeconds")
        row.updated_at = utcnow()

    def list(self):
        with self.host.db.session() as s:
            rows = s.execute(select(McpServer).order_by(McpServer.created_at, McpServer.id)).scalars().all()
        return [self._view(row) for row in rows]

    def get(self, server_id):
        with self.host.db.session() as s:
            return self._view(self._row(s, server_id))

    def _view(self, row):
        conn = self.connections.get(row.id)
        live = conn.snapshot() if conn is not None else {
            "state": CLOSED, "lastError": None, "tools": [], "catalogTools": [], "pid": None, "serverInfo": None,
            "protocolVersion": None, "connectedAt": None, "retry": None}
        stdio = row.transport == STDIO
        return {
            "id": row.id, "name": row.name, "transport": row.transport,
            "command": row.command, "args": json.loads(row.args) if stdio and row.args else ([] if stdio else None),
            "cwd": row.cwd, "url": row.url,
            "env": _masked(json.loads(row.env_names or "[]")),
            "headers": _masked(json.loads(row.header_names or "[]")),
            "callTimeoutSeconds": row.call_timeout,
            **live,
            "createdAt": isoformat(row.created_at), "updatedAt": isoformat(row.updated_at),
        }

    def create(self, data):
        server_id = secrets.token_hex(6)
        now = utcnow()
        row = McpServer(id=server_id, created_at=now)
        self._fill(row, data)
        try:
            with self.host.db.session() as s:
                self._check_name(s, data["name"])
                s.add(row)
        except IntegrityError:
            raise Conflict("name_taken", f"An MCP server named {data['name']!r} exists already.") from None
        with self._lock(server_id):
            self._connect(self._spec_from(row, data))
        return self.get(server_id)

    def replace(self, server_id, data):
        with self._lock(server_id):
            try:
                with self.host.db.session() as s:
                    row = self._row(s, server_id)
                    self._check_name(s, data["name"], server_id)
                    old = self._spec(row)
                    if old.unusable and _has_mask(data):
                        raise ApiError(409, "credentials_unavailable",
                                       "The stored credentials cannot be read: send their values again.")
                    self._fill(row, data, old.env, old.headers)
                    spec = self._spec_from(row, data, old)
            except IntegrityError:
                raise Conflict("name_taken", f"An MCP server named {data['name']!r} exists already.") from None
            self._disconnect(server_id)
            self._connect(spec)
        return self.get(server_id)

    def delete(self, server_id):
        with self._lock(server_id):
            with self.host.db.session() as s:
                s.delete(self._row(s, server_id))
            self._disconnect(server_id)
        self._locks.pop(server_id, None)
        return {"ok": True, "id": server_id}

    def _spec_from(self, row, data, old=None):
        env = _keep_masked(data.get("env") or {}, old.env if old else None, "env")
        headers = _keep_masked(data.get("headers") or {}, old.headers if old else None, "headers")
        stdio = row.transport == STDIO
        return ServerSpec(id=row.id, name=row.name, transport=row.transport, command=row.command,
                          args=json.loads(row.args) if row.args else [], cwd=row.cwd, url=row.url,
                          env=env if stdio else {}, headers=headers if not stdio else {},
                          call_timeout=row.call_timeout)

    def _connect(self, spec):
        """Open the connection and wait for its first outcome (connected, or failed with a reason)."""
        conn = self._open(spec)
        try:
            self.bridge.run(conn.start_and_wait(), timeout=self.settings.connect_timeout + 5)
        except TimeoutError:
            pass  # the state still says connecting; the actor carries on
        self._sync(conn)
        return conn

    def _disconnect(self, server_id):
        conn = self.connections.pop(server_id, None)
        if conn is None:
            return
        if conn.spec.unusable is None and conn._task is not None:
            try:
                self.bridge.run(conn.close(), timeout=self.settings.shutdown_timeout + 5)
            except Exception:
                log.exception("closing MCP server %s", server_id)
        self._sync(conn)

    # -- live operations ---------------------------------------------------------------------

    def _conn(self, server_id):
        conn = self.connections.get(server_id)
        if conn is None:
            self.get(server_id)  # 404 for an unknown id
            raise ApiError(503, "mcp_not_connected", "The MCP server has no connection.")
        return conn

    def status(self):
        conns = [c for c in self.connections.values()]
        counts = {state: sum(1 for c in conns if c.public["state"] == state)
                  for state in (CONNECTED, CONNECTING, FAILED)}
        with self.host.db.session() as s:
            rows = s.execute(select(McpServer).order_by(McpServer.created_at, McpServer.id)).scalars().all()
        summary = []
        for row in rows:
            conn = self.connections.get(row.id)
            summary.append({"id": row.id, "name": row.name, "transport": row.transport,
                            "state": conn.public["state"] if conn else CLOSED,
                            "toolCount": len(conn.public["tools"]) if conn and conn.public["state"] == CONNECTED
                            else 0})
        return {"servers": len(rows), "connected": counts[CONNECTED], "connecting": counts[CONNECTING],
                "failed": counts[FAILED],
                "tools": sum(s["toolCount"] for s in summary), "connections": summary}

    def test(self, server_id):
        with self._lock(server_id):
            conn = self._conn(server_id)
            started = time.monotonic()
            if conn.spec.unusable is not None:
                outcome = conn.spec.unusable
            else:
                try:
                    outcome = self.bridge.run(conn.restart_and_wait(), timeout=self.settings.connect_timeout + 5)
                except TimeoutError:
                    outcome = f"no answer within {self.settings.connect_timeout:g} s while connecting"
            self._sync(conn)
        snap = conn.snapshot()
        return {"ok": outcome is None, "state": snap["state"], "error": outcome, "tools": snap["tools"],
                "serverInfo": snap["serverInfo"], "protocolVersion": snap["protocolVersion"],
                "elapsedMs": int((time.monotonic() - started) * 1000)}

    def call(self, server_id, tool, arguments):
        """A direct call: a tool error is a result with ``isError``; anything else a problem."""
        conn = self._conn(server_id)
        result = self._call(conn, tool, arguments)
        data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        is_error = bool(data.get("isError"))
        error = (_content_text(data) or "the tool failed") if is_error else None
        return {"tool": tool, "isError": is_error, "error": error,
                "content": data.get("content") or [], "structuredContent": data.get("structuredContent")}

    def _call(self, conn, tool, arguments):
        if conn.public["state"] == CONNECTED and tool not in conn.public["tools"]:
            raise ApiError(404, "tool_not_found", f"The server {conn.spec.name!r} has no tool {tool!r}.")
        timeout = conn.spec.call_timeout or self.settings.call_timeout
        return self._live(conn, conn.call_tool(tool, arguments, timeout), timeout)

    def _live(self, conn, coro, timeout=None):
        timeout = timeout or self.settings.request_timeout
        try:
            return self.bridge.run(coro, timeout=timeout + self.settings.request_timeout)
        except McpUnavailable as exc:
            headers = {"Retry-After": str(max(1, math.ceil(exc.retry_in)))} if exc.retry_in is not None else None
            raise ApiError(503, "mcp_not_connected",
                           f"The MCP server is {exc.state}" + (f": {exc.error}" if exc.error else "."),
                           headers=headers, state=exc.state, lastError=exc.error) from None
        except McpConnectionLost as exc:
            raise ApiError(502, "mcp_connection_lost", f"The connection to the MCP server was lost: {exc}") from None
        except (McpCallTimeout, TimeoutError):
            raise ApiError(504, "mcp_timeout",
                           f"The MCP server did not answer within {timeout:g} s; the call was abandoned.") from None
        except McpRemoteError as exc:
            raise ApiError(422, "mcp_error", f"The MCP server refused the request: {exc.message}",
                           mcpCode=exc.code, mcpMessage=exc.message) from None
        except McpBadResult as exc:
            raise ApiError(502, "mcp_bad_result", f"The MCP server's answer is not valid: {exc}") from None

    def prompts(self, server_id):
        conn = self._conn(server_id)
        prompts = self._live(conn, conn.list_prompts())
        return [{"name": p.name, "title": getattr(p, "title", None), "description": p.description,
                 "arguments": [{"name": a.name, "description": a.description, "required": a.required}
                               for a in (p.arguments or [])]} for p in prompts]

    def resources(self, server_id):
        conn = self._conn(server_id)
        resources = self._live(conn, conn.list_resources())
        return [{"uri": str(r.uri), "name": r.name, "title": getattr(r, "title", None),
                 "description": r.description, "mimeType": r.mimeType, "size": r.size} for r in resources]

    # -- the catalog -------------------------------------------------------------------------

    def _sync(self, conn):
        """Make the newest snapshot public and the catalog hold exactly its tools while connected."""
        with self._catalog_lock:
            latest = conn._latest
            if latest["seq"] > conn.public["seq"]:
                conn.public = latest
            snap = conn.public
            live = snap["state"] == CONNECTED and self.connections.get(conn.id) is conn and not self.stopped
            wanted = dict(snap["tools"]) if live else {}
            catalog = self.host.tools
            for mcp_name, (name, fingerprint) in list(conn.published.items()):
                tool = wanted.get(mcp_name)
                if tool is None or _fingerprint(tool) != fingerprint:
                    catalog.remove(name)
                    del conn.published[mcp_name]
            for mcp_name in sorted(wanted):
                if mcp_name in conn.published:
                    continue
                tool = wanted[mcp_name]
                name = catalog_name(conn.spec.name, mcp_name, lambda n: catalog.get(n) is not None)
                annotations = tool.annotations
                try:
                    entry = Tool(name, tool.description or tool.title or mcp_name, dict(tool.inputSchema or {}),
                                 handler=self._tool_handler(conn.id, mcp_name),
                                 retry_safe=bool(annotations and annotations.idempotentHint),
                                 source=f"mcp:{conn.id}")
                    catalog.add(entry)
                except ValueError as exc:
                    log.warning("MCP server %s: tool %r not added to the catalog: %s", conn.spec.name, mcp_name, exc)
                    continue
                conn.published[mcp_name] = (name, _fingerprint(tool))

    def _tool_handler(self, server_id, mcp_name):
        def handler(arguments, ctx):
            conn = self.connections.get(server_id)
            if conn is None:
                raise ToolError("the MCP server was removed")
            try:
                result = self._call(conn, mcp_name, arguments)
            except ApiError as exc:
                raise ToolError(f"MCP server {conn.spec.name}: {exc.detail}") from None
            data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            if data.get("isError"):
                raise ToolError(_content_text(data) or f"{mcp_name} failed")
            return data
        return handler


def _context(server_id, what):
    return f"mcp_servers:{server_id}:{what}"


def _keep_masked(values, old, what):
    """``***`` keeps the stored value of that name (a client sends back what it read)."""
    result, missing = {}, []
    for name, value in values.items():
        if value == MASK:
            if old is None or name not in old:
                missing.append(name)
                continue
            result[name] = old[name]
        else:
            result[name] = value
    if missing:
        raise ApiError(400, "validation_failed", "The request has invalid fields.",
                       errors={what: {name: ["*** keeps a stored value, and none is stored under this name."]
                                      for name in missing}})
    return result


def _masked(names):
    """Names only: every value reads ``***``."""
    return {name: MASK for name in sorted(names)}


def _has_mask(data):
    return any(v == MASK for v in (data.get("env") or {}).values()) or \
        any(v == MASK for v in (data.get("headers") or {}).values())


def _fingerprint(tool):
    return json.dumps([tool.description, tool.inputSchema, tool.annotations.model_dump() if tool.annotations else None],
                      sort_keys=True, default=str)


def _content_text(data):
    parts = data.get("content") or []
    return "\n".join(p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type") == "text").strip()
