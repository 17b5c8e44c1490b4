"""POST /api/workflows/{id}/run: inputs checked against the inputSchema, the published snapshot preferred."""
import gevent
import pytest

from tests.conftest import HEADERS
from tests.core.problems import assert_problem
from tests.core.shared_app import module_app
from tests.workflows.support import FlowTools, body, create, wait_run

AUTO = {"planApproval": "auto", "permissionMode": "auto"}


@pytest.fixture
def tools():
    return FlowTools()


@pytest.fixture
def client(make_app, tools):
    return make_app(plugins=[tools]).test_client()


SHARED_TOOLS = FlowTools()


@pytest.fixture(scope="module")
def shared_app(tmp_path_factory):
    yield from module_app(tmp_path_factory, plugins=[SHARED_TOOLS])


@pytest.fixture
def refused(shared_app):
    """A client of the module's app and a workflow; afterwards no run started and no tool was called."""
    client = shared_app.test_client()
    wf = create(client)
    before = (runs(client), len(SHARED_TOOLS.calls))
    yield client, wf
    assert (runs(client), len(SHARED_TOOLS.calls)) == before


def marker_plan(marker):
    """A plan whose one step shows which version ran."""
    return {"goal": marker, "steps": [{"id": "mark", "tool": "echo",
                                       "arguments": {"marker": marker, "url": "{{inputs.url}}"}}]}


def start(client, wid, inputs, config=AUTO):
    resp = client.post(f"/api/workflows/{wid}/run", json={"inputs": inputs, "config": config}, headers=HEADERS)
    assert resp.status_code == 201, resp.get_data(as_text=True)
    assert set(resp.json) == {"runId"}
    return resp.json["runId"]


def runs(client):
    return client.get("/api/agent/runs", headers=HEADERS).json


def test_an_unpublished_workflow_runs_its_draft(client, tools):
    wf = create(client, plan=marker_plan("draft-1"))
    client.put(f"/api/workflows/{wf['id']}", json=body(plan=marker_plan("draft-2")), headers=HEADERS)
    detail = wait_run(client, start(client, wf["id"], {"url": "https://example.test/a"}))
    assert detail["status"] == "complete", detail
    assert detail["workflowId"] == wf["id"] and detail["workflowRevision"] == 2
    assert detail["inputs"] == {"url": "https://example.test/a"}
    assert tools.calls == [{"marker": "draft-2", "url": "https://example.test/a"}]


def test_a_published_workflow_runs_its_active_snapshot_not_the_later_draft(client, tools):
    wf = create(client, plan=marker_plan("published"))
    client.post(f"/api/workflows/{wf['id']}/publish", json={"published": True}, headers=HEADERS)
    client.put(f"/api/workflows/{wf['id']}", json=body(plan=marker_plan("draft edit")), headers=HEADERS)
    detail = wait_run(client, start(client, wf["id"], {"url": "u", "n": 2}))
    assert detail["status"] == "complete", detail
    assert detail["workflowRevision"] == 1
    assert [s["arguments"]["marker"] for s in detail["plan"]["steps"]] == ["published"]
    assert tools.calls == [{"marker": "published", "url": "u"}]

    # Unpublished again, the draft is what runs.
    client.post(f"/api/workflows/{wf['id']}/publish", json={"published": False}, headers=HEADERS)
    detail = wait_run(client, start(client, wf["id"], {"url": "v"}))
    assert detail["workflowRevision"] == 2 and tools.calls[-1] == {"marker": "draft edit", "url": "v"}


def test_a_run_waits_for_plan_approval_by_default(client, tools):
    wf = create(client)
    run_id = start(client, wf["id"], {"url": "u"}, config={})
    for _ in range(500):
        status = client.get(f"/api/agent/runs/{run_id}", headers=HEADERS).json["status"]
        if status == "awaiting_plan_approval":
            break
        gevent.sleep(0.01)  # the engine runs in greenlets
    assert status == "awaiting_plan_approval" and tools.calls == []
    assert client.post(f"/api/agent/{run_id}/approve", json={}, headers=HEADERS).status_code == 200
    assert wait_run(client, run_id)["status"] == "complete"
    assert len(tools.calls) == 2


@pytest.mark.parametrize("inputs, fields", [
    ({}, ["inputs.url"]),
    ({"url": 5}, ["inputs.url"]),
    ({"url": ""}, ["inputs.url"]),
    ({"url": "u", "n": -1}, ["inputs.n"]),
    ({"url": "u", "n": "2"}, ["inputs.n"]),
    ({"url": "u", "extra": 1, "more": 2}, ["inputs.extra", "inputs.more"]),
    ({"n": 1.5}, ["inputs.url", "inputs.n"]),
])
def test_inputs_failing_the_input_schema_are_400_per_field(refused, inputs, fields):
    client, wf = refused
    resp = client.post(f"/api/workflows/{wf['id']}/run", json={"inputs": inputs, "config": AUTO}, headers=HEADERS)
    problem = assert_problem(resp, 400, "validation_failed")
    assert sorted(problem["errors"]) == sorted(fields)


def test_inputs_are_checked_against_the_snapshot_schema_when_published(client):
    wf = create(client)
    client.post(f"/api/workflows/{wf['id']}/publish", json={"published": True}, headers=HEADERS)
    loose = {"type": "object", "properties": {"url": {"type": "string"}}}
    client.put(f"/api/workflows/{wf['id']}", json=body(inputSchema=loose), headers=HEADERS)
    resp = client.post(f"/api/workflows/{wf['id']}/run", json={"inputs": {}, "config": AUTO}, headers=HEADERS)
    assert "inputs.url" in assert_problem(resp, 400)["errors"]


def test_input_formats_are_checked(refused):
    client, _ = refused
    schema = {"type": "object", "properties": {"url": {"type": "string"}, "day": {"type": "string",
                                                                                   "format": "date"}}}
    wf = create(client, inputSchema=schema)
    resp = client.post(f"/api/workflows/{wf['id']}/run", json={"inputs": {"url": "u", "day": "someday"}},
                       headers=HEADERS)
    assert "inputs.day" in assert_problem(resp, 400)["errors"]


@pytest.mark.parametrize("payload, field", [
    ({"inputs": [1], "config": AUTO}, "inputs"),
    ({"inputs": "url", "config": AUTO}, "inputs"),
    ({"inputs": {"url": "u"}, "config": "auto"}, "config"),
    ({"inputs": {"url": "u"}, "config": {"planApproval": "sometimes"}}, "config"),
    ({"inputs": {"url": "u"}, "config": {"permissionMode": True}}, "config"),
    ({"inputs": {"url": "u"}, "config": {"maxSteps": 0}}, "config"),
    ({"inputs": {"url": "u"}, "config": {"colour": "red"}}, "config"),
    ({"inputs": {"url": "u"}, "config": {"plan": {"steps": [{"id": "x", "tool": "echo"}]}}}, "config"),
    ({"inputs": {"url": "u"}, "config": AUTO, "goal": "x"}, "goal"),
])
def test_a_bad_run_body_is_400_and_starts_nothing(refused, payload, field):
    client, wf = refused
    problem = assert_problem(client.post(f"/api/workflows/{wf['id']}/run", json=payload, headers=HEADERS), 400)
    assert field in problem["errors"], problem


def test_running_an_unknown_workflow_is_404(refused):
    client, _ = refused
    resp = client.post("/api/workflows/00000000-0000-4000-8000-000000000000/run", json={"inputs": {}},
                       headers=HEADERS)
    assert_problem(resp, 404, "not_found")


def publish_flow(client, **changes):
    wf = create(client, **changes)
    resp = client.post(f"/api/workflows/{wf['id']}/publish", json={"published": True}, headers=HEADERS)
    assert resp.status_code == 200, resp.json
    return resp.json


def test_the_workflow_tool_runs_a_child_run_that_keeps_the_parent_permission_mode(client, tools):
    child = publish_flow(client, plan=marker_plan("child"))
    parent_plan = {"steps": [{"id": "call", "tool": child["toolName"], "arguments": {"url": "from-parent"}}]}
    resp = client.post("/api/agent/run", json={"goal": "parent", "config": {
        "planApproval": "auto", "permissionMode": "ask", "plan": parent_plan}}, headers=HEADERS)
    assert resp.status_code == 201, resp.json
    parent = wait_run(client, resp.json["runId"])
    assert parent["status"] == "complete", parent
    assert tools.calls == [{"marker": "child", "url": "from-parent"}]
    (child_run,) = [r for r in runs(client) if r["parentRunId"] == parent["runId"]]
    detail = client.get(f"/api/agent/runs/{child_run['runId']}", headers=HEADERS).json
    assert detail["workflowId"] == child["id"] and detail["workflowRevision"] == 1
    assert detail["config"]["permissionMode"] == "ask" and detail["config"]["planApproval"] == "auto"


def test_a_workflow_calling_itself_stops_at_the_nesting_limit(client, tools):
    from builtin_plugins.workflows.service import MAX_NESTING

    wf = publish_flow(client)
    recursive = {"steps": [{"id": "again", "tool": wf["toolName"], "arguments": {"url": "{{inputs.url}}"}}]}
    client.put(f"/api/workflows/{wf['id']}", json=body(plan=recursive), headers=HEADERS)
    client.post(f"/api/workflows/{wf['id']}/publish", json={"published": True}, headers=HEADERS)
    top = wait_run(client, start(client, wf["id"], {"url": "u"}), timeout=30)
    assert top["status"] == "failed"
    assert len([r for r in runs(client) if r["workflowId"] == wf["id"]]) == MAX_NESTING + 1
    errors = [r["error"] or "" for r in runs(client)]
    assert any("nest deeper" in e for e in errors), errors
