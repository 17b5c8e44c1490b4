"""The notification stream over real sockets: tickets, live fan-out, heartbeats, cleanup."""
import gevent
import pytest
import requests

from core.errors import ApiError
from core.events import CLOSED, EventBus
from tests.conftest import HEADERS, TOKEN
from tests.notifications.support import NOTE, authed, greenlets_since, live_greenlets, wait_until

FAST = {"notifications.heartbeat-seconds": 0.2}


@pytest.fixture
def fast_app(make_app):
    return make_app(config=FAST)


def stream_url(base, **params):
    return requests.Request("GET", f"{base}/api/notifications/stream", params=params).prepare().url


def assert_403_problem(resp):
    assert resp.status_code == 403
    assert resp.headers["Content-Type"].startswith("application/problem+json")
    body = resp.json()
    assert {"type", "title", "status", "detail", "code"} <= set(body)
    assert body["status"] == 403


# --- tickets ----------------------------------------------------------------------------


def test_stream_ticket_is_random_and_says_when_it_expires(client):
    first = client.post("/api/notifications/stream-ticket")
    second = client.post("/api/notifications/stream-ticket")
    assert first.status_code == 200
    assert set(first.json) == {"ticket", "expiresIn"}
    assert first.json["expiresIn"] == 60
    assert isinstance(first.json["ticket"], str) and len(first.json["ticket"]) >= 22  # >= 128 bits
    assert first.json["ticket"] != second.json["ticket"]


def test_stream_with_a_valid_ticket_needs_no_token(fast_app, live_server):
    base = live_server(fast_app)
    ticket = authed(fast_app).post("/api/notifications/stream-ticket").json["ticket"]
    resp = requests.get(stream_url(base, ticket=ticket), stream=True, timeout=10)
    try:
        assert resp.status_code == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert "no-cache" in resp.headers["Cache-Control"]
    finally:
        resp.close()


def test_a_ticket_works_once(fast_app, live_server, open_stream):
    base = live_server(fast_app)
    client = authed(fast_app)
    ticket = client.post("/api/notifications/stream-ticket").json["ticket"]
    first = requests.get(stream_url(base, ticket=ticket), stream=True, timeout=10)
    try:
        assert first.status_code == 200
        second = requests.get(stream_url(base, ticket=ticket), timeout=10)
        assert_403_problem(second)
    finally:
        first.close()


@pytest.mark.parametrize("params", [{}, {"ticket": ""}, {"ticket": "not-a-ticket"},
                                    {"token": TOKEN}, {"ticket": "", "token": TOKEN}])
def test_stream_without_a_valid_ticket_is_a_403_problem(fast_app, live_server, params):
    base = live_server(fast_app)
    assert_403_problem(requests.get(stream_url(base, **params), timeout=10))
    assert fast_app.extensions["agenthost"].events.subscriber_count("notifications") == 0


def test_the_launch_token_header_does_not_replace_the_ticket(fast_app, live_server):
    base = live_server(fast_app)
    assert_403_problem(requests.get(stream_url(base), headers=HEADERS, timeout=10))


def test_an_expired_ticket_is_a_403_problem(make_app, live_server):
    app = make_app(config={**FAST, "tickets.ttl-seconds": 0.05})
    base = live_server(app)
    ticket = authed(app).post("/api/notifications/stream-ticket").json["ticket"]
    gevent.sleep(0.15)
    resp = requests.get(stream_url(base, ticket=ticket), timeout=10)
    assert_403_problem(resp)
    assert resp.json()["code"] in ("ticket_expired", "ticket_invalid")


def test_a_ticket_minted_for_another_stream_is_a_403_problem(fast_app, live_server):
    base = live_server(fast_app)
    host = fast_app.extensions["agenthost"]
    for kind in ("agent", "chat"):
        ticket = host.tickets.mint(kind)["ticket"]
        assert_403_problem(requests.get(stream_url(base, ticket=ticket), timeout=10))
    bound = host.tickets.mint("notifications", bound_to="run-1")["ticket"]
    assert_403_problem(requests.get(stream_url(base, ticket=bound), timeout=10))


def test_a_refused_ticket_is_used_up(fast_app, live_server):
    """A ticket presented on the wrong stream cannot be replayed on the right one."""
    host = fast_app.extensions["agenthost"]
    ticket = authed(fast_app).post("/api/notifications/stream-ticket").json["ticket"]
    with pytest.raises(ApiError) as refused:
        host.tickets.redeem("agent", ticket)
    assert refused.value.status == 403
    assert_403_problem(requests.get(stream_url(live_server(fast_app), ticket=ticket), timeout=10))


# --- live fan-out -----------------------------------------------------------------------


def test_first_frame_is_connected_then_heartbeats_while_idle(fast_app, live_server, open_stream):
    stream = open_stream(live_server(fast_app), authed(fast_app))
    assert stream.next_frame() == {"comment": "connected"}
    assert stream.next_frame() == {"comment": "heartbeat"}
    assert stream.next_frame() == {"comment": "heartbeat"}


def test_every_connected_client_receives_each_notification_exactly_once(
        fast_app, live_server, open_stream):
    base = live_server(fast_app)
    client = authed(fast_app)
    streams = [open_stream(base, client) for _ in range(4)]
    for stream in streams:
        assert stream.next_frame() == {"comment": "connected"}
    assert fast_app.extensions["agenthost"].events.subscriber_count("notifications") == 4

    first = requests.post(f"{base}/api/notifications", json=NOTE, headers=HEADERS, timeout=10)
    assert first.status_code == 201
    second = requests.post(f"{base}/api/notifications", json={**NOTE, "title": "Second"},
                           headers=HEADERS, timeout=10).json()

    received = [[stream.next_event(), stream.next_event()] for stream in streams]
    for frames in received:
        # The second frame being the second notification proves the first was not sent twice.
        assert frames == [{"event": "notification", "data": first.json()},
                          {"event": "notification", "data": second}]


def test_history_is_not_replayed_on_connect(fast_app, live_server, open_stream):
    base = live_server(fast_app)
    client = authed(fast_app)
    client.post("/api/notifications", json={**NOTE, "title": "Old"})
    stream = open_stream(base, client)
    assert stream.next_frame() == {"comment": "connected"}
    new = client.post("/api/notifications", json={**NOTE, "title": "New"}).json
    assert stream.next_event() == {"event": "notification", "data": new}


def test_notifications_from_other_producers_reach_the_stream(fast_app, live_server, open_stream):
    """The plugin bridge and the agent create through the service; the stream is the same."""
    stream = open_stream(live_server(fast_app), authed(fast_app))
    assert stream.next_frame() == {"comment": "connected"}
    note = fast_app.extensions["agenthost"].service("notifications").create(
        source="agent", level="error", title="Run failed", link="/runs/1")
    assert stream.next_event() == {"event": "notification", "data": note}


def test_requests_that_change_nothing_send_nothing(fast_app, live_server, open_stream):
    base = live_server(fast_app)
    client = authed(fast_app)
    stream = open_stream(base, client)
    assert stream.next_frame() == {"comment": "connected"}
    note = client.post("/api/notifications", json=NOTE).json
    assert stream.next_event()["data"] == note
    client.post("/api/notifications", json={**NOTE, "level": "fatal"})
    client.post(f"/api/notifications/{note['id']}/read")
    client.post("/api/notifications/read-all")
    client.delete(f"/api/notifications/{note['id']}")
    last = client.post("/api/notifications", json={**NOTE, "title": "Last"}).json
    assert stream.next_event() == {"event": "notification", "data": last}


# --- cleanup ----------------------------------------------------------------------------


def test_a_disconnected_client_is_cleaned_up(fast_app, live_server, open_stream):
    host = fast_app.extensions["agenthost"]
    base = live_server(fast_app)
    client = authed(fast_app)

    warm = open_stream(base, client)  # first use starts pools and hub machinery
    assert warm.next_frame() == {"comment": "connected"}
    warm.close()
    assert wait_until(lambda: host.events.subscriber_count("notifications") == 0)
    baseline = live_greenlets()

    streams = [open_stream(base, client) for _ in range(3)]
    for stream in streams:
        assert stream.next_frame() == {"comment": "connected"}
    assert host.events.subscriber_count("notifications") == 3
    assert len(greenlets_since(baseline)) >= 3  # one server greenlet per open stream
    for stream in streams:
        stream.close()

    # A dropped client is noticed on the next write: a heartbeat or two.
    assert wait_until(lambda: host.events.subscriber_count("notifications") == 0)
    assert wait_until(lambda: not greenlets_since(baseline)), greenlets_since(baseline)
    # The host still fans out to a new client afterwards.
    again = open_stream(base, client)
    assert again.next_frame() == {"comment": "connected"}
    note = client.post("/api/notifications", json=NOTE).json
    assert again.next_event() == {"event": "notification", "data": note}


def test_a_head_request_on_the_stream_leaves_no_subscriber(fast_app, live_server):
    """HEAD answers the headers with no body; the subscription it opened is released at once."""
    host = fast_app.extensions["agenthost"]
    ticket = authed(fast_app).post("/api/notifications/stream-ticket").json["ticket"]
    resp = requests.head(stream_url(live_server(fast_app), ticket=ticket), timeout=10)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert resp.content == b""
    assert wait_until(lambda: host.events.subscriber_count("notifications") == 0)


@pytest.mark.parametrize("leave", ["stop", "enter_setup_mode"])
def test_leaving_app_mode_ends_open_streams(fast_app, live_server, open_stream, leave):
    host = fast_app.extensions["agenthost"]
    base = live_server(fast_app)
    client = authed(fast_app)
    streams = [open_stream(base, client) for _ in range(2)]
    for stream in streams:
        assert stream.next_frame() == {"comment": "connected"}
    getattr(host, leave)()
    for stream in streams:
        assert stream.next_event() is None  # the response body ended
    assert host.events.subscriber_count() == 0
    resp = requests.post(f"{base}/api/notifications/stream-ticket", headers=HEADERS, timeout=10)
    assert resp.status_code == 503


def test_a_subscriber_that_falls_behind_is_dropped():
    """Memory stays bounded: a full queue ends that one stream, not the publisher or the others."""
    bus = EventBus(queue_size=3)
    slow, fast = bus.subscribe("notifications"), bus.subscribe("notifications")
    for i in range(3):
        assert bus.publish("notifications", "notification", {"id": i}) == 2
        assert fast.get(timeout=1) == ("notification", {"id": i})
    assert bus.publish("notifications", "notification", {"id": 3}) == 2
    assert slow.get(timeout=1) is CLOSED
    assert bus.subscriber_count("notifications") == 1
    assert fast.get(timeout=1) == ("notification", {"id": 3})
    assert bus.publish("notifications", "notification", {"id": 4}) == 1


def test_close_all_ends_every_subscription():
    bus = EventBus()
    subs = [bus.subscribe("notifications"), bus.subscribe("agent:1")]
    bus.publish("notifications", "notification", {"id": 1})
    bus.close_all()
    assert [s.get(timeout=1) for s in subs] == [CLOSED, CLOSED]
    assert bus.subscriber_count() == 0
    assert bus.publish("notifications", "notification", {"id": 2}) == 0
