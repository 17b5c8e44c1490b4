"""The framework's floor: bare Flask apps served exactly as ``core serve`` serves ours.

``GET /hello`` is the JSON "hello" of benchmark 1. ``GET /stream`` and ``POST /notify``
are the smallest SSE fan-out gevent and Flask allow (no auth, no database, no hooks),
the floor of benchmarks 2 and 3.
"""
from gevent import monkey

monkey.patch_all()

import itertools  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from flask import Flask, Response, jsonify  # noqa: E402
from gevent.event import Event  # noqa: E402
from gevent.pywsgi import WSGIServer  # noqa: E402
from gevent.queue import Empty, Queue  # noqa: E402

from core.launcher import _ErrorLog, bind  # noqa: E402

app = Flask("floor")
subscribers = set()
ids = itertools.count(1)


@app.get("/hello")
def hello():
    return jsonify(hello="world")


@app.get("/stream")
def stream():
    queue = Queue()

    def generate():
        subscribers.add(queue)
        try:
            yield b": connected\n\n"  # bytes: direct_passthrough hands chunks to pywsgi as they are
            while True:
                try:
                    yield queue.get(timeout=25)
                except Empty:
                    yield b": heartbeat\n\n"
        finally:
            subscribers.discard(queue)

    return Response(generate(), mimetype="text/event-stream", direct_passthrough=True)


@app.post("/notify")
def notify():
    note = {"id": next(ids)}
    frame = f"event: notification\ndata: {json.dumps(note)}\n\n".encode()
    for queue in list(subscribers):
        queue.put_nowait(frame)
    return jsonify(note), 201


def main():
    listener = bind(0)  # same socket options as the host: loopback, TCP_NODELAY, backlog
    server = WSGIServer(listener, app, log=None, error_log=_ErrorLog())
    server.start()
    sys.stdout.write(f"SERVICE_PORT={listener.getsockname()[1]}\n")
    sys.stdout.flush()
    Event().wait()  # until SIGTERM ends the process


if __name__ == "__main__":
    main()
