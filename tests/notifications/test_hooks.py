"""The ``notification_created`` hook: once each, after commit, before fan-out, isolated."""
from sqlalchemy import select

from builtin_plugins.notifications.models import Notification
from hookspecs import hookimpl
from tests.conftest import HEADERS
from tests.notifications.support import NOTE, authed

FAST = {"notifications.heartbeat-seconds": 0.2}


class Recorder:
    """Records each call with what the API, a fresh session and the stream queue show then."""

    __name__ = "recorder"

    def __init__(self):
        self.calls = []
        self.watch = None  # a bus subscription whose queue shows whether fan-out happened yet

    @hookimpl
    def notification_created(self, host, notification):
        api_view = host.app.test_client().get("/api/notifications", headers=HEADERS).json
        with host.db.session() as s:
            stored = s.execute(select(Notification.id)).scalars().all()
        self.calls.append({
            "notification": notification,
            "api": api_view,
            "stored": stored,
            "queued": self.watch.queue.qsize() if self.watch else None,
        })


class Broken:
    __name__ = "broken"

    @hookimpl
    def notification_created(self, host, notification):
        raise RuntimeError("this extension is broken")


def test_hook_fires_once_per_notification_with_the_created_view(make_app):
    recorder = Recorder()
    client = authed(make_app(plugins=[recorder]))
    created = [client.post("/api/notifications", json={**NOTE, "title": f"n{i}"}).json
               for i in range(3)]
    assert [c["notification"] for c in recorder.calls] == created


def test_hook_runs_after_commit_and_before_fan_out(make_app):
    recorder = Recorder()
    app = make_app(plugins=[recorder])
    recorder.watch = app.extensions["agenthost"].events.subscribe("notifications")
    note = authed(app).post("/api/notifications", json=NOTE).json
    (call,) = recorder.calls
    assert call["api"] == [note]  # a separate request already reads it back
    assert call["stored"] == [note["id"]]  # so does a separate database session
    assert call["queued"] == 0  # no stream had it yet
    assert recorder.watch.get(timeout=1) == ("notification", note)


def test_hook_fires_for_producers_that_use_the_service(make_app):
    recorder = Recorder()
    app = make_app(plugins=[recorder])
    note = app.extensions["agenthost"].service("notifications").create(
        source="plugin:com.example.hello", level="warning", title="Hello")
    assert [c["notification"] for c in recorder.calls] == [note]


def test_hook_does_not_fire_for_a_refused_request(make_app):
    recorder = Recorder()
    client = authed(make_app(plugins=[recorder]))
    assert client.post("/api/notifications", json={**NOTE, "source": "user"}).status_code == 400
    assert recorder.calls == []


def test_a_raising_hook_stops_neither_creation_nor_other_hooks_nor_the_stream(
        make_app, live_server, open_stream):
    recorder = Recorder()
    app = make_app(plugins=[Broken(), recorder], config=FAST)
    client = authed(app)
    stream = open_stream(live_server(app), client)
    assert stream.next_frame() == {"comment": "connected"}

    resp = client.post("/api/notifications", json=NOTE)
    assert resp.status_code == 201
    note = resp.json
    assert client.get("/api/notifications").json == [note]
    assert [c["notification"] for c in recorder.calls] == [note]
    assert stream.next_event() == {"event": "notification", "data": note}

    second = client.post("/api/notifications", json={**NOTE, "title": "Again"}).json
    assert stream.next_event() == {"event": "notification", "data": second}
    assert app.extensions["agenthost"].pm.has_plugin("broken")  # logged, not dropped
