"""Shared pieces of the schedule tests: a published workflow with an echo tool, HTTP helpers, DB readers."""
import copy

import gevent

from core.tools import Tool
from hookspecs import hookimpl
from tests.conftest import HEADERS

INPUT_SCHEMA = {"type": "object", "required": ["url"], "additionalProperties": False,
                "properties": {"url": {"type": "string", "minLength": 1}, "n": {"type": "integer", "minimum": 0}}}
PLAN = {"goal": "Ping", "steps": [{"id": "ping", "tool": "sched_echo", "arguments": {"url": "{{inputs.url}}"}}]}
INPUTS = {"url": "https://example.org"}
FAST = {"schedules.min-interval-seconds": 1}


class EchoTool:
    """A test plugin: ``sched_echo`` records each call, so a fired run is visible end to end."""

    __name__ = "schedule_test_tools"

    def __init__(self):
        self.calls = []

    @hookimpl
    def register_tools(self, host):
        def echo(args, ctx):
            self.calls.append(args)
            return {"args": args}

        return [Tool("sched_echo", "Echo the arguments.", {"type": "object"}, echo, retry_safe=True)]


def workflow(client, *, publish=True, input_schema=None):
    """Create (and by default publish) a workflow; returns its id."""
    body = {"name": "Ping", "description": "Pings.", "inputSchema": copy.deepcopy(input_schema or INPUT_SCHEMA),
            "plan": copy.deepcopy(PLAN)}
    resp = client.post("/api/workflows", json=body, headers=HEADERS)
    assert resp.status_code == 201, resp.get_data(as_text=True)
    workflow_id = resp.json["id"]
    if publish:
        resp = client.post(f"/api/workflows/{workflow_id}/publish", json={"published": True}, headers=HEADERS)
        assert resp.status_code == 200, resp.get_data(as_text=True)
    return workflow_id


def schedule(client, workflow_id, **fields):
    body = {"workflowId": workflow_id, "inputs": dict(INPUTS), **fields}
    resp = client.post("/api/agent/schedules", json=body, headers=HEADERS)
    assert resp.status_code == 201, resp.get_data(as_text=True)
    return resp.json


def get(client, schedule_id):
    resp = client.get(f"/api/agent/schedules/{schedule_id}", headers=HEADERS)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.json


def listed(client):
    resp = client.get("/api/agent/schedules", headers=HEADERS)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.json


def wait_for(predicate, timeout=10.0, step=0.02):
    """Poll ``predicate`` until it returns something truthy; returns it."""
    deadline = gevent.get_hub().loop.now() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert gevent.get_hub().loop.now() < deadline, "condition not reached in time"
        gevent.sleep(step)


def schedule_tasks(client, schedule_id):
    """Tasks the schedule admitted (source ``schedule:<id>``), oldest first."""
    resp = client.get("/api/agent/tasks?limit=200", headers=HEADERS)
    assert resp.status_code == 200
    return sorted((t for t in resp.json if t["source"] == f"schedule:{schedule_id}"), key=lambda t: t["queuedAt"])
