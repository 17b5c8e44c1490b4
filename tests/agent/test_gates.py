"""Approval gates through the HTTP API: gateIds, stale and concurrent approvals, plan edits, permissionMode."""
import gevent
import requests

from tests.agent.support import Api, Stream, Tools, assert_problem, wait_for

GATED = {"goal": "gated", "steps": [
    {"id": "a", "tool": "echo", "arguments": {"v": 1}},
    {"id": "b", "tool": "echo", "arguments": {"v": 2}, "dependsOn": ["a"], "approval": True},
]}


def live(make_app, live_server):
    tools = Tools()
    return tools, Api(live_server(make_app(plugins=[tools])))


def test_approve_without_a_gate_id_releases_the_armed_gate(make_app, live_server):
    tools, api = live(make_app, live_server)
    run_id = api.start(GATED)
    stream = Stream(api.base, run_id)
    stream.first("plan_approval_requested")
    assert api.status(run_id) == "awaiting_plan_approval"
    resp = api.approve(run_id)
    assert resp.status_code == 200 and resp.json()["kind"] == "plan" and resp.json()["ok"] is True
    step_gate = stream.first("step_approval_requested")
    assert step_gate["index"] == 1 and step_gate["gateId"]
    assert api.status(run_id) == "awaiting_step_approval"
    assert tools.names() == ["echo"]  # b waits at its gate
    # An empty body (no JSON at all) approves as is.
    empty = api.http.post(f"{api.base}/api/agent/{run_id}/approve", timeout=10)
    assert empty.status_code == 200 and empty.json()["kind"] == "step"
    stream.join()
    names = stream.names()
    assert names.index("step_approval_requested") < names.index("complete")
    assert names[names.index("step_approval_requested") + 1] == "step_start"
    assert api.status(run_id) == "complete"
    released = api.audit(run_id, "gate_released")
    assert [(g["kind"], g["by"]) for g in released] == [("plan", "user"), ("step", "user")]


def test_stale_late_and_duplicate_gate_ids_answer_409_and_release_nothing(make_app, live_server):
    tools, api = live(make_app, live_server)
    run_id = api.start(GATED)
    stream = Stream(api.base, run_id)
    plan_gate = stream.first("plan_approval_requested")["gateId"]
    assert_problem(api.approve(run_id, {"gateId": "not-a-gate"}), 409, "stale_gate")
    assert api.status(run_id) == "awaiting_plan_approval"
    assert api.approve(run_id, {"gateId": plan_gate}).status_code == 200
    step_gate = stream.first("step_approval_requested")["gateId"]
    assert step_gate != plan_gate

    # The plan gate's id is now stale: the newer step gate stays armed.
    assert_problem(api.approve(run_id, {"gateId": plan_gate}), 409, "stale_gate")
    gevent.sleep(0.05)
    assert api.status(run_id) == "awaiting_step_approval"
    assert tools.names() == ["echo"]
    assert api.approve(run_id, {"gateId": step_gate}).status_code == 200
    stream.join()
    # Late and duplicate approvals after the end release nothing either.
    for gate in (step_gate, plan_gate, None):
        assert_problem(api.approve(run_id, {"gateId": gate} if gate else {}), 409, "no_gate_armed")
    assert tools.names() == ["echo", "echo"]
    assert len(api.audit(run_id, "gate_released")) == 2


def test_concurrent_approvals_release_the_gate_exactly_once(make_app, live_server):
    tools, api = live(make_app, live_server)
    run_id = api.start(GATED)
    stream = Stream(api.base, run_id)
    gate = stream.first("plan_approval_requested")["gateId"]
    posts = [gevent.spawn(requests.post, f"{api.base}/api/agent/{run_id}/approve", json={"gateId": gate},
                          headers=dict(api.http.headers), timeout=10) for _ in range(12)]
    gevent.joinall(posts, raise_error=True)
    codes = sorted(p.value.status_code for p in posts)
    assert codes == [200] + [409] * 11
    stream.first("step_approval_requested")
    plan_releases = [g for g in api.audit(run_id, "gate_released") if g["kind"] == "plan"]
    assert len(plan_releases) == 1
    assert api.approve(run_id).status_code == 200
    stream.join()
    assert stream.count("plan_approval_requested") == 1 and stream.count("step_start") == 2


def test_an_edited_plan_replaces_the_draft_at_plan_approval(make_app, live_server):
    tools, api = live(make_app, live_server)
    run_id = api.start(GATED)
    stream = Stream(api.base, run_id)
    gate = stream.first("plan_approval_requested")["gateId"]
    edited = {"goal": "edited", "steps": [{"id": "x", "tool": "echo", "arguments": {"v": "edited"}},
                                          {"id": "y", "tool": "number", "arguments": {"n": 4}}]}
    resp = api.approve(run_id, {"gateId": gate, **edited})
    assert resp.status_code == 200, resp.text
    stream.join()
    assert api.status(run_id) == "complete"
    assert sorted((c[0], str(c[1])) for c in tools.calls) == [("echo", "{'v': 'edited'}"), ("number", "{'n': 4}")]
    detail = api.detail(run_id)
    assert detail["plan"]["goal"] == "edited"
    assert [s["id"] for s in detail["plan"]["steps"]] == ["x", "y"]
    assert [s["id"] for s in detail["steps"]] == ["x", "y"]
    assert stream.frames()[-1][1]["outputs"]["y"] == 8
    assert api.audit(run_id, "plan_edited")[0]["plan"]["goal"] == "edited"
    assert api.audit(run_id, "gate_released")[0]["planEdited"] is True

    # The same, with the edit under "plan".
    run_id = api.start(GATED)
    Stream(api.base, run_id).first("plan_approval_requested")
    assert api.approve(run_id, {"plan": {"steps": [{"id": "only", "tool": "number", "arguments": {"n": 5}}]}}).ok
    assert api.wait_status(run_id, "complete")["result"]["outputs"] == {"only": 10}


def test_an_invalid_edited_plan_is_400_and_the_gate_stays_armed(make_app, live_server):
    tools, api = live(make_app, live_server)
    run_id = api.start(GATED)
    stream = Stream(api.base, run_id)
    gate = stream.first("plan_approval_requested")["gateId"]
    bad_plans = [
        {"steps": [{"id": "a", "tool": "missing_tool"}]},
        {"steps": [{"id": "a", "tool": "echo", "dependsOn": ["a"]}]},
        {"steps": [{"id": "a", "tool": "number", "arguments": {"n": "x"}}]},
    ]
    for plan in bad_plans:
        body = assert_problem(api.approve(run_id, {"gateId": gate, "plan": plan}), 400, "invalid_plan")
        assert body["errors"]
    assert_problem(api.approve(run_id, {"gateId": gate, "steps": []}), 400, "validation_failed")
    assert_problem(api.approve(run_id, {"gateId": gate, "goal": "only a goal"}), 400, "validation_failed")
    assert_problem(api.approve(run_id, {"gateId": 5}), 400, "validation_failed")
    malformed = api.http.post(f"{api.base}/api/agent/{run_id}/approve", data="{nope",
                              headers={"Content-Type": "application/json"})
    assert_problem(malformed, 400, "malformed_json")
    assert api.status(run_id) == "awaiting_plan_approval"
    assert tools.calls == []
    assert api.approve(run_id, {"gateId": gate}).status_code == 200  # the same gate is still armed
    stream.first("step_approval_requested")
    assert tools.names() == ["echo"]


def test_a_plan_edit_at_a_step_gate_is_refused(make_app, live_server):
    tools, api = live(make_app, live_server)
    run_id = api.start(GATED)
    stream = Stream(api.base, run_id)
    stream.first("plan_approval_requested")
    assert api.approve(run_id).ok
    gate = stream.first("step_approval_requested")["gateId"]
    edit = {"gateId": gate, "steps": [{"id": "z", "tool": "echo"}]}
    assert_problem(api.approve(run_id, edit), 409, "plan_edit_not_allowed")
    assert api.status(run_id) == "awaiting_step_approval"
    assert api.approve(run_id, {"gateId": gate}).status_code == 200
    stream.join()
    assert [s["id"] for s in api.detail(run_id)["plan"]["steps"]] == ["a", "b"]


def test_permission_mode_auto_releases_every_gate_and_the_audit_log_says_so(make_app, live_server):
    tools, api = live(make_app, live_server)
    run_id = api.start(GATED, permissionMode="auto")
    stream = Stream(api.base, run_id).join()
    assert stream.names()[-1] == "complete"
    assert stream.count("plan_approval_requested") == 1 and stream.count("step_approval_requested") == 1
    released = api.audit(run_id, "gate_released")
    assert [(g["kind"], g["index"], g["by"]) for g in released] == [
        ("plan", None, "permissionMode:auto"), ("step", 1, "permissionMode:auto")]
    gates = [d["gateId"] for e, d in stream.frames() if e.endswith("approval_requested")]
    assert [g["gateId"] for g in released] == gates
    assert_problem(api.approve(run_id), 409)


def test_concurrent_steps_that_need_approval_queue_for_one_armed_gate(make_app, live_server):
    tools, api = live(make_app, live_server)
    plan = {"steps": [{"id": "p", "tool": "echo", "approval": True},
                      {"id": "q", "tool": "echo", "approval": True}]}
    run_id = api.start(plan, planApproval="auto")
    stream = Stream(api.base, run_id)
    first = stream.first("step_approval_requested")
    gevent.sleep(0.05)
    assert stream.count("step_approval_requested") == 1  # the second waits for the first to be released
    assert api.approve(run_id, {"gateId": first["gateId"]}).ok
    stream.wait_count("step_approval_requested", 2)
    second = [d for e, d in stream.frames() if e == "step_approval_requested"][1]
    assert {first["index"], second["index"]} == {0, 1}
    assert api.approve(run_id, {"gateId": second["gateId"]}).ok
    stream.join()
    assert stream.names()[-1] == "complete"


def test_approving_unknown_or_finished_runs(make_app, live_server):
    tools, api = live(make_app, live_server)
    assert_problem(api.approve("00000000-0000-0000-0000-000000000000"), 404, "not_found")
    assert_problem(api.approve("x" * 37), 404)
    run_id = api.start({"steps": [{"tool": "echo"}]}, planApproval="auto")
    wait_for(lambda: api.status(run_id) == "complete")
    assert_problem(api.approve(run_id), 409, "no_gate_armed")
    no_token = requests.post(f"{api.base}/api/agent/{run_id}/approve", json={}, timeout=5)
    assert no_token.status_code == 401
