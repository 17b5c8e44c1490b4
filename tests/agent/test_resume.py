"""Resume: failed, cancelled and recovery-required runs continue after a new plan review; SIGKILL recovery."""
import gevent
import requests

from core import datasource as ds_file
from tests.agent.support import Api, Stream, Tools, assert_problem, wait_for
from tests.conftest import HEADERS


def live(make_app, live_server):
    tools = Tools()
    return tools, Api(live_server(make_app(plugins=[tools])))


def invocations(detail):
    return {s["id"]: s["invocationId"] for s in detail["steps"]}


def test_a_failed_run_resumes_after_plan_approval_and_keeps_finished_steps(make_app, live_server):
    tools, api = live(make_app, live_server)
    tools.failures["r"] = 1
    plan = {"steps": [{"id": "a", "tool": "echo", "arguments": {"v": "once"}},
                      {"id": "b", "tool": "flaky_unsafe", "arguments": {"key": "r"}, "dependsOn": ["a"]},
                      {"id": "c", "tool": "echo", "arguments": {"v": "{{steps.b.output.key}}"}}]}
    run_id = api.start(plan, planApproval="auto")
    failed = api.wait_status(run_id, "failed")
    assert [s["status"] for s in failed["steps"]] == ["complete", "failed", "pending"]

    resp = api.resume(run_id)
    assert resp.status_code == 200, resp.text
    assert resp.json()["runId"] == run_id
    stream = Stream(api.base, run_id)
    gate = stream.first("plan_approval_requested")["gateId"]  # review is required again, even for planApproval auto
    assert api.status(run_id) == "awaiting_plan_approval"
    assert tools.names() == ["echo", "flaky_unsafe"]
    assert api.approve(run_id, {"gateId": gate}).ok
    stream.join()

    names = stream.names()
    assert names[0] == "plan_token" and "error" not in names  # the earlier attempt's end is not replayed
    assert names[names.index("plan_approval_requested") + 1:] == [
        "step_start", "step_complete", "step_start", "step_complete", "complete"]
    assert [d["id"] for e, d in stream.frames() if e == "step_start"] == ["b", "c"]
    detail = api.detail(run_id)
    assert detail["status"] == "complete" and detail["error"] is None and detail["finishedAt"]
    assert [s["status"] for s in detail["steps"]] == ["complete", "complete", "complete"]
    assert detail["steps"][0]["result"] == {"v": "once", "ok": True}
    assert invocations(detail) == invocations(failed)
    assert tools.names() == ["echo", "flaky_unsafe", "flaky_unsafe", "echo"]  # a ran once
    b_calls = [c[2] for c in tools.calls if c[0] == "flaky_unsafe"]
    assert b_calls == [failed["steps"][1]["invocationId"]] * 2
    assert detail["result"]["outputs"]["c"] == {"v": "r", "ok": True}
    types = [e["type"] for e in detail["events"]]
    assert types.count("error") == 1 and types.count("resumed") == 1
    assert types.index("error") < types.index("resumed") < types.index("complete")
    assert_problem(api.resume(run_id), 409, "not_resumable")  # a complete run


def test_a_cancelled_run_resumes_its_unfinished_steps(make_app, live_server):
    tools, api = live(make_app, live_server)
    plan = {"steps": [{"id": "a", "tool": "echo"},
                      {"id": "b", "tool": "block", "dependsOn": ["a"]},
                      {"id": "c", "tool": "echo", "dependsOn": ["b"]}]}
    run_id = api.start(plan)
    stream = Stream(api.base, run_id)
    stream.first("plan_approval_requested")
    api.approve(run_id)
    stream.wait_count("step_start", 2)
    assert api.cancel(run_id).ok
    stream.join()
    cancelled = api.wait_status(run_id, "cancelled")
    tools.release.set()

    assert api.resume(run_id).ok
    stream = Stream(api.base, run_id)
    stream.first("plan_approval_requested")
    assert api.approve(run_id).ok
    stream.join()
    detail = api.detail(run_id)
    assert detail["status"] == "complete"
    assert tools.names() == ["echo", "block", "block", "echo"]
    assert invocations(detail) == invocations(cancelled)
    assert [c[2] for c in tools.calls if c[0] == "block"] == [cancelled["steps"][1]["invocationId"]] * 2


def test_resume_edits_are_reviewed_like_a_new_plan(make_app, live_server):
    tools, api = live(make_app, live_server)
    tools.failures["e"] = 1
    plan = {"steps": [{"id": "a", "tool": "echo", "arguments": {"v": 1}},
                      {"id": "b", "tool": "flaky_unsafe", "arguments": {"key": "e"}, "dependsOn": ["a"]}]}
    run_id = api.start(plan, planApproval="auto")
    before = api.wait_status(run_id, "failed")
    assert api.resume(run_id).ok
    Stream(api.base, run_id).first("plan_approval_requested")
    edited = {"steps": [{"id": "a", "tool": "echo", "arguments": {"v": 1}},
                        {"id": "b2", "tool": "number", "arguments": {"n": 21}, "dependsOn": ["a"]}]}
    assert api.approve(run_id, {"plan": edited}).ok
    detail = api.wait_status(run_id, "complete")
    assert detail["result"]["outputs"] == {"a": {"v": 1, "ok": True}, "b2": 42}
    assert tools.names() == ["echo", "flaky_unsafe", "number"]
    assert detail["steps"][0]["invocationId"] == before["steps"][0]["invocationId"]
    assert detail["steps"][1]["invocationId"] != before["steps"][1]["invocationId"]  # a different step now


def test_what_cannot_be_resumed(make_app, live_server, tmp_path):
    tools, api = live(make_app, live_server)
    assert_problem(api.resume("00000000-0000-0000-0000-000000000000"), 404)
    grant = {"path": str(tmp_path), "access": "read-write"}  # scope defaults to session
    run_id = api.start({"steps": [{"id": "a", "tool": "boom"}, {"id": "b", "tool": "echo", "dependsOn": ["a"]}]},
                       planApproval="auto", fileGrants=[grant])
    api.wait_status(run_id, "failed")
    body = assert_problem(api.resume(run_id), 409, "not_resumable")
    assert "session" in body["detail"]
    assert api.status(run_id) == "failed"

    running = api.start({"steps": [{"id": "b", "tool": "block"}]}, planApproval="auto")
    wait_for(lambda: "block" in tools.names())
    assert_problem(api.resume(running), 409, "not_resumable")
    assert requests.post(f"{api.base}/api/agent/runs/{running}/resume", timeout=5).status_code == 401
    tools.release.set()
    api.wait_status(running, "complete")
    assert_problem(api.resume(running), 409, "not_resumable")

    # Persistent grants survive the session: that run may resume.
    tools.release.clear()
    persistent = api.start({"steps": [{"id": "b", "tool": "block"}]}, planApproval="auto",
                           fileGrants=[{**grant, "scope": "persistent"}])
    wait_for(lambda: tools.names().count("block") == 2)
    api.cancel(persistent)
    api.wait_status(persistent, "cancelled")
    # Concurrent resumes: exactly one wins.
    posts = [gevent.spawn(requests.post, f"{api.base}/api/agent/runs/{persistent}/resume", headers=HEADERS,
                          timeout=10) for _ in range(6)]
    gevent.joinall(posts, raise_error=True)
    assert sorted(p.value.status_code for p in posts) == [200] + [409] * 5
    assert len(api.audit(persistent, "resumed")) == 1


def test_a_sigkilled_host_leaves_the_run_recoverable_and_no_completed_step_runs_twice(data_dir, serve_process,
                                                                                     tmp_path):
    ds_file.write(data_dir, {"type": "sqlite", "params": {}})
    out = tmp_path / "granted"
    out.mkdir()
    log = out / "steps.log"
    steps, previous = [], None
    for i in range(5):
        write = {"id": f"w{i}", "tool": "write_file",
                 "arguments": {"path": str(log), "content": f"w{i}\n", "append": True}}
        if previous:
            write["dependsOn"] = [previous]
        # The kill lands in p1, long enough that w2 cannot have started however slow the machine.
        pause = {"id": f"p{i}", "tool": "wait", "arguments": {"ms": 1500 if i == 1 else 150}, "dependsOn": [f"w{i}"]}
        steps += [write, pause]
        previous = f"p{i}"
    config = {"plan": {"steps": steps}, "planApproval": "auto",
              "fileGrants": [{"path": str(out), "access": "read-write", "scope": "persistent"}]}

    host = serve_process(data_dir)
    api = Api(host.url)
    run_id = api.http.post(f"{host.url}/api/agent/run", json={"goal": "append", "config": config}).json()["runId"]
    # Kill while p1 waits: w0, p0 and w1 are complete, and w2 cannot start for 1.5 s.
    before = wait_for(lambda: (lambda d: d if d["steps"] and d["steps"][2]["status"] == "complete" else None)(
        api.detail(run_id)), timeout=15)
    host.proc.kill()
    host.proc.wait(10)
    done_before = [s["id"] for s in before["steps"] if s["status"] == "complete"]
    assert done_before[:3] == ["w0", "p0", "w1"]
    assert log.read_text() == "w0\nw1\n"

    again = serve_process(data_dir)
    api = Api(again.url)
    detail = api.detail(run_id)
    assert detail["status"] == "recovery_required"
    assert [s["status"] for s in detail["steps"][:3]] == ["complete"] * 3
    resp = api.resume(run_id)
    assert resp.status_code == 200, resp.text
    stream = Stream(again.url, run_id)
    assert api.approve(run_id, {"gateId": stream.first("plan_approval_requested")["gateId"]}).ok
    stream.join(timeout=30)
    assert stream.names()[-1] == "complete"
    final = api.detail(run_id)
    assert final["status"] == "complete"
    assert log.read_text() == "".join(f"w{i}\n" for i in range(5))  # each write exactly once
    assert invocations(final) == invocations(before)
    started = [d["id"] for e, d in stream.frames() if e == "step_start"]
    assert not set(started) & set(done_before)
