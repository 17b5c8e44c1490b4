"""Shared pieces of the workflow tests: test tools, a sample definition, small HTTP helpers."""
import copy

import gevent

from core.tools import Tool
from hookspecs import hookimpl
from tests.conftest import HEADERS

INPUT_SCHEMA = {"type": "object", "required": ["url"], "additionalProperties": False,
                "properties": {"url": {"type": "string", "minLength": 1}, "n": {"type": "integer", "minimum": 0}}}

PLAN = {"goal": "Fetch and report", "steps": [
    {"id": "fetch", "title": "Fetch", "tool": "echo", "arguments": {"url": "{{inputs.url}}"}},
    {"id": "report", "tool": "echo", "arguments": {"got": "{{steps.fetch.output.args.url}}"}},
]}

# The editor's canvas: positions by compiled step index, and a graph with a sticky note the
# host knows nothing about. Key order, nesting and odd values must all come back as sent.
LAYOUT = {"1": {"x": 320.5, "y": -40}, "0": {"x": 0, "y": 0, "collapsed": True}}
GRAPH = {"nodes": [{"id": "n1", "type": "step", "data": {"step": 0}},
                   {"id": "note", "type": "sticky-note", "data": {"text": "Ünïcödé ✓ \"quoted\"\nline 2",
                                                                  "colour": "#ffe066", "size": [200, 120],
                                                                  "meta": None, "pinned": False}}],
         "edges": [{"source": "n1", "target": "n2", "label": None}], "viewport": {"zoom": 1.25}}


def body(**changes):
    data = {"name": "Fetch report", "description": "Fetches a page.", "inputSchema": INPUT_SCHEMA,
            "plan": PLAN, "layout": LAYOUT, "graph": GRAPH}
    data.update(changes)
    return copy.deepcopy(data)


class FlowTools:
    """A test plugin: an ``echo`` tool that records its calls and a ``typed`` one with a strict schema."""

    __name__ = "workflow_test_tools"

    def __init__(self):
        self.calls = []

    @hookimpl
    def register_tools(self, host):
        def echo(args, ctx):
            self.calls.append(args)
            return {"args": args}

        typed = {"type": "object", "required": ["count"], "additionalProperties": False,
                 "properties": {"count": {"type": "integer"}, "label": {"type": "string"}}}
        return [Tool("echo", "Echo the arguments.", {"type": "object"}, echo, retry_safe=True),
                Tool("typed", "Takes a count.", typed, lambda args, ctx: args["count"])]


def create(client, **changes):
    resp = client.post("/api/workflows", json=body(**changes), headers=HEADERS)
    assert resp.status_code == 201, resp.get_data(as_text=True)
    return resp.json


def get(client, workflow_id):
    resp = client.get(f"/api/workflows/{workflow_id}", headers=HEADERS)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.json


def tools_of(client):
    resp = client.get("/api/agent/tools", headers=HEADERS)
    assert resp.status_code == 200
    return {t["name"]: t for t in resp.json}


def wait_run(client, run_id, timeout=10.0):
    """Poll the run until it reaches a terminal state; returns its detail."""
    deadline = gevent.get_hub().loop.now() + timeout
    while True:
        detail = client.get(f"/api/agent/runs/{run_id}", headers=HEADERS).json
        if detail["status"] in ("complete", "failed", "cancelled"):
            return detail
        assert gevent.get_hub().loop.now() < deadline, f"run stayed {detail['status']}"
        gevent.sleep(0.01)
