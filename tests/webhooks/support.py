"""Shared pieces of the webhook tests: a test tool plugin, a published workflow, trigger and hook helpers."""
import copy

import gevent

from core.tools import Tool, ToolError
from hookspecs import hookimpl
from tests.conftest import HEADERS

TRIGGERS = "/api/agent/webhook-triggers"
SECRET = "X-Service-Webhook-Secret"
EVENT = "X-Service-Event-Id"

INPUT_SCHEMA = {"type": "object", "required": ["order", "qty", "channel"], "additionalProperties": False,
                "properties": {"order": {"type": "string", "minLength": 1},
                               "qty": {"type": "integer", "minimum": 1},
                               "channel": {"type": "string", "enum": ["web", "shop"]}}}

PLAN = {"goal": "Record an order", "steps": [
    {"id": "record", "tool": "record", "arguments": {"order": "{{inputs.order}}", "qty": "{{inputs.qty}}",
                                                     "channel": "{{inputs.channel}}"}}]}


class HookTools:
    """A test plugin: ``record`` remembers its arguments, ``boom`` always fails."""

    __name__ = "webhook_test_tools"

    def __init__(self):
        self.calls = []

    @hookimpl
    def register_tools(self, host):
        def record(args, ctx):
            self.calls.append(args)
            return {"recorded": args}

        def boom(args, ctx):
            raise ToolError("the downstream system refused the order")

        return [Tool("record", "Record an order.", {"type": "object"}, record),
                Tool("boom", "Always fails.", {"type": "object"}, boom)]


def workflow_body(**changes):
    data = {"name": "Order hook", "description": "Records orders.", "inputSchema": INPUT_SCHEMA, "plan": PLAN}
    data.update(changes)
    return copy.deepcopy(data)


def published_workflow(client, **changes):
    """Create and publish a workflow; returns its id."""
    resp = client.post("/api/workflows", json=workflow_body(**changes), headers=HEADERS)
    assert resp.status_code == 201, resp.get_data(as_text=True)
    workflow_id = resp.json["id"]
    resp = client.post(f"/api/workflows/{workflow_id}/publish", json={"published": True}, headers=HEADERS)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return workflow_id


DEFAULTS = {"qty": 1, "channel": "web"}


def create_trigger(client, workflow_id, **fields):
    """A trigger (defaultInputs qty 1, channel web unless given); the answer holds its secret."""
    fields.setdefault("defaultInputs", dict(DEFAULTS))
    resp = client.post(TRIGGERS, json={"workflowId": workflow_id, **fields}, headers=HEADERS)
    assert resp.status_code == 201, resp.get_data(as_text=True)
    return resp.json


def deliver(client, trigger, body=None, *, secret=None, event_id=None, **kwargs):
    """POST to the trigger's hook with its secret (or ``secret``) and an optional event id."""
    headers = {SECRET: trigger["secret"] if secret is None else secret}
    if event_id is not None:
        headers[EVENT] = event_id
    headers.update(kwargs.pop("headers", {}))
    if body is None and "data" not in kwargs:
        body = {"order": "A-1"}
    if body is not None:
        kwargs["json"] = body
    return client.post(trigger["hookPath"], headers=headers, **kwargs)


def deliveries(client, trigger_id, query=""):
    return client.get(f"{TRIGGERS}/{trigger_id}/deliveries{query}", headers=HEADERS)


def listed(client):
    resp = client.get(TRIGGERS, headers=HEADERS)
    assert resp.status_code == 200
    return resp.json


def wait_task(client, task_id, timeout=10.0):
    """The task once it is terminal (long-poll)."""
    resp = client.get(f"/api/agent/tasks/{task_id}?timeoutMs={int(timeout * 1000)}", headers=HEADERS)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.json["state"] in ("succeeded", "failed", "cancelled"), resp.json
    return resp.json


def wait_until(predicate, timeout=5.0):
    with gevent.Timeout(timeout):
        while not predicate():
            gevent.sleep(0.005)


def webhook_tasks(host, trigger_id):
    """Every task a trigger admitted, read straight from the task table."""
    from sqlalchemy import select

    from core.tasks import Task
    with host.db.session() as s:
        return s.execute(select(Task.id).where(Task.source == f"webhook:{trigger_id}")).scalars().all()


def delivery_rows(host, trigger_id):
    """Every stored delivery row of a trigger (the claims), straight from the table."""
    from sqlalchemy import select

    from builtin_plugins.webhooks.models import WebhookDelivery
    with host.db.session() as s:
        return s.execute(select(WebhookDelivery).where(WebhookDelivery.trigger_id == trigger_id)).scalars().all()
