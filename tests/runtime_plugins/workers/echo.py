"""A well-behaved test worker: echo, a barrier that proves pipelining, errors, logs, a call that never ends."""
import json
import os
import sys
import threading

import wire

_arrived = {}
_cond = threading.Condition()
_initialize = {}


def gather(params):
    """Answer only once ``n`` calls with the same ``key`` are in flight at the same time."""
    key, n = params.get("key", "k"), int(params["n"])
    with _cond:
        _arrived[key] = _arrived.get(key, 0) + 1
        _cond.notify_all()
        if not _cond.wait_for(lambda: _arrived[key] >= n, timeout=10):
            raise wire.RpcError(-32000, "not enough concurrent calls arrived")
    return {"gathered": n}


def emit_logs(params):
    tag = params.get("tag", "t")
    sys.stderr.write(json.dumps({"level": "WARN", "logger": "echo.worker", "thread": "main-1",
                                 "message": f"structured {tag}", "timestamp": "2024-05-01T10:00:00Z"}) + "\n")
    sys.stderr.write(f"legacy line {tag}\n")
    sys.stderr.flush()
    wire.send({"jsonrpc": "2.0", "method": "notifications/message",
               "params": {"level": "error", "logger": "echo.mcp", "data": f"mcp {tag}"}})
    return {}


def handle(method, params):
    if method == "initialize":
        _initialize.update(params)
        return wire.initialize_result()
    if method == "initialize-params":
        return _initialize
    if method == "echo":
        return {"echo": params}
    if method == "pid":
        return {"pid": os.getpid()}
    if method == "gather":
        return gather(params)
    if method == "fail":
        raise wire.RpcError(-32050, "the widget is broken")
    if method == "hold":
        return wire.SILENT  # never answers: only cancel or the call timeout ends it
    if method == "logs":
        return emit_logs(params)
    return wire.standard(method, params)


if __name__ == "__main__":
    wire.serve(handle, threaded=True)
