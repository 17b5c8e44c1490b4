"""Notification center endpoints: create, list, unread count, read, read-all, delete, retention."""
import datetime as dt
import re

import pytest
from marshmallow import ValidationError
from sqlalchemy import func, select

from builtin_plugins.notifications.models import Notification
from tests.notifications.support import NOTE, authed

ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


def create(client, **overrides):
    resp = client.post("/api/notifications", json={**NOTE, **overrides})
    assert resp.status_code == 201, resp.json
    return resp.json


def parse_time(text):
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def stored_ids(app):
    host = app.extensions["agenthost"]
    with host.db.session() as s:
        return list(s.execute(select(Notification.id).order_by(Notification.id)).scalars())


# --- create -----------------------------------------------------------------------------


def test_create_returns_the_full_created_view(client):
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    resp = client.post("/api/notifications", json={
        "source": "plugin:com.example.hello", "level": "success", "title": "Saved",
        "body": "Your report is ready.", "link": "https://example.test/r/1"})
    after = dt.datetime.now(dt.timezone.utc)
    assert resp.status_code == 201
    note = resp.json
    assert set(note) == {"id", "source", "level", "title", "body", "link", "read",
                         "createdAt", "readAt"}
    assert isinstance(note["id"], int)
    assert note["source"] == "plugin:com.example.hello"
    assert note["level"] == "success"
    assert note["title"] == "Saved"
    assert note["body"] == "Your report is ready."
    assert note["link"] == "https://example.test/r/1"
    assert note["read"] is False
    assert note["readAt"] is None
    assert ISO_UTC.match(note["createdAt"]), note["createdAt"]
    assert before <= parse_time(note["createdAt"]) <= after


def test_body_and_link_are_optional_and_null_when_absent(client):
    note = create(client)
    assert note["body"] is None and note["link"] is None
    assert create(client, body=None, link=None)["body"] is None


@pytest.mark.parametrize("source", ["host", "agent", "plugin:ab", "plugin:com.example.hello",
                                    "plugin:a-b_c.d", "plugin:0" + "x" * 63])
def test_accepted_sources(shared_app, source):
    assert create(authed(shared_app), source=source)["source"] == source


@pytest.mark.parametrize("level", ["info", "success", "warning", "error"])
def test_accepted_levels(shared_app, level):
    assert create(authed(shared_app), level=level)["level"] == level


def test_longest_allowed_values_are_stored_whole(client):
    note = create(client, title="t" * 200, body="b" * 4000, link="l" * 2048)
    listed = client.get("/api/notifications").json[0]
    assert listed == note
    assert (len(listed["title"]), len(listed["body"]), len(listed["link"])) == (200, 4000, 2048)


def test_the_service_refuses_what_the_api_refuses(app, client):
    """Producers that skip HTTP (plugin bridge, agent) get the same validation."""
    host = app.extensions["agenthost"]
    watch = host.events.subscribe("notifications")
    center = host.service("notifications")
    for bad in ({"source": "plugin:UPPER"}, {"level": "fatal"}, {"title": ""},
                {"title": "t" * 201}, {"body": "x\x00"}, {"link": "l" * 2049}):
        with pytest.raises(ValidationError) as refused:
            center.create(**{**NOTE, **bad})
        assert set(refused.value.messages) == set(bad)
    assert client.get("/api/notifications").json == []
    assert watch.queue.qsize() == 0


# --- listing ----------------------------------------------------------------------------


def test_listing_is_newest_first(client):
    ids = [create(client, title=f"n{i}")["id"] for i in range(5)]
    listed = client.get("/api/notifications").json
    assert [n["id"] for n in listed] == ids[::-1]
    assert [n["title"] for n in listed] == [f"n{i}" for i in range(5)][::-1]


def test_listing_of_an_empty_center_is_an_empty_list(client):
    resp = client.get("/api/notifications")
    assert resp.status_code == 200 and resp.json == []


def test_limit_defaults_to_fifty_and_caps_the_page(client):
    ids = [create(client, title=f"n{i}")["id"] for i in range(60)]
    assert [n["id"] for n in client.get("/api/notifications").json] == ids[::-1][:50]
    assert [n["id"] for n in client.get("/api/notifications?limit=3").json] == ids[::-1][:3]
    assert len(client.get("/api/notifications?limit=1").json) == 1
    assert len(client.get("/api/notifications?limit=100").json) == 60


def test_unread_only_lists_just_the_unread(client):
    first, second, third = (create(client, title=t)["id"] for t in "abc")
    client.post(f"/api/notifications/{second}/read")
    def listed(value):
        return [n["id"] for n in client.get(f"/api/notifications?unreadOnly={value}").json]

    assert listed("true") == listed("1") == [third, first]
    assert listed("false") == listed("0") == [third, second, first]


def test_unread_only_with_limit_takes_the_newest_unread(client):
    ids = [create(client, title=f"n{i}")["id"] for i in range(6)]
    client.post(f"/api/notifications/{ids[5]}/read")
    listed = client.get("/api/notifications?unreadOnly=true&limit=2").json
    assert [n["id"] for n in listed] == [ids[4], ids[3]]


# --- unread count, read, read-all, delete -----------------------------------------------


def test_unread_count_follows_creates_reads_and_deletes(client):
    def count():
        resp = client.get("/api/notifications/unread-count")
        assert resp.status_code == 200
        return resp.json["count"]

    assert count() == 0
    ids = [create(client)["id"] for _ in range(3)]
    assert count() == 3
    client.post(f"/api/notifications/{ids[0]}/read")
    assert count() == 2
    client.delete(f"/api/notifications/{ids[1]}")
    assert count() == 1


def test_read_marks_one_and_stamps_read_at(client):
    note = create(client)
    other = create(client)
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    resp = client.post(f"/api/notifications/{note['id']}/read")
    assert resp.status_code == 200
    read = resp.json
    assert read["read"] is True
    assert ISO_UTC.match(read["readAt"]) and parse_time(read["readAt"]) >= before
    assert {k: v for k, v in read.items() if k not in ("read", "readAt")} == \
        {k: v for k, v in note.items() if k not in ("read", "readAt")}
    listed = {n["id"]: n for n in client.get("/api/notifications").json}
    assert listed[note["id"]] == read
    assert listed[other["id"]]["read"] is False and listed[other["id"]]["readAt"] is None


def test_read_is_idempotent_and_keeps_the_first_read_time(client):
    note = create(client)
    first = client.post(f"/api/notifications/{note['id']}/read").json
    second = client.post(f"/api/notifications/{note['id']}/read")
    assert second.status_code == 200
    assert second.json == first
    assert client.get("/api/notifications").json[0]["readAt"] == first["readAt"]


def test_read_all_acknowledges_every_unread_one(client):
    ids = [create(client)["id"] for _ in range(4)]
    already = client.post(f"/api/notifications/{ids[0]}/read").json
    resp = client.post("/api/notifications/read-all")
    assert resp.status_code == 200
    assert resp.json == {"ok": True, "updated": 3}
    listed = {n["id"]: n for n in client.get("/api/notifications").json}
    assert all(n["read"] and n["readAt"] for n in listed.values())
    assert listed[ids[0]]["readAt"] == already["readAt"]
    assert client.get("/api/notifications/unread-count").json == {"count": 0}
    assert client.post("/api/notifications/read-all").json == {"ok": True, "updated": 0}


def test_delete_removes_one(client):
    keep, gone = create(client), create(client)
    resp = client.delete(f"/api/notifications/{gone['id']}")
    assert resp.status_code == 200
    assert resp.json == {"ok": True, "id": gone["id"]}
    assert [n["id"] for n in client.get("/api/notifications").json] == [keep["id"]]
    again = client.delete(f"/api/notifications/{gone['id']}")
    assert again.status_code == 404


# --- retention --------------------------------------------------------------------------


def test_two_hundred_newest_are_retained_and_the_oldest_dropped(app, client):
    ids = [create(client, title=f"n{i}")["id"] for i in range(205)]
    assert stored_ids(app) == ids[5:]
    for dropped in ids[:5]:
        assert client.post(f"/api/notifications/{dropped}/read").status_code == 404
    assert client.post(f"/api/notifications/{ids[5]}/read").status_code == 200
    assert client.get("/api/notifications/unread-count").json == {"count": 199}
    assert [n["id"] for n in client.get("/api/notifications?limit=100").json] == ids[::-1][:100]


def test_retention_counts_read_rows_too(app, client):
    ids = [create(client)["id"] for _ in range(200)]
    client.post("/api/notifications/read-all")
    newest = create(client)["id"]
    assert stored_ids(app) == ids[1:] + [newest]


def test_the_table_never_holds_more_than_retained(app, client):
    host = app.extensions["agenthost"]
    for _ in range(203):
        create(client)
        with host.db.session() as s:
            assert s.execute(select(func.count()).select_from(Notification)).scalar_one() <= 200
