"""The agent stream over real HTTP: exact event order, tickets, and errors at the start of a run."""
import json

import requests

from tests.agent.support import LINEAR, Api, Stream, Tools, assert_problem, auto, wait_for


def live(make_app, live_server, **config):
    tools = Tools()
    app = make_app(plugins=[tools], config=config)
    return tools, Api(live_server(app))


def test_the_stream_follows_the_interface_order_exactly(make_app, live_server):
    tools, api = live(make_app, live_server)
    tools.failures["b"] = 1
    run_id = api.start(LINEAR)
    stream = Stream(api.base, run_id)
    gate = stream.first("plan_approval_requested")["gateId"]
    assert api.approve(run_id, {"gateId": gate}).status_code == 200
    stream.join()

    assert stream.events[0] == (": connected", None)
    names = stream.names()
    tokens = [n for n in names if n == "plan_token"]
    assert tokens and names[:len(tokens)] == tokens
    assert names[len(tokens):] == [
        "plan_ready", "plan_approval_requested",
        "step_start", "step_complete",  # a
        "step_start", "step_retry", "step_start", "step_complete",  # b fails once, then succeeds
        "step_skipped", "step_skipped",  # c's branch did not fire; d's only dependency was skipped
        "step_start", "step_complete",  # e: one dependency ran
        "complete"]
    frames = stream.frames()
    text = "".join(d["text"] for e, d in frames if e == "plan_token")
    plan = next(d for e, d in frames if e == "plan_ready")["plan"]
    assert json.loads(text) == plan
    assert [s["id"] for s in plan["steps"]] == ["a", "b", "c", "d", "e"]
    starts = [d for e, d in frames if e == "step_start"]
    assert [(s["id"], s["attempt"]) for s in starts] == [("a", 1), ("b", 1), ("b", 2), ("e", 1)]
    assert {"index", "id", "title", "tool", "attempt", "invocationId"} <= set(starts[0])
    assert [d["index"] for e, d in frames if e == "step_skipped"] == [2, 3]
    done = frames[-1][1]
    assert done["runId"] == run_id and done["skipped"] == ["c", "d"]
    assert set(done["outputs"]) == {"a", "b", "e"}
    # The stream is exactly the persisted history's streamed events.
    assert frames == api.streamed(run_id)


def test_a_run_without_a_plan_gets_an_error_naming_the_missing_planner(make_app, live_server):
    tools, api = live(make_app, live_server)
    resp = api.http.post(f"{api.base}/api/agent/run", json={"goal": "summarise my inbox"})
    assert resp.status_code == 201
    run_id = resp.json()["runId"]
    stream = Stream(api.base, run_id).join()
    assert stream.events[0] == (": connected", None)
    assert stream.names() == ["error"]
    message = stream.frames()[0][1]["message"]
    assert "planner" in message and "config.plan" in message
    assert set(stream.frames()[0][1]) == {"message"}
    detail = api.detail(run_id)
    assert detail["status"] == "failed" and "planner" in detail["error"]
    assert tools.finished == [{"runId": run_id, "status": "failed", "error": detail["error"]}]


def test_an_invalid_config_plan_is_refused_before_any_run_exists(make_app, live_server):
    tools, api = live(make_app, live_server)
    cases = [
        {"steps": [{"id": "a", "tool": "no_such_tool"}]},
        {"steps": [{"id": "a", "tool": "echo", "dependsOn": ["b"]}, {"id": "b", "tool": "echo", "dependsOn": ["a"]}]},
        {"steps": [{"id": "a", "tool": "echo"}, {"id": "a", "tool": "echo"}]},
        {"steps": [{"id": "a", "tool": "echo", "arguments": {"v": "{{steps.zz.output}}"}}]},
        {"steps": [{"id": "a", "tool": "number", "arguments": {"n": "two"}}]},
        {"steps": [{"tool": "echo"}] * 257},
        {"steps": []},
    ]
    for plan in cases:
        resp = api.http.post(f"{api.base}/api/agent/run", json={"goal": "g", "config": {"plan": plan}})
        body = assert_problem(resp, 400, "invalid_plan")
        assert all(k.startswith("config.plan.") for k in body["errors"]), body
    over = api.http.post(f"{api.base}/api/agent/run", json={"goal": "g", "config": {
        "plan": {"steps": [{"tool": "echo"}] * 3}, "maxSteps": 2}})
    assert_problem(over, 400, "invalid_plan")
    assert api.http.get(f"{api.base}/api/agent/runs").json() == []
    assert tools.calls == []


def test_batch_starts_one_to_eight_independent_runs(make_app, live_server):
    tools, api = live(make_app, live_server)
    plan = {"steps": [{"id": "a", "tool": "echo", "arguments": {"v": "x"}}]}
    for n in (1, 8):
        resp = api.http.post(f"{api.base}/api/agent/batch",
                             json={"goals": [f"goal {i}" for i in range(n)], "config": auto(plan)})
        assert resp.status_code == 201, resp.text
        ids = resp.json()["runIds"]
        assert len(ids) == len(set(ids)) == n
        for run_id in ids:
            api.wait_status(run_id, "complete")
        assert sorted(api.detail(i)["goal"] for i in ids) == sorted(f"goal {i}" for i in range(n))
    before = api.http.get(f"{api.base}/api/agent/runs").json()
    for goals in ([], [f"g{i}" for i in range(9)]):
        resp = api.http.post(f"{api.base}/api/agent/batch", json={"goals": goals, "config": auto(plan)})
        body = assert_problem(resp, 400, "validation_failed")
        assert "goals" in body["errors"]
    assert api.http.get(f"{api.base}/api/agent/runs").json() == before
    assert len(before) == 9


def test_the_stream_needs_a_ticket_for_that_run(make_app, live_server):
    tools, api = live(make_app, live_server)
    run_id = api.start({"steps": [{"tool": "echo"}]}, planApproval="auto")
    other = api.start({"steps": [{"tool": "echo"}]}, planApproval="auto")
    ticket = api.http.post(f"{api.base}/api/agent/stream-ticket", json={"runId": run_id}).json()["ticket"]
    wrong_run = requests.get(f"{api.base}/api/agent/stream", params={"runId": other, "ticket": ticket}, timeout=5)
    assert_problem(wrong_run, 403, "ticket_invalid")
    no_ticket = requests.get(f"{api.base}/api/agent/stream", params={"runId": run_id}, timeout=5)
    assert_problem(no_ticket, 403, "ticket_required")
    unknown = api.http.post(f"{api.base}/api/agent/stream-ticket", json={"runId": "0" * 36})
    assert_problem(unknown, 404)
    no_token = requests.post(f"{api.base}/api/agent/stream-ticket", json={"runId": run_id}, timeout=5)
    assert no_token.status_code == 401
    wait_for(lambda: api.status(run_id) == "complete")
    # A ticket is single-use.
    ticket = api.http.post(f"{api.base}/api/agent/stream-ticket", json={"runId": run_id}).json()["ticket"]
    first = requests.get(f"{api.base}/api/agent/stream", params={"runId": run_id, "ticket": ticket}, timeout=5)
    assert first.status_code == 200
    again = requests.get(f"{api.base}/api/agent/stream", params={"runId": run_id, "ticket": ticket}, timeout=5)
    assert_problem(again, 403, "ticket_invalid")
