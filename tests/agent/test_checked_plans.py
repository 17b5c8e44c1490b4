"""A stored draft is checked once per tool catalog: runs of the same draft reuse the check until the catalog changes.

A workflow's plan is checked when it is published, not when each run is admitted, so
its runs reach the engine even after the catalog changed: the engine's check decides.
"""
from core.tools import Tool
from tests.agent.run_end_support import finished_task
from tests.conftest import HEADERS

PLAN = {"steps": [{"id": "s", "tool": "shout", "arguments": {"text": "hi"}}]}


def shout_tool(schema=None):
    return Tool("shout", "Upper-cases text.", schema or {"type": "object", "properties": {"text": {"type": "string"}}},
                lambda args, ctx: {"text": args["text"].upper()}, source="test")


def make(make_app):
    app = make_app()
    client = app.test_client()
    client.environ_base["HTTP_X_SERVICE_TOKEN"] = HEADERS["X-Service-Token"]
    return app.extensions["agenthost"], client


def published(client):
    resp = client.post("/api/workflows", json={"name": "Shout", "plan": PLAN,
                                               "inputSchema": {"type": "object", "properties": {}}})
    assert resp.status_code == 201, resp.json
    assert client.post(f"/api/workflows/{resp.json['id']}/publish", json={"published": True}).status_code == 200
    return resp.json["id"]


def run_status(host, client, workflow_id):
    resp = client.post(f"/api/workflows/{workflow_id}/run", json={"inputs": {}, "config": {"planApproval": "auto"}})
    assert resp.status_code == 201, resp.json
    run_id = resp.json["runId"]
    finished_task(host, client, run_id)
    return client.get(f"/api/agent/runs/{run_id}").json


def test_runs_of_one_draft_follow_the_catalog_they_start_with(make_app):
    host, client = make(make_app)
    host.tools.add(shout_tool())
    wf = published(client)
    first, second = run_status(host, client, wf), run_status(host, client, wf)
    assert (first["status"], second["status"]) == ("complete", "complete")
    assert second["steps"][0]["result"] == {"text": "HI"}

    host.tools.remove("shout")  # the catalog changed: the same draft is checked again and refused
    gone = run_status(host, client, wf)
    assert gone["status"] == "failed" and "invalid plan" in gone["error"] and "shout" in gone["error"]

    # Back with a schema the literal argument no longer fits: checked again, refused again.
    host.tools.add(shout_tool({"type": "object", "properties": {"text": {"type": "integer"}}}))
    refused = run_status(host, client, wf)
    assert refused["status"] == "failed" and "invalid plan" in refused["error"]

    host.tools.remove("shout")
    host.tools.add(shout_tool())
    assert run_status(host, client, wf)["status"] == "complete"
