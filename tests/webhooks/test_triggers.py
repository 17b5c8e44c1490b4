"""Managing webhook triggers: create (secret shown once), list, rotate-secret, delete, delivery history."""
import hashlib
import re

import pytest
from sqlalchemy import select

from builtin_plugins.webhooks.models import WebhookTrigger
from tests.conftest import HEADERS
from tests.core.problems import assert_problem

from .support import (TRIGGERS, HookTools, create_trigger, deliver, deliveries, listed, published_workflow,
                      wait_task, workflow_body)

SECRET_RE = re.compile(r"^[A-Za-z0-9_-]{43,}$")  # >= 32 random bytes, url-safe base64


@pytest.fixture
def app(make_app):
    return make_app(plugins=[HookTools()])


@pytest.fixture
def client(app):
    return app.test_client()


def stored(app, trigger_id):
    with app.extensions["agenthost"].db.session() as s:
        return s.execute(select(WebhookTrigger).where(WebhookTrigger.id == trigger_id)).scalar_one()


def test_create_shows_the_secret_once_and_stores_only_its_hash(app, client):
    workflow_id = published_workflow(client)
    trigger = create_trigger(client, workflow_id, name="Shop orders", defaultInputs={"channel": "shop"},
                             permissionMode="ask")
    assert SECRET_RE.match(trigger["secret"])
    assert trigger["triggerId"] and trigger["hookPath"] == f"/api/workflow-hooks/{trigger['triggerId']}"
    assert {k: trigger[k] for k in ("workflowId", "name", "defaultInputs", "permissionMode", "active")} == {
        "workflowId": workflow_id, "name": "Shop orders", "defaultInputs": {"channel": "shop"},
        "permissionMode": "ask", "active": True}
    row = stored(app, trigger["triggerId"])
    assert row.secret_hash == hashlib.sha256(trigger["secret"].encode()).hexdigest()
    assert trigger["secret"] not in str([getattr(row, c.key) for c in WebhookTrigger.__table__.columns])
    shown = listed(client)
    assert [t["triggerId"] for t in shown] == [trigger["triggerId"]]
    assert "secret" not in shown[0] and trigger["secret"] not in str(shown)


def test_each_trigger_gets_its_own_random_secret(client):
    workflow_id = published_workflow(client)
    secrets = {create_trigger(client, workflow_id)["secret"] for _ in range(3)}
    assert len(secrets) == 3


def test_create_defaults_name_permission_mode_and_inputs(client):
    workflow_id = published_workflow(client, name="Nightly import")
    resp = client.post(TRIGGERS, json={"workflowId": workflow_id}, headers=HEADERS)
    assert resp.status_code == 201
    assert resp.json["name"] == "Nightly import"
    assert resp.json["permissionMode"] == "auto"  # nobody watches a webhook run
    assert resp.json["defaultInputs"] == {}


def test_an_unpublished_workflow_cannot_get_a_trigger(client):
    resp = client.post("/api/workflows", json={"name": "Draft", "inputSchema": {"type": "object"},
                                               "plan": {"goal": "g", "steps": [{"tool": "record"}]}},
                       headers=HEADERS)
    resp = client.post(TRIGGERS, json={"workflowId": resp.json["id"]}, headers=HEADERS)
    assert_problem(resp, 409, "workflow_not_published")
    assert listed(client) == []


def test_an_unknown_workflow_is_404(client):
    resp = client.post(TRIGGERS, json={"workflowId": "no-such-workflow"}, headers=HEADERS)
    assert_problem(resp, 404)
    assert listed(client) == []


def test_a_workflow_using_file_tools_is_refused(client):
    """File tools work only inside grants a person gives; a webhook run has nobody to give them."""
    steps = [{"id": "read", "tool": "read_file", "arguments": {"path": "/tmp/in.txt"}},
             {"id": "write", "tool": "write_file", "arguments": {"path": "/tmp/out.txt", "content": "x"}}]
    workflow_id = published_workflow(client, inputSchema={"type": "object"}, plan={"goal": "g", "steps": steps})
    resp = client.post(TRIGGERS, json={"workflowId": workflow_id}, headers=HEADERS)
    body = assert_problem(resp, 409, "workflow_needs_file_grants")
    assert body["steps"] == ["steps.0 (read): read_file", "steps.1 (write): write_file"]
    assert listed(client) == []


def test_a_workflow_calling_a_file_workflow_is_refused(client):
    inner = published_workflow(client, name="Lister", inputSchema={"type": "object"},
                               plan={"goal": "g", "steps": [{"tool": "list_directory", "arguments": {"path": "/tmp"}}]})
    tool = client.get(f"/api/workflows/{inner}", headers=HEADERS).json["toolName"]
    by_tool = published_workflow(client, name="Outer", inputSchema={"type": "object"},
                                 plan={"goal": "g", "steps": [{"tool": tool}]})
    by_id = published_workflow(client, name="Runner", inputSchema={"type": "object"},
                               plan={"goal": "g", "steps": [{"tool": "run_workflow",
                                                             "arguments": {"workflowId": inner}}]})
    for workflow_id in (by_tool, by_id):
        resp = client.post(TRIGGERS, json={"workflowId": workflow_id}, headers=HEADERS)
        assert_problem(resp, 409, "workflow_needs_file_grants")
    assert listed(client) == []


BAD_FIELDS = [
    ({}, "workflowId"),
    ({"workflowId": 7}, "workflowId"),
    ({"workflowId": ""}, "workflowId"),
    ({"workflowId": "x" * 37}, "workflowId"),
    ({"workflowId": "W", "name": ""}, "name"),
    ({"workflowId": "W", "name": "   "}, "name"),
    ({"workflowId": "W", "name": "n" * 201}, "name"),
    ({"workflowId": "W", "name": "nul\x00"}, "name"),
    ({"workflowId": "W", "defaultInputs": [1]}, "defaultInputs"),
    ({"workflowId": "W", "defaultInputs": "x"}, "defaultInputs"),
    ({"workflowId": "W", "permissionMode": "never"}, "permissionMode"),
    ({"workflowId": "W", "permissionMode": None}, "permissionMode"),
    ({"workflowId": "W", "secret": "mine"}, "secret"),
]


def test_create_refuses_bad_fields(client):
    workflow_id = published_workflow(client)
    for body, field in BAD_FIELDS:
        if body.get("workflowId") == "W":
            body = {**body, "workflowId": workflow_id}
        problem = assert_problem(client.post(TRIGGERS, json=body, headers=HEADERS), 400)
        assert field in problem["errors"], (body, problem)
    assert listed(client) == []


def test_default_inputs_must_fit_the_input_schema(client):
    """Defaults need not be complete (the body adds the rest), but what they say must be valid."""
    workflow_id = published_workflow(client)
    resp = client.post(TRIGGERS, json={"workflowId": workflow_id,
                                       "defaultInputs": {"qty": "many", "channel": "fax", "extra": 1}},
                       headers=HEADERS)
    problem = assert_problem(resp, 400, "validation_failed")
    assert {"defaultInputs.qty", "defaultInputs.channel", "defaultInputs.extra"} <= set(problem["errors"])
    assert listed(client) == []


def test_oversize_default_inputs_are_refused(client):
    workflow_id = published_workflow(client, inputSchema={"type": "object"},
                                     plan={"goal": "g", "steps": [{"tool": "record"}]})
    resp = client.post(TRIGGERS, json={"workflowId": workflow_id, "defaultInputs": {"pad": "x" * (256 * 1024)}},
                       headers=HEADERS)
    assert "defaultInputs" in assert_problem(resp, 400)["errors"]
    assert listed(client) == []


def test_create_refuses_malformed_bodies(client):
    for kwargs, status in [({"data": "{not json", "content_type": "application/json"}, 400),
                           ({"data": "[]", "content_type": "application/json"}, 400),
                           ({"data": "workflowId=x", "content_type": "application/x-www-form-urlencoded"}, 415),
                           ({"data": "", "content_type": "application/json"}, 400)]:
        assert_problem(client.post(TRIGGERS, headers=HEADERS, **kwargs), status)
    assert listed(client) == []


def test_rotate_secret_invalidates_the_old_secret_at_once(app, client):
    trigger = create_trigger(client, published_workflow(client))
    old = trigger["secret"]
    resp = client.post(f"{TRIGGERS}/{trigger['triggerId']}/rotate-secret", headers=HEADERS)
    assert resp.status_code == 200
    new = resp.json["secret"]
    assert SECRET_RE.match(new) and new != old
    assert resp.json["triggerId"] == trigger["triggerId"] and resp.json["secretRotatedAt"] >= trigger["createdAt"]
    assert_problem(deliver(client, trigger, secret=old), 401, "invalid_webhook_secret")
    assert deliver(client, trigger, secret=new).status_code == 202
    assert stored(app, trigger["triggerId"]).secret_hash == hashlib.sha256(new.encode()).hexdigest()
    assert "secret" not in listed(client)[0]


def two_hosts(make_app):
    """Two hosts on one database (the same data directory), as when they share it."""
    return make_app(plugins=[HookTools()]).test_client(), make_app(plugins=[HookTools()]).test_client()


def test_a_secret_rotated_by_another_host_stops_working_here_at_once(make_app):
    here, there = two_hosts(make_app)
    trigger = create_trigger(here, published_workflow(here))
    first = deliver(here, trigger, event_id="order-1")
    assert first.status_code == 202  # this host now knows the trigger
    resp = there.post(f"{TRIGGERS}/{trigger['triggerId']}/rotate-secret", headers=HEADERS)
    assert resp.status_code == 200
    assert_problem(deliver(here, trigger), 401, "invalid_webhook_secret")
    # A repeated event id with the old secret learns nothing about the original delivery.
    assert_problem(deliver(here, trigger, event_id="order-1"), 401, "invalid_webhook_secret")
    new = {**trigger, "secret": resp.json["secret"]}
    again = deliver(here, new, event_id="order-1")
    assert again.status_code == 200 and again.json["taskId"] == first.json["taskId"]
    assert deliver(here, new, event_id="order-2").status_code == 202


def test_a_trigger_deleted_by_another_host_is_refused_here(make_app):
    here, there = two_hosts(make_app)
    trigger = create_trigger(here, published_workflow(here))
    assert deliver(here, trigger, event_id="order-1").status_code == 202
    assert there.delete(f"{TRIGGERS}/{trigger['triggerId']}", headers=HEADERS).status_code == 200
    assert_problem(deliver(here, trigger), 401, "invalid_webhook_secret")
    assert_problem(deliver(here, trigger, event_id="order-1"), 401, "invalid_webhook_secret")


def test_while_the_queue_is_full_an_old_secret_gets_401_not_the_original(make_app):
    here, there = two_hosts(make_app)
    host = here.application.extensions["agenthost"]
    for app_client in (here, there):
        app_client.application.extensions["agenthost"].tasks.stop()  # what is admitted stays queued
    trigger = create_trigger(here, published_workflow(here))
    first = deliver(here, trigger, event_id="early")
    assert first.status_code == 202
    for _ in range(23):
        host.tasks.admit("local", "normal", "filler", {})
    assert deliver(here, trigger, event_id="late").status_code == 429  # known full from now on
    assert there.post(f"{TRIGGERS}/{trigger['triggerId']}/rotate-secret", headers=HEADERS).status_code == 200
    assert_problem(deliver(here, trigger, event_id="early"), 401, "invalid_webhook_secret")


def test_delete_disables_the_trigger_for_good(app, make_app, data_dir, client):
    trigger = create_trigger(client, published_workflow(client))
    path = f"{TRIGGERS}/{trigger['triggerId']}"
    resp = client.delete(path, headers=HEADERS)
    assert resp.status_code == 200 and resp.json == {"ok": True, "triggerId": trigger["triggerId"]}
    assert listed(client) == []
    assert_problem(deliver(client, trigger), 401, "invalid_webhook_secret")
    assert_problem(client.get(f"{path}/deliveries", headers=HEADERS), 404)
    assert_problem(client.post(f"{path}/rotate-secret", headers=HEADERS), 404)
    assert_problem(client.delete(path, headers=HEADERS), 404)
    row = stored(app, trigger["triggerId"])
    assert row.active is False and row.secret_hash == "" and row.disabled_reason == "deleted"
    # Durable: a restarted host keeps it disabled.
    again = make_app(plugins=[HookTools()], data_dir=data_dir).test_client()
    assert listed(again) == []
    assert_problem(deliver(again, trigger), 401, "invalid_webhook_secret")


def test_unknown_trigger_ids_are_404_on_the_management_endpoints(client):
    for path in (f"{TRIGGERS}/nope/deliveries", f"{TRIGGERS}/{'x' * 36}/deliveries"):
        assert_problem(client.get(path, headers=HEADERS), 404)
    assert_problem(client.post(f"{TRIGGERS}/nope/rotate-secret", headers=HEADERS), 404)
    assert_problem(client.delete(f"{TRIGGERS}/nope", headers=HEADERS), 404)
    assert client.delete(f"{TRIGGERS}/{'x' * 37}", headers=HEADERS).status_code == 404


def test_another_owners_triggers_are_invisible(app, client):
    host = app.extensions["agenthost"]
    workflows, webhooks = host.service("workflows"), host.service("webhooks")
    theirs = workflows.create(workflow_body(), owner="someone-else")
    workflows.publish(theirs["id"], True, owner="someone-else")
    other = webhooks.create({"workflowId": theirs["id"], "defaultInputs": {}}, owner="someone-else")
    assert listed(client) == []
    path = f"{TRIGGERS}/{other['triggerId']}"
    assert_problem(client.get(f"{path}/deliveries", headers=HEADERS), 404)
    assert_problem(client.post(f"{path}/rotate-secret", headers=HEADERS), 404)
    assert_problem(client.delete(path, headers=HEADERS), 404)
    assert stored(app, other["triggerId"]).active is True
    # Nor can the local user reach someone else's workflow.
    assert_problem(client.post(TRIGGERS, json={"workflowId": theirs["id"]}, headers=HEADERS), 404)


def test_delivery_history_is_newest_first_limited_and_never_shows_payloads(client):
    trigger = create_trigger(client, published_workflow(client))
    answers = []
    for i in range(22):
        event = f"evt-secret-looking-{i}" if i % 2 else None
        resp = deliver(client, trigger, {"order": f"payload-{i}"}, event_id=event)
        assert resp.status_code == 202, resp.json
        answers.append(resp.json)
        wait_task(client, resp.json["taskId"])
    resp = deliveries(client, trigger["triggerId"])
    assert resp.status_code == 200
    rows = resp.json
    assert len(rows) == 20  # the default limit
    assert [r["deliveryId"] for r in rows] == [a["deliveryId"] for a in reversed(answers)][:20]
    assert set(rows[0]) == {"deliveryId", "taskId", "runId", "status", "receivedAt", "startedAt", "finishedAt",
                            "error", "idempotencyKeySupplied"}
    assert rows[0]["status"] == "succeeded" and rows[0]["startedAt"] and rows[0]["finishedAt"]
    assert rows[0]["idempotencyKeySupplied"] is True and rows[1]["idempotencyKeySupplied"] is False
    text = resp.get_data(as_text=True)
    assert "payload-" not in text and "evt-secret-looking" not in text and trigger["secret"] not in text
    assert len(deliveries(client, trigger["triggerId"], "?limit=1").json) == 1
    assert len(deliveries(client, trigger["triggerId"], "?limit=100").json) == 22


def test_delivery_limit_outside_1_to_100_is_400(client):
    trigger = create_trigger(client, published_workflow(client))
    for query in ("?limit=0", "?limit=101", "?limit=-1", "?limit=abc", "?limit=1.5", "?limit="):
        problem = assert_problem(deliveries(client, trigger["triggerId"], query), 400)
        assert "limit" in problem["errors"], query


def test_management_endpoints_need_the_token(client):
    trigger = create_trigger(client, published_workflow(client))
    path = f"{TRIGGERS}/{trigger['triggerId']}"
    for method, url in (("get", TRIGGERS), ("post", TRIGGERS), ("get", f"{path}/deliveries"),
                        ("post", f"{path}/rotate-secret"), ("delete", path)):
        resp = getattr(client, method)(url, headers={"X-Service-Webhook-Secret": trigger["secret"]})
        assert_problem(resp, 401, "invalid_token")
    assert [t["active"] for t in listed(client)] == [True]
