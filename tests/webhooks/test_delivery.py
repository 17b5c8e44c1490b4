"""POST /api/workflow-hooks/{triggerId}: the secret, the body rules, idempotent event ids and the run it starts."""
import pytest
import requests

from tests.conftest import HEADERS
from tests.core.problems import assert_problem, assert_requests_problem

from .support import (EVENT, SECRET, TRIGGERS, HookTools, create_trigger, deliver, deliveries, delivery_rows,
                      published_workflow, wait_task, wait_until, webhook_tasks)

KIB = 1024


@pytest.fixture
def tools():
    return HookTools()


@pytest.fixture
def app(make_app, tools):
    return make_app(plugins=[tools])


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def host(app):
    return app.extensions["agenthost"]


@pytest.fixture
def trigger(client):
    return create_trigger(client, published_workflow(client))


def nothing_admitted(host, trigger):
    assert webhook_tasks(host, trigger["triggerId"]) == []
    assert delivery_rows(host, trigger["triggerId"]) == []


def run_detail(client, run_id):
    return client.get(f"/api/agent/runs/{run_id}", headers=HEADERS).json


def test_a_new_event_is_admitted_with_202_and_runs_on_the_overlaid_inputs(client, host, tools, trigger):
    resp = deliver(client, trigger, {"order": "A-7", "channel": "shop"}, event_id="evt-1")
    assert resp.status_code == 202
    body = resp.json
    assert body["status"] == "queued" and body["duplicate"] is False and body["idempotencyKeySupplied"] is True
    assert body["deliveryId"] and body["taskId"] and body["runId"]
    task = wait_task(client, body["taskId"])
    assert task["state"] == "succeeded" and task["priority"] == "normal"
    assert task["source"] == f"webhook:{trigger['triggerId']}" and task["runId"] == body["runId"]
    # The body's keys replace the defaults' (qty 1, channel web) one by one.
    assert tools.calls == [{"order": "A-7", "qty": 1, "channel": "shop"}]
    run = run_detail(client, body["runId"])
    assert run["status"] == "complete" and run["workflowId"] == trigger["workflowId"]
    assert run["config"]["planApproval"] == "auto" and run["config"]["permissionMode"] == "auto"
    assert run["config"].get("fileGrants", []) == []


def test_a_repeated_event_id_answers_200_with_the_original_delivery(client, host, tools, trigger):
    first = deliver(client, trigger, {"order": "A-1"}, event_id="evt-1").json
    wait_task(client, first["taskId"])
    again = deliver(client, trigger, {"order": "changed"}, event_id="evt-1")
    assert again.status_code == 200
    assert again.json["duplicate"] is True
    assert {k: again.json[k] for k in ("deliveryId", "taskId", "runId")} == \
        {k: first[k] for k in ("deliveryId", "taskId", "runId")}
    assert again.json["status"] == "succeeded"  # the original's live state
    assert tools.calls == [{"order": "A-1", "qty": 1, "channel": "web"}]
    assert len(webhook_tasks(host, trigger["triggerId"])) == 1
    assert len(delivery_rows(host, trigger["triggerId"])) == 1


def test_without_an_event_id_every_delivery_is_new(client, host, trigger):
    a, b = deliver(client, trigger), deliver(client, trigger)
    assert a.status_code == b.status_code == 202
    assert a.json["taskId"] != b.json["taskId"] and a.json["idempotencyKeySupplied"] is False
    assert len(webhook_tasks(host, trigger["triggerId"])) == 2


def test_event_ids_are_scoped_to_their_trigger(client, host):
    workflow_id = published_workflow(client)
    one, two = create_trigger(client, workflow_id), create_trigger(client, workflow_id)
    assert deliver(client, one, event_id="shared").status_code == 202
    assert deliver(client, two, event_id="shared").status_code == 202
    assert deliver(client, two, event_id="shared").status_code == 200


def test_event_ids_are_compared_exactly(client, trigger):
    assert deliver(client, trigger, event_id="Evt").status_code == 202
    assert deliver(client, trigger, event_id="evt").status_code == 202
    assert deliver(client, trigger, event_id="Evt ").status_code == 202
    assert deliver(client, trigger, event_id="Evt").status_code == 200


def test_an_event_id_of_200_characters_is_accepted(client, trigger):
    assert deliver(client, trigger, event_id="e" * 200).status_code == 202
    assert deliver(client, trigger, event_id="e" * 200).status_code == 200


def test_an_event_id_outside_1_to_200_characters_is_400(client, host, trigger):
    for event_id in ("e" * 201, "é" * 201, ""):
        problem = assert_problem(deliver(client, trigger, event_id=event_id), 400, "validation_failed")
        assert EVENT in problem["errors"]
    nothing_admitted(host, trigger)


def test_missing_wrong_and_unknown_all_answer_the_same_401(client, host, trigger):
    """A caller without the secret learns nothing, not even whether the trigger exists."""
    other = create_trigger(client, trigger["workflowId"])
    deleted = create_trigger(client, trigger["workflowId"])
    assert client.delete(f"{TRIGGERS}/{deleted['triggerId']}", headers=HEADERS).status_code == 200
    answers = [
        client.post(trigger["hookPath"], json={"order": "A"}),                      # no secret at all
        client.post(trigger["hookPath"], json={"order": "A"}, headers=HEADERS),     # the launch token is no key
        deliver(client, trigger, secret=""),
        deliver(client, trigger, secret=trigger["secret"][:-1]),
        deliver(client, trigger, secret=trigger["secret"] + "x"),
        deliver(client, trigger, secret=other["secret"]),                           # another trigger's secret
        deliver(client, trigger, secret="ünïcödé"),
        deliver(client, {**trigger, "hookPath": "/api/workflow-hooks/no-such-trigger"}),
        deliver(client, {**trigger, "hookPath": "/api/workflow-hooks/" + "x" * 300}),
        deliver(client, deleted),
    ]
    bodies = [assert_problem(resp, 401, "invalid_webhook_secret") for resp in answers]
    assert all(body == bodies[0] for body in bodies)
    assert all(resp.headers["WWW-Authenticate"] == "Service-Webhook-Secret" for resp in answers)
    nothing_admitted(host, trigger)
    nothing_admitted(host, other)


def test_the_secret_is_checked_before_the_body(client, host, trigger):
    """No caller without the secret gets to learn the body rules."""
    resp = deliver(client, trigger, secret="wrong", data="not json", content_type="text/plain")
    assert_problem(resp, 401)


def test_a_body_over_256_kib_is_413(client, host, trigger):
    padded = {"order": "A", "pad": "x" * (256 * KIB)}
    assert_problem(deliver(client, trigger, padded), 413, "payload_too_large")
    nothing_admitted(host, trigger)


def test_a_body_of_exactly_256_kib_is_read(client, host, trigger):
    """At the limit the body is parsed (and here refused by the schema, which has no ``pad``)."""
    head = '{"order": "A", "pad": "'
    raw = head + "x" * (256 * KIB - len(head) - 2) + '"}'
    assert len(raw) == 256 * KIB
    problem = assert_problem(deliver(client, trigger, data=raw, content_type="application/json"), 400)
    assert [key for key in problem["errors"] if key.startswith("inputs")]
    nothing_admitted(host, trigger)


def test_a_body_that_is_not_a_json_object_is_400(client, host, trigger):
    for raw in ("[]", '"text"', "1", "null", "true", '[{"order": "A"}]'):
        problem = assert_problem(deliver(client, trigger, data=raw, content_type="application/json"), 400)
        assert problem["errors"] == {"body": ["Must be a JSON object."]}, raw
    nothing_admitted(host, trigger)


def test_malformed_json_is_400(client, host, trigger):
    for raw in ("{", '{"order": }', "{'order': 'A'}", '{"n": NaN}', '{"n": 1e999}', b'{"order": "\xff"}'):
        resp = deliver(client, trigger, data=raw, content_type="application/json")
        assert_problem(resp, 400, "malformed_json")
    nothing_admitted(host, trigger)


def test_other_media_types_are_415(client, host, trigger):
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/xml", None):
        resp = deliver(client, trigger, data='{"order": "A"}', content_type=content_type)
        assert_problem(resp, 415, "unsupported_media_type")
    nothing_admitted(host, trigger)


def test_a_json_suffix_media_type_is_accepted(client, trigger):
    resp = deliver(client, trigger, data='{"order": "A"}', content_type="application/vnd.shop+json; charset=utf-8")
    assert resp.status_code == 202


def test_inputs_that_fail_the_input_schema_are_400_per_field(client, host, trigger):
    resp = deliver(client, trigger, {"order": "", "qty": 0, "channel": "fax", "extra": True})
    problem = assert_problem(resp, 400, "validation_failed")
    assert {"inputs.order", "inputs.qty", "inputs.channel"} <= set(problem["errors"])
    assert "extra" in str(problem["errors"])
    nothing_admitted(host, trigger)


def test_an_empty_body_runs_on_the_defaults_alone(client, tools):
    trigger = create_trigger(client, published_workflow(client),
                             defaultInputs={"order": "standing", "qty": 2, "channel": "web"})
    resp = deliver(client, trigger, data=b"")
    assert resp.status_code == 202
    wait_task(client, resp.json["taskId"])
    assert tools.calls == [{"order": "standing", "qty": 2, "channel": "web"}]


def test_an_empty_body_still_needs_the_required_inputs(client, host, trigger):
    problem = assert_problem(deliver(client, trigger, data=b""), 400)
    assert "inputs.order" in problem["errors"]
    nothing_admitted(host, trigger)


def test_a_workflow_unpublished_after_create_refuses_deliveries(client, host, trigger):
    resp = client.post(f"/api/workflows/{trigger['workflowId']}/publish", json={"published": False},
                       headers=HEADERS)
    assert resp.status_code == 200
    assert_problem(deliver(client, trigger, event_id="e"), 409, "workflow_not_published")
    nothing_admitted(host, trigger)


def test_a_failed_run_shows_in_the_delivery_row(client):
    trigger = create_trigger(client, published_workflow(
        client, inputSchema={"type": "object"}, plan={"goal": "g", "steps": [{"tool": "boom"}]}),
        defaultInputs={})
    resp = deliver(client, trigger, {})
    assert resp.status_code == 202
    wait_task(client, resp.json["taskId"])
    row = deliveries(client, trigger["triggerId"]).json[0]
    assert row["status"] == "failed" and "refused the order" in row["error"]


@pytest.mark.parametrize("mode,status", [("auto", "complete"), ("ask", "awaiting_step_approval")])
def test_the_trigger_permission_mode_decides_who_releases_step_gates(client, mode, status):
    plan = {"goal": "g", "steps": [{"tool": "record", "arguments": {"order": "{{inputs.order}}"}, "approval": True}]}
    trigger = create_trigger(client, published_workflow(client, plan=plan), permissionMode=mode)
    run_id = deliver(client, trigger).json["runId"]
    wait_until(lambda: run_detail(client, run_id)["status"] == status)
    assert run_detail(client, run_id)["config"]["permissionMode"] == mode


def test_the_hook_is_documented_without_the_token_scheme(client):
    spec = client.get("/api/openapi.json", headers=HEADERS).json
    hook = spec["paths"]["/api/workflow-hooks/{trigger_id}"]["post"]
    assert "security" not in hook
    assert {"202", "401", "413", "415", "429"} <= set(hook["responses"])
    listing = spec["paths"]["/api/agent/webhook-triggers"]["get"]
    assert listing["security"] == [{"serviceToken": []}]


def test_a_chunked_body_over_256_kib_is_413_over_a_real_socket(app, host, client, live_server, trigger):
    """Without a Content-Length the body is still read only up to the limit."""
    base = live_server(app)

    def chunks():
        yield b'{"order": "A", "pad": "'
        for _ in range(65):
            yield b"x" * (4 * KIB)
        yield b'"}'

    resp = requests.post(base + trigger["hookPath"], data=chunks(), timeout=10,
                         headers={SECRET: trigger["secret"], "Content-Type": "application/json"})
    assert_requests_problem(resp, 413, "payload_too_large")
    small = requests.post(base + trigger["hookPath"], json={"order": "A"}, timeout=10,
                          headers={SECRET: trigger["secret"]})
    assert small.status_code == 202
    assert len(webhook_tasks(host, trigger["triggerId"])) == 1


def test_a_delivery_queued_behind_a_running_one_starts_when_that_one_ends(make_app, tools):
    """No further traffic and no dispatcher poll (an hour here) is needed to start it.

    Fails while core/tasks.py wakes the dispatcher before the finished task's greenlet
    has left the pool (the dispatcher then sees no free slot and sleeps until its poll).
    """
    app = make_app(plugins=[tools], config={"tasks.max-running": 1, "tasks.poll-seconds": 3600})
    client = app.test_client()
    trigger = create_trigger(client, published_workflow(client))
    first, second = deliver(client, trigger, event_id="1"), deliver(client, trigger, event_id="2")
    assert first.status_code == second.status_code == 202
    assert wait_task(client, first.json["taskId"])["state"] == "succeeded"
    assert wait_task(client, second.json["taskId"])["state"] == "succeeded"
