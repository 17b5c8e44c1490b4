"""A test worker for the plugin-files tests: asks the host for its FileRefs and reads and writes them.

Standard library only; it is copied into each test package as main.py.
"""
import itertools
import json
import os
import sys
import threading

PROTOCOL_VERSION = "2025-06-18"
_ids = itertools.count(1)
_out = threading.Lock()
_waiting = {}
_grants = []  # params of every notifications/agenthost/files, in arrival order


def send(message):
    with _out:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def ask_host(method, params):
    req_id = f"w{next(_ids)}"
    done = threading.Event()
    _waiting[req_id] = [done, None]
    send({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
    done.wait(10)
    return _waiting.pop(req_id)[1]


def held(ref):
    for entry in ask_host("host/files/list", {})["refs"]:
        if entry["ref"] == ref:
            return entry
    raise KeyError(f"not a ref of this plugin: {ref}")


def handle(method, params):
    if method == "initialize":
        return {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                "serverInfo": {"name": "files-test", "version": "1.0.0"}}
    if method == "ping":
        return {}
    if method == "files/list":
        return ask_host("host/files/list", params)
    if method == "files/notified":
        return {"grants": list(_grants)}
    if method == "files/read":
        entry = held(params["ref"])
        if entry["kind"] == "file":
            with open(entry["path"], "rb") as f:
                return {"text": f.read().decode("utf-8")}
        tree = {}
        for dirpath, _, filenames in os.walk(entry["path"]):
            for name in filenames:
                full = os.path.join(dirpath, name)
                with open(full, "rb") as f:
                    tree[os.path.relpath(full, entry["path"]).replace(os.sep, "/")] = f.read().decode("utf-8")
        return {"tree": tree}
    if method == "files/write":
        entry = held(params["ref"])
        target = os.path.join(entry["path"], *params["path"].split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as f:
            f.write(params["text"])
        return {"written": params["path"]}
    if method == "files/mkdir":
        entry = held(params["ref"])
        os.makedirs(os.path.join(entry["path"], *params["path"].split("/")), exist_ok=True)
        return {}
    if method == "files/link":
        entry = held(params["ref"])
        os.symlink(params["target"], os.path.join(entry["path"], params["name"]))
        return {}
    raise LookupError(f"method not found: {method}")


def serve(msg):
    try:
        send({"jsonrpc": "2.0", "id": msg["id"], "result": handle(msg["method"], msg.get("params") or {})})
    except LookupError as exc:
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": str(exc)}})
    except Exception as exc:  # noqa: BLE001 - a worker answers every request
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32603, "message": repr(exc)}})


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if "method" not in msg:
            slot = _waiting.get(msg.get("id"))
            if slot:
                slot[1] = msg.get("result", msg.get("error"))
                slot[0].set()
            continue
        if "id" not in msg:
            if msg["method"] == "notifications/agenthost/files":
                _grants.append(msg.get("params"))
            continue
        threading.Thread(target=serve, args=(msg,), daemon=True).start()


if __name__ == "__main__":
    main()
