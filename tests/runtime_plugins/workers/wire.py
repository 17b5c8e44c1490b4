"""Worker side of the protocol for the test workers; each test package carries it as ``wire.py``.

Standard library only. ``serve(handle)`` answers requests from stdin; ``handle(method, params)``
returns a result, raises ``RpcError``, or returns ``SILENT`` to leave the request unanswered.
"""
import json
import os
import sys
import threading

PROTOCOL_VERSION = "2025-06-18"
SILENT = object()
_out = threading.Lock()


class RpcError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


def armed():
    """True once a test put an ``armed`` file in the plugin's data folder: misbehave from then on.

    Install health checks run before any test can arm a worker, so a misbehaving worker
    still installs and shows its fault on the first real spawn.
    """
    return os.path.exists(os.path.join(os.environ.get("AGENTHOST_PLUGIN_DATA", "."), "armed"))


def send(message):
    with _out:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def log_line(text):
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def initialize_result(version=PROTOCOL_VERSION, tools=False):
    caps = {"logging": {}}
    if tools:
        caps["tools"] = {}
    return {"protocolVersion": version, "capabilities": caps, "serverInfo": {"name": "test", "version": "1"}}


def standard(method, params):
    if method == "initialize":
        return initialize_result()
    if method == "ping":
        return {}
    raise RpcError(-32601, f"method not found: {method}")


def _serve_one(handle, msg):
    try:
        result = handle(msg["method"], msg.get("params") or {})
    except RpcError as exc:
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": exc.code, "message": exc.message}})
        return
    if result is not SILENT:
        send({"jsonrpc": "2.0", "id": msg["id"], "result": result})


def serve(handle=standard, threaded=False):
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if "id" not in msg or "method" not in msg:
            continue  # notifications and answers
        if threaded:
            threading.Thread(target=_serve_one, args=(handle, msg), daemon=True).start()
        else:
            _serve_one(handle, msg)
