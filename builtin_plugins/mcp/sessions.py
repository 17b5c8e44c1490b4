"""Live MCP sessions: one actor task per server on the asyncio bridge, over STDIO, SSE or streamable HTTP.

Everything here runs on the bridge's loop thread except ``snapshot()``. The actor
enters and exits the ``mcp`` client contexts itself (anyio cancel scopes must be
exited by the task that entered them), reconnects with capped exponential backoff,
and fails calls in flight with the reason the session ended.
"""
import asyncio
import contextlib
import logging
import math
import os
import time
from collections import deque
from datetime import datetime, timedelta, timezone

from core.asyncio_bridge import SUBPROCESS_WATCH, async_imports, close_fd
from core.db import isoformat

from .service import (CLOSED, CONNECTED, CONNECTING, FAILED, SSE, STDIO, McpBadResult, McpCallTimeout,
                      McpConnectionLost, McpRemoteError, McpUnavailable)

# The asyncio side is imported here, in the main thread, so the loop thread never imports.
with async_imports():
    import anyio
    import anyio._backends._asyncio  # noqa: F401  (anyio loads its backend lazily)
    import httpcore._backends.anyio  # noqa: F401  (httpcore too)
    import httpx
    import jsonschema
    from jsonschema.exceptions import best_match
    from mcp import ClientSession, StdioServerParameters, types
    from mcp.client.sse import sse_client
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.shared.exceptions import McpError
    from referencing import Registry
    from referencing.exceptions import Unresolvable

log = logging.getLogger("agenthost.mcp")

CLIENT_INFO = types.Implementation(name="agenthost", version="0.1.0")
MAX_LISTED = 1000
STDERR_LINES = 20


class _Session(ClientSession):
    """The SDK's session, with one compiled validator per tool output schema.

    ClientSession checks a structured result against the tool's ``outputSchema`` with
    ``jsonschema.validate``, which checks the schema itself against its metaschema on
    every call (~0.35 ms of a ~1 ms call here). The validator is kept per schema
    instead; the rule, the best-match error and the RuntimeError raised are the SDK's.
    Should the SDK's private names change, the SDK's own check runs.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._validators = {}

    async def _validate_tool_result(self, name, result):
        schemas = getattr(self, "_tool_output_schemas", None)
        if not isinstance(schemas, dict) or name not in schemas:
            return await super()._validate_tool_result(name, result)
        schema = schemas[name]
        if schema is None:
            return
        if result.structuredContent is None:
            raise RuntimeError(f"Tool {name} has an output schema but did not return structured content")
        known = self._validators.get(name)
        if known is None or known[0] is not schema:
            cls = jsonschema.validators.validator_for(schema)
            try:
                cls.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise RuntimeError(f"Invalid schema for tool {name}: {exc}") from None
            known = self._validators[name] = (schema, cls(schema, registry=Registry()))
        try:
            error = best_match(known[1].iter_errors(result.structuredContent))
        except Unresolvable as exc:
            raise RuntimeError(f"Invalid schema for tool {name}: {exc}") from exc
        if error is not None:
            raise RuntimeError(f"Invalid structured content returned by tool {name}: {error}")


class Connection:
    """One server's session, driven by an actor task on the bridge loop.

    Its fields (state, error, tools, pid, ...) belong to the loop thread. Each change
    is captured as a numbered snapshot and posted to the hub, where the manager makes
    it ``public`` and brings the catalog in line in one step: whoever sees a state
    also sees the catalog that goes with it.
    """

    def __init__(self, manager, spec):
        self.manager = manager
        self.spec = spec
        self.id = spec.id
        self.settings = manager.settings
        self.state = CONNECTING
        self.error = None
        self.tools = {}  # MCP name -> types.Tool
        self.server_info = None
        self.protocol_version = None
        self.capabilities = None
        self.connected_at = None
        self.pid = None
        self.failures = 0
        self.retry_at = None
        self.stderr_tail = deque(maxlen=STDERR_LINES)
        self.published = {}  # hub side: MCP name -> (catalog name, fingerprint)
        self._seq = 0
        self._latest = self.public = self._capture()
        # loop side
        self._loop = None
        self._task = None
        self._wake = None
        self._scope = None
        self._session = None
        self._connected = False
        self._closing = False
        self._restart = False
        self._refresh = False
        self._lost = None
        self._inflight = set()
        self._lost_tasks = {}
        self._waiters = []
        self._exits = {}
        self._exited = None
        self._last_pid = None

    # -- snapshots ---------------------------------------------------------------------------

    def _capture(self):
        self._seq += 1
        return {"seq": self._seq, "state": self.state, "error": self.error, "tools": dict(self.tools),
                "pid": self.pid, "server_info": self.server_info, "protocol_version": self.protocol_version,
                "connected_at": self.connected_at, "failures": self.failures, "retry_at": self.retry_at}

    def mark_unusable(self, reason):
        """A definition that cannot connect at all (its credentials do not open): failed, no actor."""
        self.state, self.error = FAILED, reason
        self._latest = self.public = self._capture()

    def snapshot(self):
        """The public state as the API shows it (greenlet side)."""
        snap = self.public
        retry = None
        if snap["state"] == FAILED and snap["retry_at"] is not None:
            retry = {"attempt": snap["failures"],
                     "inMs": max(0, int((snap["retry_at"] - time.monotonic()) * 1000))}
        info = snap["server_info"]
        return {
            "state": snap["state"],
            "lastError": snap["error"],
            "tools": sorted(snap["tools"]),
            "catalogTools": sorted(name for name, _ in self.published.values()),
            "pid": snap["pid"],
            "serverInfo": {"name": info.name, "version": info.version} if info else None,
            "protocolVersion": snap["protocol_version"],
            "connectedAt": isoformat(snap["connected_at"]),
            "retry": retry,
        }

    # -- lifecycle (loop thread) -------------------------------------------------------------

    def start(self):
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = self._loop.create_task(self._run(), name=f"mcp:{self.id}")

    async def start_and_wait(self):
        """Start the actor and return the outcome of its first attempt (None or the error)."""
        self.start()
        return await self._next_outcome()

    async def restart_and_wait(self):
        """Close the session (if any) and connect again now; the new attempt's outcome."""
        waiter = self._next_outcome()
        self._restart = True
        self._interrupt()
        return await waiter

    def _next_outcome(self):
        future = self._loop.create_future()
        self._waiters.append(future)
        return future

    def _settle_waiters(self, outcome):
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(outcome)

    def _interrupt(self):
        if self._scope is not None and not self._connected:
            self._scope.cancel()  # still connecting: abandon the attempt
        self._wake.set()

    async def close(self):
        """Leave for good: the session closes (a STDIO child gets EOF, then SIGTERM, then SIGKILL)."""
        self._closing = True
        if self._task is None:
            return
        self._interrupt()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), self.settings.shutdown_timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._task, 3)

    async def _run(self):
        try:
            while not self._closing:
                reason = await self._attempt()
                if self._closing:
                    break
                if self._restart or reason is None:
                    self._restart = False
                    continue
                self.failures += 1
                delay = min(self.settings.backoff_cap, self.settings.backoff_base * 2 ** (self.failures - 1))
                self.retry_at = time.monotonic() + delay
                self._changed()
                await self._back_off(delay)
                self.retry_at = None
        finally:
            self.state, self.tools, self.pid = CLOSED, {}, None
            self._settle_waiters(self.error or "the connection was closed")
            self._changed()

    async def _back_off(self, delay):
        """Sleep ``delay`` unless a restart or close cuts it short (a stale wake-up does not)."""
        deadline = self._loop.time() + delay
        self._wake.clear()
        while not (self._closing or self._restart):
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self._wake.wait(), remaining)
            except asyncio.TimeoutError:
                return
            self._wake.clear()

    async def _attempt(self):
        self.state, self.retry_at, self.tools = CONNECTING, None, {}
        self._lost, self._connected, self._refresh, self._restart = None, False, False, False
        self._wake.clear()
        self._changed()
        SUBPROCESS_WATCH.set(self)
        reason = None
        errlog = None
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                scope.deadline = anyio.current_time() + self.settings.connect_timeout
                async with contextlib.AsyncExitStack() as stack:
                    if self.spec.transport == STDIO:
                        errlog = self._stderr_pipe()
                        stack.callback(errlog.close)
                    read, write = await self._open_transport(stack, errlog)
                    read = await self._watch_stream(stack, read)
                    session = await stack.enter_async_context(_Session(
                        read, write, read_timeout_seconds=timedelta(seconds=self.settings.request_timeout),
                        message_handler=self._on_message, client_info=CLIENT_INFO))
                    init = await session.initialize()
                    tools = await _all_pages(session.list_tools, "tools")
                    scope.deadline = math.inf
                    self._connected = True
                    self.server_info, self.protocol_version = init.serverInfo, str(init.protocolVersion)
                    self.capabilities = init.capabilities
                    self.tools = {t.name: t for t in tools}
                    self._session = session
                    self.state, self.error, self.failures = CONNECTED, None, 0
                    self.connected_at = datetime.now(timezone.utc)
                    self._changed()
                    self._settle_waiters(None)
                    reason = await self._serve(session)
            if scope.cancelled_caught and reason is None and not (self._closing or self._restart):
                reason = f"no answer within {self.settings.connect_timeout:g} s while connecting"
        except Exception as exc:
            reason = self._lost or describe(exc, self.spec)
        finally:
            self._scope, self._session, self._connected = None, None, False
            if errlog is not None and not errlog.closed:
                errlog.close()
            self._fail_inflight(reason or "the connection was closed")
        if self._closing or self._restart:
            return None
        reason = reason or "the session ended"
        self.state, self.error, self.tools = FAILED, reason, {}
        log.warning("MCP server %s (%s): %s", self.spec.name, self.id, reason)
        self._changed()
        self._settle_waiters(reason)
        return reason

    async def _open_transport(self, stack, errlog):
        spec, s = self.spec, self.settings
        if spec.transport == STDIO:
            params = StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env) or None,
                                           cwd=spec.cwd)
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            return read, write
        if spec.transport == SSE:
            read, write = await stack.enter_async_context(sse_client(
                spec.url, headers=dict(spec.headers), timeout=s.connect_timeout, sse_read_timeout=s.sse_read_timeout))
            return read, write
        client = create_mcp_http_client(headers=dict(spec.headers),
                                        timeout=httpx.Timeout(s.connect_timeout, read=s.sse_read_timeout))
        await stack.enter_async_context(client)
        read, write, _ = await stack.enter_async_context(streamable_http_client(spec.url, http_client=client))
        return read, write

    async def _watch_stream(self, stack, read):
        """Put a watcher between the transport and the session: the end of the stream is the end of the connection."""
        send, receive = anyio.create_memory_object_stream(64)
        group = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(group.cancel_scope.cancel)  # runs before the group exits (the stack unwinds backwards)
        group.start_soon(self._pump, read, send)
        return receive

    async def _pump(self, read, send):
        last_error = None
        try:
            async for item in read:
                if isinstance(item, Exception):
                    last_error = item
                await send.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        if self._closing or self._restart:
            await send.aclose()
            return
        reason = await self._ended_reason(last_error)
        if self._closing or self._restart:
            await send.aclose()
            return
        # Published before the session sees the end: a call failing now must find the state failed.
        self._lost = reason
        self.state, self.error, self.tools = FAILED, reason, {}
        self._changed()
        await send.aclose()
        self._wake.set()

    async def _ended_reason(self, last_error):
        if self.spec.transport != STDIO:
            text = "the server closed the connection"
            return f"{text}: {describe(last_error, self.spec)}" if last_error is not None else text
        pid = self._last_pid
        if pid is not None and pid not in self._exits:
            self._exited = asyncio.Event()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._exited.wait(), 1.0)
        code = self._exits.get(pid)
        if code is None:
            text = "the server process closed its output"
        elif code == 255:  # also what _reap reports when another reaper took the status
            text = "the server process exited"
        elif code < 0:
            text = f"the server process was killed by signal {-code}"
        else:
            text = f"the server process exited with code {code}"
        last = next((line for line in reversed(self.stderr_tail) if line.strip()), None)
        return f"{text} (stderr: {last})" if last else text

    async def _serve(self, session):
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.settings.ping_interval)
            except asyncio.TimeoutError:
                try:
                    with anyio.fail_after(self.settings.request_timeout):
                        await session.send_ping()
                except Exception as exc:
                    return self._lost or f"the server stopped answering: {describe(exc, self.spec)}"
                continue
            self._wake.clear()
            if self._closing or self._restart:
                return None
            if self._lost:
                return self._lost
            if self._refresh:
                self._refresh = False
                try:
                    tools = await _all_pages(session.list_tools, "tools")
                except Exception as exc:
                    if self._lost:
                        return self._lost
                    log.warning("MCP server %s: tools/list after list_changed failed: %s",
                                self.spec.name, describe(exc, self.spec))
                    continue
                self.tools = {t.name: t for t in tools}
                self._changed()

    async def _on_message(self, message):
        if isinstance(message, types.ServerNotification) and isinstance(message.root, types.ToolListChangedNotification):
            self._refresh = True
            self._wake.set()
        elif isinstance(message, Exception):
            log.debug("MCP server %s: transport reported %r", self.spec.name, message)

    # -- requests ----------------------------------------------------------------------------

    async def request(self, operation):
        """Run ``operation(session)`` on the live session, mapping its failures to this module's errors."""
        session = self._session
        if session is None or self.state != CONNECTED:
            retry_in = max(0.0, self.retry_at - time.monotonic()) if self.retry_at else None
            raise McpUnavailable(self.state, self.error, retry_in)
        task = asyncio.current_task()
        self._inflight.add(task)
        try:
            return await operation(session)
        except asyncio.CancelledError:
            reason = self._lost_tasks.pop(task, None)
            if reason is None:
                raise
            task.uncancel()
            raise McpConnectionLost(reason) from None
        except McpError as exc:
            error = exc.error
            if error.code == types.CONNECTION_CLOSED:
                raise McpConnectionLost(self._lost or "the connection to the server closed") from None
            if error.code == httpx.codes.REQUEST_TIMEOUT and error.message.startswith("Timed out"):
                raise McpCallTimeout(error.message) from None
            raise McpRemoteError(error.code, error.message) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise McpConnectionLost(self._lost or "the connection to the server closed") from None
        finally:
            self._inflight.discard(task)
            self._lost_tasks.pop(task, None)

    def _fail_inflight(self, reason):
        for task in list(self._inflight):
            if not task.done():
                self._lost_tasks[task] = reason
                task.cancel()

    async def call_tool(self, name, arguments, timeout):
        async def call(session):
            try:
                return await session.call_tool(name, arguments, read_timeout_seconds=timedelta(seconds=timeout))
            except RuntimeError as exc:  # how the SDK reports a result that breaks the tool's outputSchema
                raise McpBadResult(str(exc)) from None
        return await self.request(call)

    async def list_prompts(self):
        if self.capabilities is not None and self.capabilities.prompts is None and self._session is not None:
            return []
        return await self.request(lambda s: _all_pages(s.list_prompts, "prompts"))

    async def list_resources(self):
        if self.capabilities is not None and self.capabilities.resources is None and self._session is not None:
            return []
        return await self.request(lambda s: _all_pages(s.list_resources, "resources"))

    # -- child process and stderr (SUBPROCESS_WATCH) ------------------------------------------

    def spawned(self, pid):
        self.pid = self._last_pid = pid
        self._changed()

    def exited(self, pid, returncode):
        self._exits[pid] = returncode
        if len(self._exits) > 8:
            self._exits.pop(next(iter(self._exits)))
        if self.pid == pid:
            self.pid = None
            self._changed()
        if self._exited is not None:
            self._exited.set()

    def _stderr_pipe(self):
        """A pipe for the child's stderr: its last lines explain why a server died."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        self.stderr_tail.clear()
        buffer = bytearray()
        loop = self._loop

        def readable():
            try:
                chunk = os.read(read_fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                loop.remove_reader(read_fd)
                close_fd(read_fd)
                if buffer:
                    self._stderr_line(bytes(buffer))
                return
            buffer.extend(chunk)
            *lines, rest = bytes(buffer).split(b"\n")
            buffer[:] = rest[-4096:]
            for line in lines[-STDERR_LINES:]:
                self._stderr_line(line)

        loop.add_reader(read_fd, readable)
        # The write end goes to the child; stdio_client closes nothing of ours, the attempt closes it.
        return open(write_fd, "wb", buffering=0)

    def _stderr_line(self, raw):
        line = raw.decode("utf-8", "replace").rstrip()[:300]
        self.stderr_tail.append(line)
        log.debug("MCP server %s stderr: %s", self.spec.name, line)

    def _changed(self):
        self._latest = self._capture()
        self.manager.changed(self)


async def _all_pages(fetch, attr):
    items, cursor = [], None
    for _ in range(100):
        page = await (fetch(params=types.PaginatedRequestParams(cursor=cursor)) if cursor else fetch())
        items.extend(getattr(page, attr))
        cursor = page.nextCursor
        if not cursor or len(items) >= MAX_LISTED:
            break
    return items[:MAX_LISTED]


def _leaf(exc):
    """The first meaningful exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)] or list(exc.exceptions)
        exc = inner[0]
    return exc


def describe(exc, spec):
    """A one-line reason a person can act on; never a traceback."""
    exc = _leaf(exc)
    where = spec.url or spec.command
    if isinstance(exc, FileNotFoundError):
        if spec.cwd and exc.filename == spec.cwd:
            return f"the working directory {spec.cwd} does not exist"
        return f"cannot start {spec.command}: command not found"
    if isinstance(exc, PermissionError):
        return f"cannot start {spec.command}: permission denied"
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        hint = " (check the headers)" if status in (401, 403) else ""
        phrase = exc.response.reason_phrase or ""
        return f"the server answered HTTP {status} {phrase}".rstrip() + hint
    if isinstance(exc, httpx.ConnectTimeout):
        return f"cannot connect to {where}: timed out"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect to {where}: {_short(exc) or 'connection refused'}"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out talking to {where}"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return f"the connection to {where} broke: {_short(exc) or type(exc).__name__}"
    if isinstance(exc, McpError):
        return f"the server refused the request: {exc.error.message}"[:500]
    if isinstance(exc, OSError):
        return f"cannot start {spec.command}: {exc.strerror or exc}" if spec.transport == STDIO else \
            f"cannot reach {where}: {exc.strerror or exc}"
    if isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)):
        return "the connection to the server closed"
    return f"{type(exc).__name__}: {_short(exc)}"[:500]


def _short(exc):
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


async def close_all(conns):
    """Close connections side by side (a shutdown waits for the slowest, not the sum)."""
    await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
