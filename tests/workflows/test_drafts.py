"""Workflow drafts over HTTP: create, list, get, replace, delete, and every bad request changing nothing."""
import json

import pytest

from tests.conftest import HEADERS
from tests.core.problems import assert_problem
from tests.workflows.support import GRAPH, INPUT_SCHEMA, LAYOUT, PLAN, body, create, get

MISSING = "00000000-0000-4000-8000-000000000000"


def test_create_answers_the_draft_at_revision_one(client):
    wf = create(client)
    assert wf["revision"] == 1 and wf["published"] is False and wf["activeRevision"] is None
    assert wf["toolName"] is None
    assert {k: wf[k] for k in ("name", "description", "inputSchema", "plan", "layout", "graph")} == body()
    assert wf["createdAt"].endswith("Z") and wf["updatedAt"] == wf["createdAt"]
    assert get(client, wf["id"]) == wf


def test_optional_fields_default(client):
    resp = client.post("/api/workflows", json={"name": "n", "inputSchema": INPUT_SCHEMA, "plan": PLAN},
                       headers=HEADERS)
    assert resp.status_code == 201, resp.json
    assert resp.json["description"] == "" and resp.json["layout"] is None and resp.json["graph"] is None


def test_layout_and_graph_round_trip_byte_equal(client):
    wf = create(client)
    raw = client.get(f"/api/workflows/{wf['id']}", headers=HEADERS).get_data(as_text=True)
    stored = json.loads(raw)
    # Same values, same key order, same types (320.5 stays a float, -40 an int, null stays null).
    assert json.dumps(stored["layout"]) == json.dumps(LAYOUT)
    assert json.dumps(stored["graph"]) == json.dumps(GRAPH)
    assert json.dumps(stored["plan"]) == json.dumps(PLAN)


def test_list_holds_every_definition_newest_update_first(client):
    first, second = create(client, name="first"), create(client, name="second")
    client.put(f"/api/workflows/{first['id']}", json=body(name="first again"), headers=HEADERS)
    listed = [w for w in client.get("/api/workflows", headers=HEADERS).json if w["id"] in (first["id"], second["id"])]
    assert [w["id"] for w in listed] == [first["id"], second["id"]]
    assert listed[0]["name"] == "first again" and listed[0]["revision"] == 2
    assert client.get("/api/workflows", headers=HEADERS).json[0]["id"] == first["id"]


def test_every_put_increments_the_revision_and_replaces_the_whole_draft(client):
    wf = create(client)
    for expected in (2, 3, 4):
        resp = client.put(f"/api/workflows/{wf['id']}", json=body(name=f"v{expected}", layout=None),
                          headers=HEADERS)
        assert resp.status_code == 200, resp.json
        assert resp.json["revision"] == expected and resp.json["name"] == f"v{expected}"
    now = get(client, wf["id"])
    assert now["revision"] == 4 and now["layout"] is None and now["graph"] == GRAPH
    assert now["createdAt"] == wf["createdAt"] and now["updatedAt"] >= wf["updatedAt"]


def test_put_with_the_current_expected_revision_succeeds_and_a_stale_one_is_409(client):
    wf = create(client)
    ok = client.put(f"/api/workflows/{wf['id']}", json=body(name="v2", expectedRevision=1), headers=HEADERS)
    assert ok.status_code == 200 and ok.json["revision"] == 2
    stale = client.put(f"/api/workflows/{wf['id']}", json=body(name="lost", expectedRevision=1), headers=HEADERS)
    problem = assert_problem(stale, 409, "stale_revision")
    assert problem["currentRevision"] == 2
    assert get(client, wf["id"]) == ok.json


def test_delete_removes_the_definition(client):
    wf = create(client)
    resp = client.delete(f"/api/workflows/{wf['id']}", headers=HEADERS)
    assert resp.status_code == 200
    assert resp.json == {"ok": True, "cancelledSchedules": 0, "cancelledWebhookTriggers": 0}
    assert_problem(client.get(f"/api/workflows/{wf['id']}", headers=HEADERS), 404, "not_found")
    assert wf["id"] not in [w["id"] for w in client.get("/api/workflows", headers=HEADERS).json]
    assert_problem(client.delete(f"/api/workflows/{wf['id']}", headers=HEADERS), 404)


ROUTES = [
    ("get", "/api/workflows", None),
    ("post", "/api/workflows", body()),
    ("get", "/api/workflows/{id}", None),
    ("put", "/api/workflows/{id}", body()),
    ("post", "/api/workflows/{id}/publish", {"published": True}),
    ("get", "/api/workflows/{id}/revisions", None),
    ("get", "/api/workflows/{id}/revisions/1", None),
    ("post", "/api/workflows/{id}/revisions/1/restore", {}),
    ("delete", "/api/workflows/{id}", None),
    ("post", "/api/workflows/{id}/run", {"inputs": {"url": "u"}}),
]


@pytest.mark.parametrize("method, path, payload", ROUTES)
@pytest.mark.parametrize("headers", [{}, {"X-Service-Token": "wrong-token"}], ids=["no-token", "wrong-token"])
def test_every_route_needs_the_token_and_changes_nothing_without_it(client, unchanged, method, path, payload,
                                                                  headers):
    resp = getattr(client, method)(path.format(id=unchanged["id"]), json=payload, headers=headers)
    assert_problem(resp, 401)


@pytest.mark.parametrize("method, path, payload", [r for r in ROUTES if "{id}" in r[1]])
@pytest.mark.parametrize("workflow_id", [MISSING, "not-a-uuid"])
def test_unknown_ids_are_404_problems(client, unchanged, method, path, payload, workflow_id):
    resp = getattr(client, method)(path.format(id=workflow_id), json=payload, headers=HEADERS)
    assert_problem(resp, 404, "not_found")


@pytest.mark.parametrize("path", ["/api/workflows/{id}/revisions/99", "/api/workflows/{id}/revisions/0",
                                  "/api/workflows/{id}/revisions/99999999999999999999",
                                  "/api/workflows/{id}/revisions/-1", "/api/workflows/{id}/revisions/one"])
def test_unknown_revisions_are_404_problems(client, unchanged, path):
    assert_problem(client.get(path.format(id=unchanged["id"]), headers=HEADERS), 404)
    assert_problem(client.post(path.format(id=unchanged["id"]) + "/restore", json={}, headers=HEADERS), 404)


def test_an_overlong_id_is_404(client):
    assert_problem(client.get("/api/workflows/" + "a" * 37, headers=HEADERS), 404)


def _bad_write(client, method, path, **kwargs):
    return getattr(client, method)(path, headers={**HEADERS, **kwargs.pop("headers", {})}, **kwargs)


@pytest.mark.parametrize("method, path", [("post", "/api/workflows"), ("put", "/api/workflows/{id}"),
                                          ("post", "/api/workflows/{id}/publish"),
                                          ("post", "/api/workflows/{id}/run")])
@pytest.mark.parametrize("raw, content_type, status, code", [
    ("{not json", "application/json", 400, "malformed_json"),
    ('{"name": NaN}', "application/json", 400, "malformed_json"),
    ("[1, 2]", "application/json", 400, "malformed_json"),
    ('"text"', "application/json", 400, "malformed_json"),
    ("", "application/json", 400, "body_required"),
    ('{"name": "x"}', "text/plain", 415, "unsupported_media_type"),
])
def test_malformed_bodies_are_refused(client, unchanged, method, path, raw, content_type, status, code):
    resp = _bad_write(client, method, path.format(id=unchanged["id"]), data=raw, content_type=content_type)
    assert_problem(resp, status, code)


@pytest.mark.parametrize("changes, field", [
    ({"name": None}, "name"),
    ({"name": ""}, "name"),
    ({"name": "   "}, "name"),
    ({"name": 5}, "name"),
    ({"name": "x" * 201}, "name"),
    ({"name": "nul\x00byte"}, "name"),
    ({"description": 3}, "description"),
    ({"description": "x" * 4001}, "description"),
    ({"description": "nul\x00"}, "description"),
    ({"inputSchema": "object"}, "inputSchema"),
    ({"inputSchema": ["type", "object"]}, "inputSchema"),
    ({"plan": [1]}, "plan"),
    ({"plan": "steps"}, "plan"),
    ({"layout": [1, 2]}, "layout"),
    ({"graph": "nodes"}, "graph"),
    ({"colour": "red"}, "colour"),
    ({"revision": 7}, "revision"),
    ({"published": True}, "published"),
])
@pytest.mark.parametrize("method", ["post", "put"])
def test_wrong_types_and_unknown_fields_are_400_per_field(client, unchanged, method, changes, field):
    path = "/api/workflows" if method == "post" else f"/api/workflows/{unchanged['id']}"
    resp = getattr(client, method)(path, json=body(**changes), headers=HEADERS)
    problem = assert_problem(resp, 400, "validation_failed")
    assert field in problem["errors"], problem


@pytest.mark.parametrize("missing", ["name", "inputSchema", "plan"])
@pytest.mark.parametrize("method", ["post", "put"])
def test_missing_required_fields_are_400_per_field(client, unchanged, method, missing):
    data = body()
    del data[missing]
    path = "/api/workflows" if method == "post" else f"/api/workflows/{unchanged['id']}"
    problem = assert_problem(getattr(client, method)(path, json=data, headers=HEADERS), 400, "validation_failed")
    assert missing in problem["errors"]


@pytest.mark.parametrize("value", ["2", 1.5, True, 0, -3, 2**31, [1]])
@pytest.mark.parametrize("route", ["put", "publish", "restore"])
def test_a_bad_expected_revision_is_400(client, unchanged, route, value):
    wid = unchanged["id"]
    resp = {"put": lambda: client.put(f"/api/workflows/{wid}", json=body(expectedRevision=value), headers=HEADERS),
            "publish": lambda: client.post(f"/api/workflows/{wid}/publish",
                                           json={"published": True, "expectedRevision": value}, headers=HEADERS),
            # revision 1 was never published: the body is checked before the snapshot is looked up
            "restore": lambda: client.post(f"/api/workflows/{wid}/revisions/1/restore",
                                           json={"expectedRevision": value}, headers=HEADERS)}[route]()
    assert "expectedRevision" in assert_problem(resp, 400, "validation_failed")["errors"]


def test_a_null_expected_revision_means_no_check(client):
    wf = create(client)
    resp = client.put(f"/api/workflows/{wf['id']}", json=body(expectedRevision=None), headers=HEADERS)
    assert resp.status_code == 200 and resp.json["revision"] == 2


def test_an_input_schema_is_not_stored_when_the_plan_is_refused(client):
    wf = create(client)
    bad = body(inputSchema={**INPUT_SCHEMA, "title": "changed"}, plan={"steps": [{"id": "a", "tool": "nope"}]})
    assert_problem(client.put(f"/api/workflows/{wf['id']}", json=bad, headers=HEADERS), 400, "invalid_plan")
    assert get(client, wf["id"]) == wf
