"""Bad schedule requests: each answers a problem body (field errors on 400) and changes nothing."""
import uuid

import pytest

from tests.conftest import HEADERS, TOKEN
from tests.core.problems import assert_problem
from tests.core.shared_app import module_app
from tests.schedules.support import INPUTS, EchoTool, listed, workflow


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    yield from module_app(tmp_path_factory, plugins=[EchoTool()])


@pytest.fixture(scope="module")
def wf(app):
    return workflow(app.test_client())


@pytest.fixture(scope="module")
def existing(app, wf):
    """One schedule that every bad request must leave as it is."""
    resp = app.test_client().post("/api/agent/schedules", headers=HEADERS,
                                  json={"workflowId": wf, "inputs": INPUTS, "intervalSeconds": 3600})
    assert resp.status_code == 201
    return resp.json


@pytest.fixture
def client(app, existing):
    c = app.test_client()
    before = listed(c)
    assert before == [existing]
    yield c
    assert listed(c) == before  # nothing changed


def post(client, body):
    return client.post("/api/agent/schedules", json=body, headers=HEADERS)


def test_unpublished_workflow_is_refused(client):
    draft = workflow(client, publish=False)
    assert_problem(post(client, {"workflowId": draft, "inputs": INPUTS, "intervalSeconds": 3600}),
                   409, "workflow_not_published")


def test_unpublished_again_workflow_is_refused(client):
    wf = workflow(client)
    assert client.post(f"/api/workflows/{wf}/publish", json={"published": False}, headers=HEADERS).status_code == 200
    assert_problem(post(client, {"workflowId": wf, "inputs": INPUTS, "intervalSeconds": 3600}),
                   409, "workflow_not_published")


@pytest.mark.parametrize("workflow_id", [str(uuid.uuid4()), "unknown"])
def test_unknown_workflow_is_404(client, workflow_id):
    assert_problem(post(client, {"workflowId": workflow_id, "intervalSeconds": 3600}), 404)


@pytest.mark.parametrize("method", ["get", "delete"])
@pytest.mark.parametrize("schedule_id", [str(uuid.uuid4()), "nope", "x" * 37])
def test_unknown_schedule_is_404(client, method, schedule_id):
    assert_problem(getattr(client, method)(f"/api/agent/schedules/{schedule_id}", headers=HEADERS), 404)


@pytest.mark.parametrize("inputs,field", [
    ({}, "inputs.url"),                                    # url is required: named where it is missing
    ({"url": ""}, "inputs.url"),
    ({"url": "https://x", "n": -1}, "inputs.n"),
    ({"url": "https://x", "n": "3"}, "inputs.n"),
    ({"url": "https://x", "extra": 1}, "inputs.extra"),   # the same per-field keys as a workflow run
])
def test_inputs_that_fail_the_input_schema(client, wf, inputs, field):
    body = assert_problem(post(client, {"workflowId": wf, "inputs": inputs, "intervalSeconds": 3600}),
                          400, "validation_failed")
    assert field in body["errors"], body


BAD_CALENDARS = [
    ({"frequency": "DAILY", "time": "09:00", "zoneId": "Nowhere/City"}, "calendar.zoneId"),
    ({"frequency": "DAILY", "time": "09:00", "zoneId": "Europe/../../etc/passwd"}, "calendar.zoneId"),
    ({"frequency": "DAILY", "time": "09:00", "zoneId": None}, "calendar.zoneId"),
    ({"frequency": "WEEKLY", "time": "09:00", "zoneId": "UTC", "weekdays": [0]}, "calendar.weekdays"),
    ({"frequency": "WEEKLY", "time": "09:00", "zoneId": "UTC", "weekdays": [8]}, "calendar.weekdays"),
    ({"frequency": "WEEKLY", "time": "09:00", "zoneId": "UTC"}, "calendar.weekdays"),
    ({"frequency": "MONTHLY", "time": "09:00", "zoneId": "UTC", "monthDay": 0}, "calendar.monthDay"),
    ({"frequency": "MONTHLY", "time": "09:00", "zoneId": "UTC", "monthDay": 32}, "calendar.monthDay"),
    ({"frequency": "DAILY", "time": "25:00", "zoneId": "UTC"}, "calendar.time"),
    ({"frequency": "DAILY", "time": "7:5", "zoneId": "UTC"}, "calendar.time"),
    ({"frequency": "YEARLY", "time": "07:05", "zoneId": "UTC"}, "calendar.frequency"),
    ({"frequency": "DAILY", "time": "07:05", "zoneId": "UTC", "cron": "* * * * *"}, "calendar.cron"),
    ("DAILY", "calendar"),
    ([], "calendar"),
]


@pytest.mark.parametrize("calendar,field", BAD_CALENDARS)
def test_invalid_calendar(client, wf, calendar, field):
    body = assert_problem(post(client, {"workflowId": wf, "inputs": INPUTS, "calendar": calendar}),
                          400, "validation_failed")
    assert field in body["errors"], body


@pytest.mark.parametrize("fields,field", [
    ({}, "intervalSeconds"),                                # neither interval nor calendar
    ({"intervalSeconds": None}, "intervalSeconds"),
    ({"intervalSeconds": 0}, "intervalSeconds"),
    ({"intervalSeconds": 59}, "intervalSeconds"),           # the minimum is 60 s by default
    ({"intervalSeconds": -60}, "intervalSeconds"),
    ({"intervalSeconds": 604801}, "intervalSeconds"),       # longer than the seven-day expiry
    ({"intervalSeconds": 10**30}, "intervalSeconds"),
    ({"intervalSeconds": "3600"}, "intervalSeconds"),
    ({"intervalSeconds": 3600.5}, "intervalSeconds"),
    ({"intervalSeconds": True}, "intervalSeconds"),
    ({"intervalSeconds": 3600, "recurring": "yes"}, "recurring"),
    ({"intervalSeconds": 3600, "recurring": 1}, "recurring"),
    ({"intervalSeconds": 3600, "fireImmediately": "true"}, "fireImmediately"),
    ({"intervalSeconds": 3600, "inputs": ["url"]}, "inputs"),
    ({"intervalSeconds": 3600, "inputs": "url=x"}, "inputs"),
    ({"intervalSeconds": 3600, "owner": "someone"}, "owner"),
])
def test_invalid_fields(client, wf, fields, field):
    body = {"workflowId": wf, "inputs": INPUTS, **fields}
    problem = assert_problem(post(client, body), 400, "validation_failed")
    assert field in problem["errors"], problem


@pytest.mark.parametrize("workflow_id", [None, 5, "", "x" * 37, "a\x00b"])
def test_invalid_workflow_id(client, workflow_id):
    problem = assert_problem(post(client, {"workflowId": workflow_id, "intervalSeconds": 3600}), 400)
    assert "workflowId" in problem["errors"]


def test_missing_workflow_id(client):
    problem = assert_problem(post(client, {"intervalSeconds": 3600}), 400)
    assert "workflowId" in problem["errors"]


@pytest.mark.parametrize("raw,code", [
    (b"[]", "malformed_json"),
    (b'"schedule"', "malformed_json"),
    (b"42", "malformed_json"),
    (b"null", "malformed_json"),
    (b"{", "malformed_json"),
    (b'{"intervalSeconds": NaN}', "malformed_json"),
    (b"", "body_required"),
])
def test_bodies_that_are_not_json_objects(client, raw, code):
    resp = client.post("/api/agent/schedules", data=raw, content_type="application/json", headers=HEADERS)
    assert_problem(resp, 400, code)


def test_wrong_media_type(client, wf):
    resp = client.post("/api/agent/schedules", data=f'{{"workflowId": "{wf}", "intervalSeconds": 3600}}',
                       content_type="text/plain", headers=HEADERS)
    assert_problem(resp, 415)


def test_oversize_body_is_413(client, wf):
    body = {"workflowId": wf, "intervalSeconds": 3600, "inputs": {"url": "x" * (300 * 1024)}}
    assert_problem(post(client, body), 413)


@pytest.mark.parametrize("headers", [{}, {"X-Service-Token": "wrong"}, {"X-Service-Token": TOKEN + "x"}])
def test_token_is_required(client, wf, existing, headers):
    assert_problem(client.get("/api/agent/schedules", headers=headers), 401)
    assert_problem(client.get(f"/api/agent/schedules/{existing['id']}", headers=headers), 401)
    assert_problem(client.post("/api/agent/schedules", json={"workflowId": wf, "inputs": INPUTS,
                                                             "intervalSeconds": 3600}, headers=headers), 401)
    assert_problem(client.delete(f"/api/agent/schedules/{existing['id']}", headers=headers), 401)


def test_openapi_documents_the_schedule_routes(client):
    paths = client.get("/api/openapi.json", headers=HEADERS).json["paths"]
    assert {"get", "post"} <= set(paths["/api/agent/schedules"])
    assert {"get", "delete"} <= set(paths["/api/agent/schedules/{schedule_id}"])
