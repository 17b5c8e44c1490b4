"""The worker supervisor: lazy spawn, calls, cancel, crash handling with backoff, and plugin tools."""
import collections
import logging
import os
import re
import time

import gevent
from gevent.lock import RLock
from marshmallow import ValidationError

from .tools import Tool, ToolError
from .workers import (INVALID_PARAMS, MCP_LEVELS, METHOD_NOT_FOUND, PERMISSION_DENIED, CallCancelled, CallIdInUse,
                      LogRing, Worker, WorkerCallError, WorkerFault, command_for, worker_env)

log = logging.getLogger("agenthost.supervisor")

STOPPED, STARTING, RUNNING, FAULTED, CRASH_LOOP, DISABLED = (
    "stopped", "starting", "running", "faulted", "crash-loop", "disabled")


class PluginUnavailable(Exception):
    """The plugin cannot take calls now (disabled, crash loop, backing off)."""

    def __init__(self, code, message, retry_after=None):
        super().__init__(message)
        self.code, self.message, self.retry_after = code, message, retry_after


def tool_name(plugin_id, name):
    """A stable catalog name for a plugin's tool: ``<plugin>__<tool>``, sanitised to the name rules."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", plugin_id.split(".")[-1] if len(plugin_id) > 24 else plugin_id)
    base = re.sub(r"[^A-Za-z0-9_-]+", "_", name)
    return f"{slug}__{base}"[:64]


class ManagedPlugin:
    def __init__(self, spec, logs):
        self.spec = spec
        self.state = STOPPED
        self.worker = None
        self.fault = None  # {"category", "message", "at"}
        self.restarts = 0
        self.crashes = collections.deque()
        self.backoff_until = 0.0
        self.backoff_seconds = 0.0
        self.logs = logs
        self.lock = RLock()
        self.tools = []  # catalog names
        self.calls = {}  # callId -> worker
        self.faulted_worker = None  # the worker whose fault is recorded (reported once)


class WorkerSupervisor:
    """One child process per enabled runtime plugin."""

    def __init__(self, host, *, handshake_timeout=10.0, call_timeout=30.0, backoff_base=0.5,
                 backoff_cap=30.0, crash_limit=3, crash_window=300.0, ring_size=500, on_tools=None):
        self.host = host
        self.on_tools = on_tools  # (spec, tools) after each tools/list, e.g. to cache them
        self.handshake_timeout = handshake_timeout
        self.call_timeout = call_timeout
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.crash_limit = crash_limit
        self.crash_window = crash_window
        self.ring_size = ring_size
        self.plugins = {}
        # Log rings outlive a plugin's membership (disable, enable, update), so the sequence
        # keeps rising for open log streams and a disabled plugin's last words stay readable.
        self.rings = {}
        self.log_level = None  # None: follow the host's own log level
        self.closed = False  # set at host shutdown: no worker spawns after it

    # -- membership ----------------------------------------------------------------------

    def add(self, spec, tools=None):
        """Track an enabled plugin (no process yet). ``tools`` is a cached tools/list result."""
        managed = self.plugins.get(spec.id)
        if managed is None:
            managed = self.plugins[spec.id] = ManagedPlugin(spec, self.ring(spec.id))
        else:
            managed.spec = spec
        if tools:
            self._publish_tools(managed, tools)
        return managed

    def remove(self, plugin_id):
        """Stop and forget a plugin (disable, uninstall); its tools leave the catalog."""
        managed = self.plugins.pop(plugin_id, None)
        if managed is None:
            return False
        self._stop_worker(managed)
        self._withdraw_tools(managed)
        return True

    def get(self, plugin_id):
        return self.plugins.get(plugin_id)

    def ring(self, plugin_id):
        """The plugin's log ring, created on first use."""
        ring = self.rings.get(plugin_id)
        if ring is None:
            ring = self.rings[plugin_id] = LogRing(plugin_id, self.host.events, self.ring_size)
        return ring

    def forget(self, plugin_id):
        """Remove a plugin and its logs (uninstall)."""
        self.remove(plugin_id)
        self.rings.pop(plugin_id, None)

    # -- calls ---------------------------------------------------------------------------

    def ensure(self, plugin_id):
        """The running worker of a plugin, spawning it (once) when needed."""
        if self.closed:
            raise PluginUnavailable("plugin_runtime_stopped", "the host is shutting down")
        managed = self.plugins.get(plugin_id)
        if managed is None:
            raise PluginUnavailable("plugin_not_enabled", "the plugin is not installed or not enabled")
        with managed.lock:
            if managed.worker is not None and managed.worker.alive:
                return managed.worker
            if managed.state == CRASH_LOOP:
                raise PluginUnavailable("plugin_crash_loop",
                                        "the worker crashed repeatedly; disable and enable the plugin to restart it")
            wait = managed.backoff_until - time.monotonic()
            if wait > 0:
                if wait > 5:
                    raise PluginUnavailable("plugin_backing_off", "the worker is restarting after a crash",
                                            retry_after=int(wait) + 1)
                gevent.sleep(wait)
            worker = self._spawn(managed)
            if self.closed or self.plugins.get(plugin_id) is not managed:
                # Disabled, uninstalled or shut down while this spawn slept or started:
                # nobody would ever stop this worker, so stop it now.
                self._stop_worker(managed)
                raise PluginUnavailable("plugin_not_enabled", "the plugin was disabled while its worker started")
            return worker

    def _spawn(self, managed):
        spec = managed.spec
        managed.state = STARTING
        if managed.fault is not None:
            managed.restarts += 1
        os.makedirs(spec.data_dir, exist_ok=True)
        env = worker_env(spec)
        managed.worker = None
        try:
            argv = command_for(spec)
            worker = Worker(spec, argv, env=env, on_request=self._host_request, on_log=managed.logs,
                            on_exit=lambda w, fault: self._exited(managed, w),
                            on_fault=lambda w, fault: self._record_fault(managed, w, fault),
                            log_level=self.current_log_level())
            managed.worker = worker
            worker.start(self.handshake_timeout)
        except WorkerFault as fault:
            self._record_fault(managed, managed.worker, fault)
            raise
        managed.state = RUNNING
        managed.fault = None
        if worker.capabilities.get("tools") is not None:
            try:
                listed = worker.request("tools/list", {}, timeout=self.handshake_timeout)
                tools = listed.get("tools") if isinstance(listed, dict) else None
                tools = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
                self._publish_tools(managed, tools)
                if self.on_tools is not None:
                    self.on_tools(spec, tools)
            except (WorkerCallError, WorkerFault) as exc:
                managed.logs.add("WARN", f"tools/list failed: {exc}")
        return worker

    def invoke(self, plugin_id, method, params=None, *, call_id=None, timeout=None):
        """A JSON-RPC call to the plugin's worker; raises WorkerCallError / WorkerFault / CallCancelled."""
        worker = self.ensure(plugin_id)
        managed = self.plugins[plugin_id]
        if call_id is not None:
            if call_id in managed.calls:
                raise CallIdInUse(f"call id {call_id!r} is already in flight")
            managed.calls[call_id] = worker
        try:
            return worker.request(method, params, timeout=timeout or self.call_timeout, call_id=call_id)
        finally:
            if call_id is not None:
                managed.calls.pop(call_id, None)

    def cancel(self, plugin_id, call_id):
        """Cancel a tracked call and tear that worker down; the next invoke respawns it."""
        managed = self.plugins.get(plugin_id)
        if managed is None:
            return False
        worker = managed.calls.get(call_id)
        if worker is None:
            return False
        worker.cancel(call_id)
        self._stop_worker(managed)
        return True

    def call_tool(self, plugin_id, name, arguments, timeout=None):
        result = self.invoke(plugin_id, "tools/call", {"name": name, "arguments": arguments}, timeout=timeout)
        if isinstance(result, dict) and result.get("isError"):
            raise ToolError(_content_text(result) or f"{name} failed")
        return result

    # -- live settings -------------------------------------------------------------------

    def current_log_level(self):
        if self.log_level:
            return self.log_level
        level = logging.getLogger("agenthost").getEffectiveLevel()
        return {5: "TRACE", logging.DEBUG: "DEBUG", logging.WARNING: "WARN",
                logging.ERROR: "ERROR"}.get(level, "INFO")

    def set_log_level(self, level):
        self.log_level = level
        for managed in list(self.plugins.values()):
            worker = managed.worker
            if worker is not None and worker.alive:
                gevent.spawn(self._send_level, worker, level)

    @staticmethod
    def _send_level(worker, level):
        try:
            worker.request("logging/setLevel", {"level": MCP_LEVELS.get(level, "info")}, timeout=5)
        except (WorkerCallError, WorkerFault, CallCancelled):
            pass  # a worker without logging support keeps its level

    # -- status --------------------------------------------------------------------------

    def status(self, plugin_id):
        managed = self.plugins.get(plugin_id)
        return None if managed is None else self._status(managed)

    def statuses(self):
        return [self._status(m) for m in self.plugins.values()]

    def _status(self, managed):
        worker = managed.worker
        remaining = max(0.0, managed.backoff_until - time.monotonic())
        return {
            "pluginId": managed.spec.id,
            "state": managed.state,
            "fault": managed.fault,
            "runtime": managed.spec.runtime,
            "pid": worker.pid if worker is not None and worker.alive else None,
            "restarts": managed.restarts,
            "backoff": {"active": remaining > 0, "remainingMs": int(remaining * 1000),
                        "lastDelayMs": int(managed.backoff_seconds * 1000)},
            "sandbox": {"isolation": "process", "filesystem": "unrestricted", "network": "unrestricted"},
            "tools": list(managed.tools),
        }

    # -- stopping ------------------------------------------------------------------------

    def stop_all(self):
        """Host shutdown: stop every worker (side by side, each gets its grace period) and spawn no more."""
        self.closed = True
        gevent.joinall([gevent.spawn(self._stop_worker, m) for m in list(self.plugins.values())])

    def _stop_worker(self, managed):
        worker = managed.worker
        if worker is not None:
            worker.stop()
        with managed.lock:
            if managed.worker is worker:
                managed.worker = None
                if managed.state in (RUNNING, STARTING):
                    managed.state = STOPPED

    # -- faults --------------------------------------------------------------------------

    def _exited(self, managed, worker):
        if managed.worker is worker and managed.state in (RUNNING, STARTING):
            managed.state = STOPPED

    def _record_fault(self, managed, worker, fault):
        if worker is not None:
            if managed.faulted_worker is worker:
                return  # the same worker's fault, reported twice (start failure, then its exit)
            managed.faulted_worker = worker
        now = time.monotonic()
        managed.fault = {"category": fault.category, "message": fault.message,
                         "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        managed.logs.add("ERROR", f"worker fault ({fault.category}): {fault.message}", "agenthost.supervisor")
        managed.crashes.append(now)
        while managed.crashes and now - managed.crashes[0] > self.crash_window:
            managed.crashes.popleft()
        if len(managed.crashes) >= self.crash_limit:
            managed.state = CRASH_LOOP
            managed.backoff_until = 0.0
            log.warning("plugin %s is in a crash loop; stopped", managed.spec.id)
        else:
            managed.state = FAULTED
            managed.backoff_seconds = min(self.backoff_cap,
                                          self.backoff_base * (2 ** (len(managed.crashes) - 1)))
            managed.backoff_until = now + managed.backoff_seconds

    # -- the host side of the protocol ---------------------------------------------------

    def _host_request(self, worker, method, params):
        spec = worker.spec
        if method == "host/notify":
            if "notify" not in spec.permissions:
                raise WorkerCallError(PERMISSION_DENIED, "the plugin lacks the notify permission")
            center = self.host.service("notifications")
            if center is None:
                raise WorkerCallError(-32000, "notifications are unavailable")
            level = params.get("level", "info")
            title = str(params.get("title") or "").strip()
            if level not in ("info", "success", "warning", "error") or not title:
                raise WorkerCallError(INVALID_PARAMS, "host/notify needs a level (info|success|warning|error) and a title")
            body, link = params.get("body"), params.get("link")
            try:
                note = center.create(source=f"plugin:{spec.id}", level=level,
                                     title=f"{spec.name}: {title}"[:200],
                                     body=str(body)[:4000] if body is not None else None,
                                     link=str(link)[:2048] if link is not None else None)
            except ValidationError as exc:  # e.g. control characters the center refuses to store
                fields = ", ".join(sorted(exc.messages)) if isinstance(exc.messages, dict) else "params"
                raise WorkerCallError(INVALID_PARAMS, f"host/notify refused: invalid {fields}") from None
            return {"id": note["id"]}
        if method == "host/ping":
            return {}
        handler = self.host.service(f"host-method:{method}")
        if handler is not None:
            return handler(spec, params)
        raise WorkerCallError(METHOD_NOT_FOUND, f"the host has no method {method}")

    # -- tools ---------------------------------------------------------------------------

    def _publish_tools(self, managed, tools):
        self._withdraw_tools(managed)
        plugin_id = managed.spec.id
        for entry in tools:
            name = entry.get("name")
            if not isinstance(name, str):
                continue
            schema = entry.get("inputSchema") or {"type": "object"}
            try:
                tool = Tool(tool_name(plugin_id, name), entry.get("description") or name, schema,
                            handler=self._tool_handler(plugin_id, name),
                            retry_safe=bool((entry.get("annotations") or {}).get("idempotentHint")),
                            source=f"plugin:{plugin_id}")
                self.host.tools.add(tool)
            except ValueError as exc:
                managed.logs.add("WARN", f"tool {name!r} not added to the catalog: {exc}")
                continue
            managed.tools.append(tool.name)

    def _withdraw_tools(self, managed):
        for name in managed.tools:
            self.host.tools.remove(name)
        managed.tools = []

    def _tool_handler(self, plugin_id, name):
        def handler(arguments, ctx):
            try:
                return self.call_tool(plugin_id, name, arguments)
            except WorkerCallError as exc:
                raise ToolError(exc.message) from None
            except (WorkerFault, PluginUnavailable) as exc:
                raise ToolError(f"plugin {plugin_id}: {exc}") from None
        return handler


def _content_text(result):
    parts = result.get("content") or []
    return " ".join(p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type") == "text")
