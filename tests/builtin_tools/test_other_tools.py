"""notify, wait, json_extract and run_workflow, each run through an agent run; the tool catalog entries."""
from tests.agent.support import Stream, assert_problem, wait_for
from tests.builtin_tools.support import live_api, run_steps, run_tool

BUILTIN = {"http_request", "read_file", "write_file", "list_directory", "notify", "wait", "json_extract",
           "run_workflow"}


def test_the_catalog_lists_every_builtin_tool_with_its_schema(make_app, live_server):
    _, api = live_api(make_app, live_server)
    listed = {t["name"]: t for t in api.http.get(f"{api.base}/api/agent/tools").json()}
    assert BUILTIN <= set(listed)
    for name in BUILTIN:
        tool = listed[name]
        assert tool["source"] == "builtin" and tool["description"]
        assert tool["parameters"]["type"] == "object" and tool["parameters"]["additionalProperties"] is False
    assert {n for n in BUILTIN if listed[n]["retrySafe"]} == {"read_file", "list_directory", "wait", "json_extract"}
    assert listed["http_request"]["parameters"]["properties"]["url"]["pattern"] == "^https?://"


def test_notify_creates_an_agent_notification(make_app, live_server):
    _, api = live_api(make_app, live_server)
    status, result, _ = run_tool(api, "notify", {"title": "Backup done", "body": "3 files", "level": "success",
                                                 "link": "files/backup"})
    assert status == "complete"
    notes = api.http.get(f"{api.base}/api/notifications").json()
    note = next(n for n in notes if n["id"] == result["id"])
    assert (note["source"], note["level"], note["title"], note["body"], note["link"]) == (
        "agent", "success", "Backup done", "3 files", "files/backup")
    resp = api.http.post(f"{api.base}/api/agent/run", json={"goal": "g", "config": {
        "plan": {"steps": [{"tool": "notify", "arguments": {"title": "x", "level": "loud"}}]}}})
    assert_problem(resp, 400, "invalid_plan")


def test_wait_waits_and_is_cancellable(make_app, live_server):
    _, api = live_api(make_app, live_server)
    status, result, _ = run_tool(api, "wait", {"ms": 20})
    assert (status, result) == ("complete", {"waitedMs": 20})
    run_id = api.start({"steps": [{"id": "w", "tool": "wait", "arguments": {"ms": 3_600_000}}]}, planApproval="auto")
    stream = Stream(api.base, run_id)
    stream.first("step_start")
    assert api.cancel(run_id).ok
    stream.join(timeout=5)  # far sooner than the hour asked for
    detail = api.detail(run_id)
    assert detail["status"] == "cancelled" and detail["steps"][0]["status"] == "cancelled"


def test_json_extract_picks_values_from_earlier_results(make_app, live_server):
    _, api = live_api(make_app, live_server)
    source = {"id": "src", "tool": "echo", "arguments": {"v": {"items": [{"name": "a"}, {"name": "b"}], "n": 3}}}
    detail = run_steps(api, [
        source,
        {"id": "second", "tool": "json_extract", "arguments": {"value": "{{steps.src.output}}",
                                                               "path": "v.items.1.name"}},
        {"id": "last", "tool": "json_extract", "arguments": {"value": "{{steps.src.output.v.items}}",
                                                             "path": "-1"}},
        {"id": "fallback", "tool": "json_extract", "arguments": {"value": "{{steps.src.output}}",
                                                                 "path": "v.nothing", "default": "none"}},
        {"id": "use", "tool": "number", "arguments": {"n": "{{steps.src.output.v.n}}"}}])
    assert detail["status"] == "complete"
    outputs = detail["result"]["outputs"]
    assert outputs["second"] == "b" and outputs["last"] == {"name": "b"} and outputs["fallback"] == "none"
    assert outputs["use"] == 6
    status, _, error = run_tool(api, "json_extract", {"value": {"a": 1}, "path": "b"})
    assert status == "failed" and "nothing at 'b'" in error


def workflow_body(name="Doubler"):
    return {"name": name, "description": "doubles n",
            "inputSchema": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}},
            "plan": {"steps": [{"id": "double", "tool": "number", "arguments": {"n": "{{inputs.n}}"}}]}}


def test_run_workflow_runs_a_published_workflow_as_a_child_run(make_app, live_server):
    tools, api = live_api(make_app, live_server)
    created = api.http.post(f"{api.base}/api/workflows", json=workflow_body())
    assert created.status_code == 201, created.text
    workflow_id = created.json()["id"]

    # Not published yet: the step fails and no child run starts.
    status, _, error = run_tool(api, "run_workflow", {"workflowId": workflow_id, "inputs": {"n": 2}})
    assert status == "failed" and "not published" in error
    assert tools.names() == []

    published = api.http.post(f"{api.base}/api/workflows/{workflow_id}/publish", json={"published": True})
    assert published.status_code == 200, published.text
    run_id = api.start({"steps": [{"id": "child", "tool": "run_workflow",
                                   "arguments": {"workflowId": workflow_id, "inputs": {"n": 21}}}]},
                       planApproval="auto")
    parent = api.wait_status(run_id, "complete", "failed")
    assert parent["status"] == "complete", parent["error"]
    assert parent["result"]["outputs"]["child"]["outputs"] == {"double": 42}
    runs = api.http.get(f"{api.base}/api/agent/runs").json()
    child = next(r for r in runs if r["parentRunId"] == run_id)
    assert (child["workflowId"], child["workflowRevision"], child["status"]) == (workflow_id, 1, "complete")
    assert tools.calls[-1][1] == {"n": 21}

    # Inputs failing the workflow's inputSchema fail the step, with no child run.
    status, _, error = run_tool(api, "run_workflow", {"workflowId": workflow_id, "inputs": {"n": "x"}})
    assert status == "failed" and "inputSchema" in error
    status, _, error = run_tool(api, "run_workflow", {"workflowId": "0" * 36})
    assert status == "failed" and "No such workflow" in error
    assert len([r for r in api.http.get(f"{api.base}/api/agent/runs").json() if r["parentRunId"]]) == 1


def test_cancelling_the_parent_cancels_the_child_run(make_app, live_server):
    tools, api = live_api(make_app, live_server)
    body = workflow_body("Blocker")
    body["plan"] = {"steps": [{"id": "hold", "tool": "block"}]}
    body["inputSchema"] = {"type": "object"}
    workflow_id = api.http.post(f"{api.base}/api/workflows", json=body).json()["id"]
    api.http.post(f"{api.base}/api/workflows/{workflow_id}/publish", json={"published": True})
    run_id = api.start({"steps": [{"id": "child", "tool": "run_workflow", "arguments": {"workflowId": workflow_id}}]},
                       planApproval="auto")
    wait_for(lambda: "block" in tools.names())
    assert api.cancel(run_id).ok
    api.wait_status(run_id, "cancelled")
    child = next(r for r in api.http.get(f"{api.base}/api/agent/runs").json() if r["parentRunId"] == run_id)
    api.wait_status(child["runId"], "cancelled")
    assert tools.saw_cancel == ["hold"]
