"""Cancel and faults: cooperative cancel, hanging tools, raising and non-JSON tools, bad arguments."""
import requests

from tests.agent.support import Api, Stream, Tools, assert_problem, wait_for


def live(make_app, live_server, **config):
    tools = Tools()
    app = make_app(plugins=[tools], config=config)
    return tools, Api(live_server(app)), app


def test_cancel_tells_the_running_tool_and_ends_the_stream_without_complete(make_app, live_server):
    tools, api, _ = live(make_app, live_server)
    plan = {"steps": [{"id": "a", "tool": "echo"},
                      {"id": "b", "tool": "block", "dependsOn": ["a"]},
                      {"id": "c", "tool": "echo", "dependsOn": ["b"]}]}
    run_id = api.start(plan, planApproval="auto")
    stream = Stream(api.base, run_id)
    stream.wait_count("step_start", 2)
    resp = api.cancel(run_id)
    assert resp.status_code == 200 and resp.json() == {"ok": True, "cancelled": True, "status": "cancelling"}
    stream.join()
    assert tools.saw_cancel == ["b"]
    assert stream.names()[-1] == "step_start"  # no complete, no error: the stream just ends
    assert "complete" not in stream.names() and "error" not in stream.names()
    detail = api.detail(run_id)
    assert detail["status"] == "cancelled" and detail["finishedAt"]
    assert [(s["id"], s["status"]) for s in detail["steps"]] == [
        ("a", "complete"), ("b", "cancelled"), ("c", "pending")]
    assert tools.names() == ["echo", "block"]
    assert_problem(api.cancel(run_id), 409, "run_not_active")
    assert tools.finished == [{"runId": run_id, "status": "cancelled", "error": "cancelled"}]


def test_cancelling_a_retry_safe_wait_does_not_count_as_a_failed_attempt(make_app, live_server):
    tools, api, _ = live(make_app, live_server)
    plan = {"steps": [{"id": "w", "tool": "wait", "arguments": {"ms": 60000}, "retry": {"maxAttempts": 3}}]}
    run_id = api.start(plan, planApproval="auto")
    stream = Stream(api.base, run_id)
    stream.first("step_start")
    assert api.cancel(run_id).ok
    stream.join()
    assert "step_retry" not in stream.names()
    detail = api.detail(run_id)
    assert detail["status"] == "cancelled" and detail["steps"][0]["attempts"] == 1


def test_cancel_at_a_gate_stops_before_any_step(make_app, live_server):
    tools, api, _ = live(make_app, live_server)
    run_id = api.start({"steps": [{"id": "a", "tool": "echo"}]})
    stream = Stream(api.base, run_id)
    gate = stream.first("plan_approval_requested")["gateId"]
    assert api.cancel(run_id).ok
    stream.join()
    assert api.status(run_id) == "cancelled"
    assert tools.calls == []
    assert_problem(api.approve(run_id, {"gateId": gate}), 409, "no_gate_armed")

    run_id = api.start({"steps": [{"id": "a", "tool": "echo", "approval": True}]}, planApproval="auto")
    stream = Stream(api.base, run_id)
    stream.first("step_approval_requested")
    assert api.cancel(run_id).ok
    stream.join()
    detail = api.detail(run_id)
    assert detail["status"] == "cancelled" and detail["steps"][0]["status"] == "cancelled"
    assert tools.calls == []


def test_a_hanging_tool_is_stopped_after_the_cancel_grace(make_app, live_server):
    tools, api, _ = live(make_app, live_server, **{"agent.cancel-grace-seconds": 0.2})
    run_id = api.start({"steps": [{"id": "h", "tool": "hang"}, {"id": "after", "tool": "echo", "dependsOn": ["h"]}]},
                       planApproval="auto")
    stream = Stream(api.base, run_id)
    stream.first("step_start")
    assert api.cancel(run_id).ok
    stream.join(timeout=10)
    assert "complete" not in stream.names()
    assert tools.hanging == ["stopped"]  # the tool's greenlet was stopped, not left running
    detail = api.detail(run_id)
    assert detail["status"] == "cancelled"
    assert [s["status"] for s in detail["steps"]] == ["cancelled", "pending"]


def test_a_tool_that_raises_fails_the_run_with_a_terminal_error(make_app, live_server):
    tools, api, _ = live(make_app, live_server)
    plan = {"steps": [{"id": "x", "tool": "boom"}, {"id": "y", "tool": "echo", "dependsOn": ["x"]}]}
    run_id = api.start(plan, planApproval="auto")
    stream = Stream(api.base, run_id).join()
    last = stream.frames()[-1]
    assert last == ("error", {"message": "step x failed: boom raised RuntimeError: kaboom"})
    assert stream.count("error") == 1 and "complete" not in stream.names()
    detail = api.detail(run_id)
    assert detail["status"] == "failed" and detail["error"] == last[1]["message"]
    assert [s["status"] for s in detail["steps"]] == ["failed", "pending"]
    assert tools.names() == ["boom"]
    assert tools.finished == [{"runId": run_id, "status": "failed", "error": last[1]["message"]}]
    assert_problem(api.cancel(run_id), 409, "run_not_active")


def test_a_non_json_result_fails_the_step_with_a_clear_message(make_app, live_server):
    tools, api, _ = live(make_app, live_server)
    run_id = api.start({"steps": [{"id": "nj", "tool": "not_json"}]}, planApproval="auto")
    stream = Stream(api.base, run_id).join()
    event, data = stream.frames()[-1]
    assert event == "error"
    assert data["message"].startswith("step nj failed: not_json returned a result that is not JSON")
    detail = api.detail(run_id)
    assert detail["status"] == "failed" and detail["steps"][0]["result"] is None
    # NaN is not JSON either (it would make the stream's frame unparseable).
    run_id = api.start({"steps": [{"id": "nan", "tool": "not_json", "arguments": {"nan": True}}]},
                       planApproval="auto")
    assert "not JSON" in api.wait_status(run_id, "failed")["error"]


def test_arguments_failing_the_schema_fail_the_step_before_the_tool_runs(make_app, live_server):
    tools, api, _ = live(make_app, live_server)
    plan = {"steps": [{"id": "a", "tool": "echo", "arguments": {"v": "two"}},
                      {"id": "b", "tool": "number", "arguments": {"n": "{{steps.a.output.v}}"}}]}
    run_id = api.start(plan, planApproval="auto")
    stream = Stream(api.base, run_id).join()
    message = stream.frames()[-1][1]["message"]
    assert message == "step b failed: invalid arguments for number: n: 'two' is not of type 'integer'"
    assert tools.names() == ["echo"]  # number was never called
    detail = api.detail(run_id)
    assert detail["steps"][1]["status"] == "failed" and detail["steps"][1]["attempts"] == 1

    # A placeholder whose value is missing at run time fails the same way.
    plan = {"steps": [{"id": "a", "tool": "echo"},
                      {"id": "b", "tool": "number", "arguments": {"n": "{{steps.a.output.nothing}}"}}]}
    run_id = api.start(plan, planApproval="auto")
    assert "{{steps.a.output.nothing}} has no value" in api.wait_status(run_id, "failed")["error"]
    assert tools.names() == ["echo", "echo"]


def test_a_failing_step_stops_the_steps_still_running(make_app, live_server):
    tools, api, _ = live(make_app, live_server)
    plan = {"steps": [{"id": "slow", "tool": "block"}, {"id": "bad", "tool": "boom"}]}
    run_id = api.start(plan, planApproval="auto")
    detail = api.wait_status(run_id, "failed")
    assert "bad failed" in detail["error"]
    assert tools.saw_cancel == ["slow"]
    assert {s["id"]: s["status"] for s in detail["steps"]} == {"slow": "cancelled", "bad": "failed"}


def test_cancel_of_unknown_runs_and_without_a_token(make_app, live_server):
    tools, api, _ = live(make_app, live_server)
    assert_problem(api.cancel("00000000-0000-0000-0000-000000000000"), 404, "not_found")
    run_id = api.start({"steps": [{"id": "b", "tool": "block"}]}, planApproval="auto")
    wait_for(lambda: tools.calls)
    assert requests.post(f"{api.base}/api/agent/{run_id}/cancel", timeout=5).status_code == 401
    assert api.status(run_id) == "running"
    tools.release.set()
    api.wait_status(run_id, "complete")
