"""Server-Sent Events: the one helper every stream uses."""
import json

from flask import Response
from gevent.queue import Empty

from .events import CLOSED

HEADERS = {
    "Cache-Control": "no-cache, no-store",
    "X-Accel-Buffering": "no",
    "Connection": "keep-alive",
}


def frame(event, data):
    """One SSE frame: an ``event:`` line and a single-line JSON ``data:`` line."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def comment(text):
    return f": {text}\n\n"


def _bytes(text):
    # Encoded once here, so a heartbeat is one shared bytes object for every stream.
    return text.encode("utf-8")


_HEARTBEAT = _bytes(comment("heartbeat"))


def stream_response(subscription, *, heartbeat, connected=True, replay=(), on_close=None,
                    terminal=("error",), end_after_replay=False):
    """Stream a subscription's ``(event, data)`` or ``(event, data, key)`` items as SSE.

    ``connected`` sends the ``: connected`` comment first. The interface requires it
    on chat and agent streams; every stream sends it, because gevent's server only
    sends the response headers with the first body chunk, and a client should not
    wait a heartbeat interval to learn that its stream is open.
    ``replay`` items are sent before live ones. A ``: heartbeat`` comment goes out
    after ``heartbeat`` idle seconds, which is also how a vanished client is noticed.
    An ``error`` frame (or another ``terminal`` event) ends the stream, and so does
    ``end_after_replay`` once the replay is sent. Items may carry an ordering key
    (a sequence number): a live item whose key is not above the last replayed one
    was already sent and is skipped, so a stream can subscribe first, then load
    history, and lose or repeat nothing. Cleanup runs however the stream ends.
    """

    closed = False

    def cleanup():
        # Idempotent: runs from the generator's finally and again from the response's
        # close, which also covers a response closed before its first chunk was pulled
        # (an unstarted generator never reaches its finally).
        nonlocal closed
        if closed:
            return
        closed = True
        subscription.close()
        if on_close is not None:
            on_close()

    def generate():
        try:
            if connected:
                yield _bytes(comment("connected"))
            last_key = None
            for item in replay:
                event, data = item[0], item[1]
                last_key = item[2] if len(item) > 2 else last_key
                yield _bytes(frame(event, data))
                if event in terminal:
                    return
            if end_after_replay:
                return
            while True:
                try:
                    item = subscription.get(timeout=heartbeat)
                except Empty:
                    yield _HEARTBEAT
                    continue
                if item is CLOSED:
                    return
                event, data = item[0], item[1]
                if last_key is not None and len(item) > 2 and item[2] <= last_key:
                    continue
                yield _bytes(frame(event, data))
                if event in terminal:
                    return
        finally:
            cleanup()

    # Not direct_passthrough: Werkzeug then hands the server its own closing iterator, so
    # the response's close (and with it ``cleanup``) runs even for a body never iterated,
    # such as the empty body of a HEAD request.
    response = Response(generate(), mimetype="text/event-stream", headers=HEADERS)
    response.call_on_close(cleanup)
    return response
