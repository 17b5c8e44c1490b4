"""Bad requests to the notification center: each answers a problem body and changes nothing."""
import json

import pytest

from tests.conftest import TOKEN
from tests.notifications.support import NOTE, authed

PROBLEM_KEYS = {"type", "title", "status", "detail", "code"}


@pytest.fixture(scope="module")
def seeded(shared_app):
    """One unread notification that no bad request may touch."""
    return authed(shared_app).post("/api/notifications", json=NOTE).json


@pytest.fixture
def client(shared_app, seeded):
    return authed(shared_app)


@pytest.fixture
def unchanged(shared_app, client):
    """Asserts after the test that the stored notifications and open tickets are as before."""
    host = shared_app.extensions["agenthost"]

    def state():
        return (client.get("/api/notifications?limit=100").json,
                client.get("/api/notifications/unread-count").json, len(host.tickets))

    before = state()
    yield
    assert state() == before


def assert_problem(resp, status):
    assert resp.status_code == status, resp.data
    assert resp.mimetype == "application/problem+json"
    body = resp.json
    assert PROBLEM_KEYS <= set(body), body
    assert body["status"] == status
    assert body["type"].endswith(body["code"])
    return body


# --- create -----------------------------------------------------------------------------


@pytest.mark.parametrize("field,value", [
    ("source", "plugin:"),
    ("source", "plugin:UPPER"),
    ("source", "plugin:a"),
    ("source", "plugin:-ab"),
    ("source", "plugin:" + "a" * 65),
    ("source", "plugin:a b"),
    ("source", "plugin:ab/cd"),
    ("source", "user"),
    ("source", "HOST"),
    ("source", ""),
    ("source", "host\n"),
    ("source", " host"),
    ("level", "debug"),
    ("level", "INFO"),
    ("level", ""),
    ("title", ""),
    ("title", "t" * 201),
    ("title", "a\x00b"),
    ("title", "\ud800"),
    ("body", "b" * 4001),
    ("body", "nul\x00"),
    ("link", "l" * 2049),
])
def test_invalid_value_is_a_400_with_the_field_named(client, unchanged, field, value):
    body = assert_problem(client.post("/api/notifications", json={**NOTE, field: value}), 400)
    assert field in body["errors"], body


@pytest.mark.parametrize("field,value", [
    ("source", 1), ("source", None), ("source", ["host"]),
    ("level", 0), ("level", None), ("level", {"x": 1}),
    ("title", 123), ("title", None), ("title", True), ("title", ["t"]),
    ("body", 5), ("body", False), ("body", {}),
    ("link", []), ("link", 3.5),
])
def test_wrong_type_is_a_400_with_the_field_named(client, unchanged, field, value):
    body = assert_problem(client.post("/api/notifications", json={**NOTE, field: value}), 400)
    assert field in body["errors"], body


@pytest.mark.parametrize("missing", ["source", "level", "title"])
def test_missing_required_field_is_a_400_with_the_field_named(client, unchanged, missing):
    payload = {k: v for k, v in NOTE.items() if k != missing}
    assert missing in assert_problem(client.post("/api/notifications", json=payload), 400)["errors"]


@pytest.mark.parametrize("extra", [{"read": True}, {"id": 7}, {"readAt": None},
                                   {"createdAt": "2020-01-01T00:00:00Z"}, {"colour": "red"}])
def test_unknown_field_is_a_400_with_the_field_named(client, unchanged, extra):
    body = assert_problem(client.post("/api/notifications", json={**NOTE, **extra}), 400)
    assert set(body["errors"]) == set(extra)


@pytest.mark.parametrize("raw", [b"{", b"{'source': 'host'}", b"not json", b"\xff\xfe",
                                 b'{"source": "host",}'])
def test_malformed_json_is_a_400_problem(client, unchanged, raw):
    resp = client.post("/api/notifications", data=raw, content_type="application/json")
    assert assert_problem(resp, 400)["code"] == "malformed_json"


@pytest.mark.parametrize("raw", ["[]", '["host", "info", "t"]', '"host"', "42", "null", "true"])
def test_json_that_is_not_an_object_is_a_400_problem(client, unchanged, raw):
    resp = client.post("/api/notifications", data=raw, content_type="application/json")
    assert_problem(resp, 400)


def test_empty_body_is_a_400_problem(client, unchanged):
    resp = client.post("/api/notifications", data=b"", content_type="application/json")
    assert_problem(resp, 400)
    assert_problem(client.post("/api/notifications"), 400)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
def test_a_body_that_is_not_json_typed_is_a_415_problem(client, unchanged, content_type):
    kwargs = {"data": json.dumps(NOTE)}
    if content_type:
        kwargs["content_type"] = content_type
    assert_problem(client.post("/api/notifications", **kwargs), 415)


def test_a_body_over_the_request_size_limit_is_a_413_problem(make_app):
    client = authed(make_app(config={"service.max-body-bytes": 64 * 1024}))
    assert_problem(client.post("/api/notifications", json={**NOTE, "body": "b" * 70 * 1024}), 413)
    assert client.get("/api/notifications").json == []


# --- listing ----------------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["0", "101", "-1", "abc", "", "1.5", "1e2"])
def test_limit_out_of_range_or_not_an_integer_is_a_400_problem(client, limit):
    body = assert_problem(client.get(f"/api/notifications?limit={limit}"), 400)
    assert "limit" in body["errors"]


@pytest.mark.parametrize("value", ["yes", "maybe", "", "2"])
def test_unread_only_that_is_not_a_boolean_is_a_400_problem(client, value):
    body = assert_problem(client.get(f"/api/notifications?unreadOnly={value}"), 400)
    assert "unreadOnly" in body["errors"]


# --- unknown ids ------------------------------------------------------------------------


@pytest.mark.parametrize("note_id", ["999999", "0", "2147483647", "2147483648",
                                     "99999999999999999999", "abc", "-1", "1.0"])
@pytest.mark.parametrize("method,suffix", [("post", "/read"), ("delete", "")])
def test_unknown_id_is_a_404_problem(client, unchanged, note_id, method, suffix):
    assert_problem(getattr(client, method)(f"/api/notifications/{note_id}{suffix}"), 404)


def test_a_method_the_collection_does_not_have_is_a_405_problem(client, unchanged):
    resp = client.put("/api/notifications", json=NOTE)
    assert_problem(resp, 405)
    assert "POST" in resp.headers["Allow"]


# --- token ------------------------------------------------------------------------------

ENDPOINTS = [
    ("post", "/api/notifications", NOTE),
    ("get", "/api/notifications", None),
    ("get", "/api/notifications/unread-count", None),
    ("post", "/api/notifications/{id}/read", None),
    ("post", "/api/notifications/read-all", None),
    ("delete", "/api/notifications/{id}", None),
    ("post", "/api/notifications/stream-ticket", None),
]
BAD_TOKENS = [{}, {"X-Service-Token": "wrong"}, {"X-Service-Token": ""},
              {"X-Service-Token": TOKEN + "x"}, {"X-Service-Token": TOKEN[:-1]},
              {"Authorization": f"Bearer {TOKEN}"}]


@pytest.mark.parametrize("method,path,payload", ENDPOINTS)
@pytest.mark.parametrize("headers", BAD_TOKENS)
def test_missing_or_wrong_token_is_a_401_problem(shared_app, seeded, unchanged, method, path,
                                                 payload, headers):
    anonymous = shared_app.test_client()
    resp = getattr(anonymous, method)(path.format(id=seeded["id"]), json=payload, headers=headers)
    assert assert_problem(resp, 401)["code"] == "invalid_token"


@pytest.mark.parametrize("method,path,payload", ENDPOINTS)
def test_the_token_is_never_accepted_in_the_url(shared_app, seeded, unchanged, method, path,
                                                payload):
    anonymous = shared_app.test_client()
    resp = getattr(anonymous, method)(path.format(id=seeded["id"]), json=payload,
                                      query_string={"token": TOKEN})
    assert resp.status_code in (400, 401)
    assert resp.mimetype == "application/problem+json"
