"""Persisted history: the run detail, notifications and run_finished (list order and truncation: test_backends)."""
import datetime as dt

from tests.agent.support import Api, Tools, assert_problem, wait_for


def live(make_app, live_server):
    tools = Tools()
    return tools, Api(live_server(make_app(plugins=[tools])))


def test_the_run_detail_holds_plan_steps_and_ordered_events(make_app, live_server):
    tools, api = live(make_app, live_server)
    tools.failures["k"] = 1
    plan = {"goal": "history", "steps": [
        {"id": "a", "title": "First", "tool": "flaky", "arguments": {"key": "k"}, "retry": {"maxAttempts": 2}},
        {"id": "b", "tool": "boom", "dependsOn": ["a"]}]}
    run_id = api.start(plan, goal="history goal", planApproval="auto")
    detail = api.wait_status(run_id, "failed")
    assert detail["goal"] == "history goal"
    assert detail["plan"]["goal"] == "history"
    assert [(s["id"], s["tool"], s.get("title")) for s in detail["plan"]["steps"]] == [
        ("a", "flaky", "First"), ("b", "boom", "b")]
    a, b = detail["steps"]
    assert (a["status"], a["attempts"], a["result"], a["error"]) == ("complete", 2, {"key": "k", "done": True}, None)
    assert (b["status"], b["attempts"], b["result"]) == ("failed", 1, None)
    assert b["error"] == "boom raised RuntimeError: kaboom"
    for step in (a, b):
        started = dt.datetime.fromisoformat(step["startedAt"].replace("Z", "+00:00"))
        finished = dt.datetime.fromisoformat(step["finishedAt"].replace("Z", "+00:00"))
        assert started <= finished
    assert a["invocationId"] != b["invocationId"]
    assert {c[2] for c in tools.calls if c[0] == "flaky"} == {a["invocationId"]}
    events = detail["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["createdAt"] for e in events] == sorted(e["createdAt"] for e in events)
    types = [e["type"] for e in events if e["type"] != "plan_token"]
    assert types == ["plan_ready", "step_start", "step_retry", "step_start", "step_complete", "step_start", "error"]
    assert detail["error"] == "step b failed: boom raised RuntimeError: kaboom"
    assert detail["finishedAt"] and detail["config"]["planApproval"] == "auto"
    assert_problem(api.http.get(f"{api.base}/api/agent/runs/00000000-0000-0000-0000-000000000000"), 404)


def test_every_run_end_creates_one_agent_notification_and_fires_run_finished_once(make_app, live_server):
    tools, api = live(make_app, live_server)
    ok = api.start({"steps": [{"tool": "echo"}]}, planApproval="auto")
    bad = api.start({"steps": [{"tool": "boom"}]}, planApproval="auto")
    stopped = api.start({"steps": [{"tool": "block"}]}, planApproval="auto")
    wait_for(lambda: "block" in tools.names())
    assert api.cancel(stopped).ok
    for run_id, status in ((ok, "complete"), (bad, "failed"), (stopped, "cancelled")):
        api.wait_status(run_id, status)
    wait_for(lambda: len(tools.finished) == 3)
    assert sorted((f["runId"], f["status"]) for f in tools.finished) == sorted(
        [(ok, "complete"), (bad, "failed"), (stopped, "cancelled")])
    notes = api.http.get(f"{api.base}/api/notifications?limit=100").json()
    mine = {run_id: [n for n in notes if n["link"] == f"agent/runs/{run_id}"] for run_id in (ok, bad, stopped)}
    assert {k: len(v) for k, v in mine.items()} == {ok: 1, bad: 1, stopped: 1}
    assert all(n["source"] == "agent" for v in mine.values() for n in v)
    assert (mine[ok][0]["level"], mine[bad][0]["level"]) == ("success", "error")
    assert "kaboom" in mine[bad][0]["body"]
    # Approving or cancelling afterwards ends nothing a second time.
    api.cancel(ok)
    api.approve(bad)
    assert len(tools.finished) == 3
