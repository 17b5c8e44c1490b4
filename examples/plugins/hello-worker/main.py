"""A minimal agenthost worker: newline-delimited JSON-RPC 2.0 on stdin/stdout, logs on stderr.

Standard library only, so it runs with any Python 3.
"""
import datetime
import itertools
import json
import sys
import threading

PROTOCOL_VERSION = "2025-06-18"
_ids = itertools.count(1)
_out = threading.Lock()
_waiting = {}
_level = "info"

TOOLS = [{
    "name": "greet",
    "description": "Greet someone by name.",
    "inputSchema": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1}},
                    "required": ["name"], "additionalProperties": False},
    "annotations": {"idempotentHint": True},
}]


def send(message):
    with _out:  # one JSON object per line, nothing else ever goes to stdout
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def log(level, message):
    """Structured log event on stderr."""
    sys.stderr.write(json.dumps({"level": level, "logger": "hello", "thread": threading.current_thread().name,
                                 "message": message,
                                 "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat()}) + "\n")
    sys.stderr.flush()


def ask_host(method, params):
    """A request to the host (e.g. host/notify); waits for its answer."""
    req_id = f"w{next(_ids)}"
    done = threading.Event()
    _waiting[req_id] = [done, None]
    send({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
    done.wait(10)
    return _waiting.pop(req_id)[1]


def handle(msg):
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        meta = (params.get("_meta") or {}).get("agenthost", {})
        log("INFO", f"initialize for {meta.get('pluginId')}")
        return {"protocolVersion": PROTOCOL_VERSION, "capabilities": {"tools": {}, "logging": {}},
                "serverInfo": {"name": "hello", "version": "1.0.0"}}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        if params.get("name") != "greet":
            raise LookupError(f"unknown tool {params.get('name')}")
        name = (params.get("arguments") or {}).get("name", "world")
        log("INFO", f"greeting {name}")
        return {"content": [{"type": "text", "text": f"Hello, {name}!"}], "isError": False}
    if method == "logging/setLevel":
        global _level
        _level = params.get("level", "info")
        log("INFO", f"log level is now {_level}")
        return {}
    if method == "hello/notify":
        answer = ask_host("host/notify", {"level": "success", "title": params.get("title", "Hi"),
                                          "body": params.get("body")})
        return {"notified": answer}
    if method == "hello/echo":
        return {"echo": params}
    raise LookupError(f"method not found: {method}")


def serve(msg):
    try:
        result = handle(msg)
        send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
    except LookupError as exc:
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": str(exc)}})
    except Exception as exc:  # noqa: BLE001 - a worker answers every request
        log("ERROR", f"{msg.get('method')} failed: {exc}")
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32603, "message": str(exc)}})


WAITS_ON_HOST = {"hello/notify"}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if "method" not in msg:  # an answer to one of our host/ requests
            slot = _waiting.get(msg.get("id"))
            if slot:
                slot[1] = msg.get("result", msg.get("error"))
                slot[0].set()
            continue
        if "id" not in msg:
            continue  # notifications: initialized, cancelled
        if msg.get("method") in WAITS_ON_HOST:
            # It asks the host something and waits: on a thread, so the reader keeps reading answers.
            threading.Thread(target=serve, args=(msg,), daemon=True).start()
        else:
            serve(msg)  # quick calls answer at once: no thread start, no GIL hand-off


if __name__ == "__main__":
    main()
