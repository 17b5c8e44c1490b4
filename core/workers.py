"""Runtime-plugin workers: one child process per plugin speaking newline-delimited JSON-RPC on stdio."""
import collections
import itertools
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

import gevent
from gevent import subprocess
from gevent.event import AsyncResult
from gevent.lock import BoundedSemaphore

from .db import isoformat, utcnow

log = logging.getLogger("agenthost.workers")

PROTOCOL_VERSION = "2025-06-18"
MAX_LINE = 16 * 1024 * 1024

# Fault categories a worker can be in.
CRASHED, OUT_OF_MEMORY, FRAMING, HANDSHAKE, TIMEOUT, RUNTIME_MISSING, SPAWN_FAILED = (
    "crashed", "out-of-memory", "framing", "handshake", "timeout", "runtime-missing", "spawn-failed")

# JSON-RPC error codes we answer worker requests with.
METHOD_NOT_FOUND, INVALID_PARAMS, PERMISSION_DENIED = -32601, -32602, -32001

MCP_LEVELS = {"TRACE": "debug", "DEBUG": "debug", "INFO": "info", "WARN": "warning", "ERROR": "error"}
# Worker log levels (MCP's syslog names, Python's, Java's) folded into the settings vocabulary.
LOG_LEVELS = {"TRACE": "TRACE", "FINEST": "TRACE", "FINER": "TRACE", "DEBUG": "DEBUG", "FINE": "DEBUG",
              "INFO": "INFO", "NOTICE": "INFO", "CONFIG": "INFO", "WARN": "WARN", "WARNING": "WARN",
              "ERROR": "ERROR", "SEVERE": "ERROR", "CRITICAL": "ERROR", "FATAL": "ERROR",
              "ALERT": "ERROR", "EMERGENCY": "ERROR"}
MAX_LOG_MESSAGE = 16 * 1024


class WorkerFault(Exception):
    """The worker is unusable (it died, broke the framing, hung); pending calls fail with this."""

    def __init__(self, category, message):
        super().__init__(message)
        self.category = category
        self.message = message


class WorkerCallError(Exception):
    """The worker answered a call with a JSON-RPC error."""

    def __init__(self, code, message, data=None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


class CallCancelled(Exception):
    """The call was cancelled by the client."""


class CallIdInUse(ValueError):
    """A call with the same correlation id is still in flight on this worker."""


@dataclass
class RuntimeSpec:
    """What the supervisor needs to run one plugin."""

    id: str
    name: str
    version: str
    runtime: str  # python | node | java | command
    main: str | None
    install_dir: str
    data_dir: str
    command: list | None = None
    permissions: list = field(default_factory=list)


def command_for(spec):
    """The argv that starts the worker, or raise WorkerFault(runtime-missing)."""
    main = os.path.abspath(os.path.join(spec.install_dir, spec.main)) if spec.main else None
    if spec.runtime == "python":
        return [sys.executable, main]
    if spec.runtime == "node":
        exe = shutil.which("node")
        if not exe:
            raise WorkerFault(RUNTIME_MISSING, "the node runtime is not installed on this machine")
        return [exe, main]
    if spec.runtime == "java":
        exe = shutil.which("java")
        if not exe:
            raise WorkerFault(RUNTIME_MISSING, "the java runtime is not installed on this machine")
        return [exe, "-jar", main] if main.endswith(".jar") else [exe, main]
    if spec.runtime == "command":
        argv = list(spec.command or [])
        if not argv:
            raise WorkerFault(SPAWN_FAILED, "the manifest's command is empty")
        first = argv[0]
        local = os.path.join(spec.install_dir, first)
        if os.path.exists(local):
            argv[0] = local
        elif not shutil.which(first):
            raise WorkerFault(RUNTIME_MISSING, f"the command {first!r} is not installed on this machine")
        return argv
    raise WorkerFault(RUNTIME_MISSING, f"unknown runtime {spec.runtime!r}")


def worker_env(spec):
    """A minimal environment: no host secrets leak into plugin processes."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": spec.data_dir,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONUNBUFFERED": "1",
        "PYTHONIOENCODING": "utf-8",
        "AGENTHOST_PLUGIN_ID": spec.id,
        "AGENTHOST_PLUGIN_DATA": spec.data_dir,
    }


class LogRing:
    """Recent log events of one plugin, with a per-plugin sequence, fanned out on the event bus."""

    def __init__(self, plugin_id, events, size=500):
        self.plugin_id = plugin_id
        self.bus = events
        self.events = collections.deque(maxlen=size)
        self._seq = itertools.count(1)
        self.channel = f"plugin-logs:{plugin_id}"

    def add(self, level, message, logger=None, thread=None, timestamp=None):
        # Workers send whatever they like: every field becomes a bounded string (or null).
        event = {
            "timestamp": _text(timestamp, 64) or isoformat(utcnow()),
            "level": LOG_LEVELS.get(str(level or "INFO").upper(), "INFO"),
            "logger": _text(logger, 200),
            "thread": _text(thread, 200),
            "message": _text(message, MAX_LOG_MESSAGE) or "",
            "sequence": next(self._seq),
        }
        self.events.append(event)
        self.bus.publish_item(self.channel, ("log", event, event["sequence"]))
        return event

    def add_stderr_line(self, line):
        """A JSON object line is a structured event; anything else is a legacy event."""
        text = line.rstrip("\r\n")
        if not text:
            return None
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and "message" in obj:
                return self.add(obj.get("level", "INFO"), obj["message"], obj.get("logger"),
                                obj.get("thread"), obj.get("timestamp"))
        return self.add("INFO", text)

    def recent(self, limit=None, after=None):
        items = list(self.events)
        if after is not None:
            items = [e for e in items if e["sequence"] > after]
        return items[-limit:] if limit else items


def _text(value, limit):
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:limit]


class Worker:
    """One live child process and its JSON-RPC session."""

    def __init__(self, spec, argv, *, env, on_request, on_log, on_exit, on_fault=None, log_level="INFO"):
        self.spec = spec
        self.argv = argv
        self.env = env
        self.on_request = on_request  # (worker, method, params) -> result or raise WorkerCallError
        self.on_log = on_log          # LogRing
        self.on_exit = on_exit        # (worker, fault or None), once the process is gone
        self.on_fault = on_fault      # (worker, fault), the moment the worker becomes unusable
        self.log_level = log_level
        self.proc = None
        self.pending = {}
        self.fault = None
        self.stopping = False
        self.server_info = None
        self.capabilities = {}
        self._ids = itertools.count(1)
        self._write_lock = BoundedSemaphore()
        self._greenlets = []
        self._stderr_tail = collections.deque(maxlen=20)
        self.started_at = None
        self.handshaking = False

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None and self.fault is None

    def start(self, handshake_timeout):
        try:
            self.proc = subprocess.Popen(
                self.argv, cwd=self.spec.install_dir, env=self.env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                close_fds=True, start_new_session=True)
        except OSError as exc:
            raise WorkerFault(SPAWN_FAILED, f"the worker could not be started: {exc.strerror}") from None
        self.started_at = time.time()
        self._greenlets = [gevent.spawn(self._read_stdout), gevent.spawn(self._read_stderr),
                           gevent.spawn(self._wait_exit)]
        self.handshaking = True
        try:
            result = self.request("initialize", {
                "protocolVersion": PROTOCOL_VERSION,
                "clientInfo": {"name": "agenthost", "version": "0.1.0"},
                "capabilities": {},
                "_meta": {"agenthost": {"pluginId": self.spec.id, "dataDir": self.spec.data_dir,
                                        "logLevel": self.log_level}},
            }, timeout=handshake_timeout, fault_on_timeout=HANDSHAKE)
        except WorkerCallError as exc:
            self._fail(WorkerFault(HANDSHAKE, f"initialize was refused: {exc.message}"))
            raise self.fault from None
        except WorkerFault as exc:
            if exc.category in (CRASHED, OUT_OF_MEMORY):
                exc = WorkerFault(HANDSHAKE, f"the worker exited during initialize ({exc.message})")
                self._fail(exc)
            raise exc from None
        finally:
            self.handshaking = False
        version = (result or {}).get("protocolVersion") if isinstance(result, dict) else None
        if version != PROTOCOL_VERSION:
            self._fail(WorkerFault(HANDSHAKE, f"protocol version mismatch: host speaks {PROTOCOL_VERSION}, "
                                              f"worker answered {version!r}"))
            raise self.fault
        self.server_info = result.get("serverInfo")
        capabilities = result.get("capabilities")
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}
        self.send_notification("notifications/initialized", {})

    # -- sending -------------------------------------------------------------------------

    def _write(self, message):
        line = json.dumps(message, separators=(",", ":")) + "\n"
        with self._write_lock:
            if self.fault is not None:
                raise self.fault
            try:
                self.proc.stdin.write(line.encode("utf-8"))
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                raise WorkerFault(CRASHED, "the worker's input pipe is closed") from None

    def send_notification(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self._write(msg)

    def request(self, method, params=None, *, timeout=30, call_id=None, fault_on_timeout=TIMEOUT):
        """Send a request and wait for its answer (other greenlets' calls pipeline meanwhile)."""
        if call_id is None:
            req_id = next(self._ids)
            while req_id in self.pending:  # a client's numeric callId may hold the next number
                req_id = next(self._ids)
        else:
            req_id = call_id
            if req_id in self.pending:
                raise CallIdInUse(f"call id {req_id!r} is already in flight")
        waiter = AsyncResult()
        self.pending[req_id] = waiter
        try:
            msg = {"jsonrpc": "2.0", "id": req_id, "method": method}
            if params is not None:
                msg["params"] = params
            self._write(msg)
            try:
                return waiter.get(timeout=timeout)
            except gevent.Timeout:
                self._fail(WorkerFault(fault_on_timeout, f"{method} got no answer within {timeout:g} s"))
                raise self.fault from None
        finally:
            self.pending.pop(req_id, None)

    def cancel(self, call_id):
        waiter = self.pending.get(call_id)
        if waiter is None:
            return False
        try:
            self.send_notification("notifications/cancelled", {"requestId": call_id, "reason": "cancelled"})
        except WorkerFault:
            pass
        waiter.set_exception(CallCancelled("the call was cancelled"))
        return True

    # -- receiving -----------------------------------------------------------------------

    def _read_stdout(self):
        stdout = self.proc.stdout
        while True:
            try:
                raw = stdout.readline(MAX_LINE + 1)
            except (OSError, ValueError):
                return
            if not raw:
                return
            if len(raw) > MAX_LINE:
                self._fail(WorkerFault(FRAMING, "the worker wrote a line over 16 MiB to standard output"))
                return
            text = raw.decode("utf-8", "replace").strip()
            if not text:
                continue
            try:
                message = json.loads(text)
                if not isinstance(message, dict):
                    raise ValueError
            except ValueError:
                self._fail(WorkerFault(FRAMING, "the worker wrote a non-JSON-RPC line to standard output: "
                                                + text[:120]))
                return
            self._dispatch(message)

    def _dispatch(self, message):
        if "method" in message:
            if "id" in message:
                gevent.spawn(self._answer, message)
            else:
                self._notification(message)
            return
        waiter = self.pending.get(message.get("id"))
        if waiter is None or waiter.ready():
            return  # a late answer to a cancelled or timed-out call
        if "error" in message:
            err = message.get("error") or {}
            waiter.set_exception(WorkerCallError(err.get("code", -32603), str(err.get("message", "error")),
                                                 err.get("data")))
        else:
            waiter.set(message.get("result"))

    def _notification(self, message):
        if message["method"] == "notifications/message":
            params = message.get("params") or {}
            data = params.get("data")
            text = data if isinstance(data, str) else json.dumps(data)
            self.on_log.add(params.get("level", "info"), text, params.get("logger"), None)

    def _answer(self, message):
        reply = {"jsonrpc": "2.0", "id": message["id"]}
        try:
            reply["result"] = self.on_request(self, message["method"], message.get("params") or {})
        except WorkerCallError as exc:
            reply["error"] = {"code": exc.code, "message": exc.message}
        except Exception:
            log.exception("host request %s from %s failed", message.get("method"), self.spec.id)
            reply["error"] = {"code": -32603, "message": "internal error in the host"}
        try:
            self._write(reply)
        except WorkerFault:
            pass

    def _read_stderr(self):
        stderr = self.proc.stderr
        while True:
            try:
                raw = stderr.readline(64 * 1024)
            except (OSError, ValueError):
                return
            if not raw:
                return
            line = raw.decode("utf-8", "replace")
            self._stderr_tail.append(line)
            self.on_log.add_stderr_line(line)

    def _wait_exit(self):
        code = self.proc.wait()
        # Let the readers drain what the worker wrote before it died.
        gevent.joinall(self._greenlets[:2], timeout=1)
        if self.fault is None and not self.stopping:
            tail = "".join(self._stderr_tail)
            if self.handshaking:
                fault = WorkerFault(HANDSHAKE, f"the worker exited during initialize (exit {code})")
            elif code in (-9, 137) or "MemoryError" in tail or "out of memory" in tail.lower():
                fault = WorkerFault(OUT_OF_MEMORY, f"the worker ran out of memory (exit {code})")
            else:
                fault = WorkerFault(CRASHED, f"the worker exited unexpectedly (exit {code})")
            self._fail(fault, kill=False)
        elif self.fault is None:
            self._fail_pending(WorkerFault(CRASHED, "the worker was stopped"))
        self.on_exit(self, self.fault)

    # -- ending --------------------------------------------------------------------------

    def _fail(self, fault, kill=True):
        first = self.fault is None
        if first:
            self.fault = fault
        self._fail_pending(self.fault)
        if first and self.on_fault is not None and not self.stopping:
            self.on_fault(self, fault)
        if kill:
            self._kill()

    def _fail_pending(self, fault):
        for waiter in list(self.pending.values()):
            if not waiter.ready():
                waiter.set_exception(fault)

    def _kill(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            try:
                self.proc.kill()
            except OSError:
                pass

    def stop(self, grace=1.0):
        """Ask the worker to finish (close stdin), then kill it; waits until it is gone."""
        self.stopping = True
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._kill()
                self.proc.wait(timeout=5)
        self._fail_pending(WorkerFault(CRASHED, "the worker was stopped"))
        gevent.joinall(self._greenlets, timeout=2)
        for stream in (self.proc.stdout, self.proc.stderr, self.proc.stdin):
            try:
                stream.close()
            except OSError:
                pass
