"""The shared SSE helper the notification stream is built on: framing, replay, error frames, cleanup."""
import requests
from flask import Blueprint
from werkzeug.test import EnvironBuilder

from core.sse import stream_response
from hookspecs import hookimpl
from tests.conftest import HEADERS
from tests.notifications.support import SSEStream, wait_until


class Streamer:
    """An extension whose route streams the ``demo`` channel, replaying two items first."""

    __name__ = "streamer"

    def __init__(self):
        self.closed = 0

    @hookimpl
    def register_routes(self, host):
        bp = Blueprint("streamer", __name__)

        @bp.get("/stream")
        def stream():
            def on_close():
                self.closed += 1
            return stream_response(host.events.subscribe("demo"), heartbeat=0.2, on_close=on_close,
                                   replay=[("step", {"n": 0}), ("step", {"n": 1})])

        return [bp]


def open_demo(base):
    resp = requests.get(f"{base}/api/ext/streamer/stream", headers=HEADERS, stream=True, timeout=10)
    assert resp.status_code == 200
    return SSEStream(resp)


def test_replay_then_live_events_then_an_error_frame_ends_the_stream(make_app, live_server):
    streamer = Streamer()
    app = make_app(plugins=[streamer])
    host = app.extensions["agenthost"]
    stream = open_demo(live_server(app))
    assert stream.next_frame() == {"comment": "connected"}
    assert stream.next_frame() == {"event": "step", "data": {"n": 0}}
    assert stream.next_frame() == {"event": "step", "data": {"n": 1}}
    host.events.publish("demo", "step", {"n": 2, "text": "multi\nline ✓"})
    assert stream.next_event() == {"event": "step", "data": {"n": 2, "text": "multi\nline ✓"}}
    host.events.publish("demo", "error", {"message": "boom"})
    assert stream.next_event() == {"event": "error", "data": {"message": "boom"}}
    assert stream.next_frame() is None  # nothing after an error frame: the body ended
    assert host.events.subscriber_count("demo") == 0
    assert wait_until(lambda: streamer.closed == 1)
    stream.close()


def test_a_response_closed_before_its_first_chunk_still_cleans_up(make_app):
    """A WSGI server may close a body it never iterated; the subscription must not leak then."""
    streamer = Streamer()
    app = make_app(plugins=[streamer])
    host = app.extensions["agenthost"]
    environ = EnvironBuilder(path="/api/ext/streamer/stream", headers=HEADERS).get_environ()
    statuses = []
    body = app(environ, lambda status, headers, exc_info=None: statuses.append(status))
    assert statuses == ["200 OK"]
    assert host.events.subscriber_count("demo") == 1
    body.close()  # never iterated: the generator never started, so its finally cannot run
    assert host.events.subscriber_count("demo") == 0
    assert streamer.closed == 1


def test_cleanup_runs_once_however_the_stream_ends(make_app, live_server):
    streamer = Streamer()
    app = make_app(plugins=[streamer])
    host = app.extensions["agenthost"]
    stream = open_demo(live_server(app))
    assert stream.next_frame() == {"comment": "connected"}
    stream.close()
    assert wait_until(lambda: host.events.subscriber_count("demo") == 0)
    assert wait_until(lambda: streamer.closed == 1)
    host.stop()
    assert streamer.closed == 1
