"""Rules that hang on the database, on every backend: commit before publish, no gap or duplicate where a
stream's history meets its live events, large results, and the run list's order."""
import secrets

import gevent
import pytest
import requests
from gevent.pywsgi import WSGIServer

from core import datasource as ds_file
from core.app import create_app
from core.config import Config
from core.launcher import bind
from tests.agent.support import LINEAR, Api, Stream, Tools, assert_problem
from tests.conftest import TOKEN, _fresh_mysql, _fresh_postgres, require_service

CAP = 16 * 1024


@pytest.fixture(scope="module", params=["sqlite", "postgresql", "mysql"])
def served(request, tmp_path_factory):
    """One app per backend for the module, served on a loopback port (building one migrates every area)."""
    drop = None
    if request.param == "sqlite":
        datasource = {"type": "sqlite", "params": {"path": f"db-{secrets.token_hex(4)}.sqlite"}}
    else:
        require_service(request.param)
        datasource, drop = _fresh_postgres() if request.param == "postgresql" else _fresh_mysql()
    data_dir = tmp_path_factory.mktemp("data")
    ds_file.write(data_dir, datasource)
    tools = Tools()
    app = create_app(Config({"service.auth.token": TOKEN, "service.data-dir": str(data_dir),
                             "agent.step-concurrency": 16}), [tools], load_entry_points=False)
    assert app.extensions["agenthost"].db.kind == request.param
    listener = bind(0)
    server = WSGIServer(listener, app, log=None, error_log=None)
    server.start()
    yield tools, Api(f"http://127.0.0.1:{listener.getsockname()[1]}")
    server.stop(timeout=1)
    app.extensions["agenthost"].stop()
    if drop:
        drop()


def test_streams_opened_mid_run_get_history_then_live_without_gap_or_duplicate(served):
    tools, api = served
    tools.release.clear()
    steps = [{"id": "hold", "tool": "block"}]
    # A chain and a fan-out: events are published one after another and by concurrent steps.
    steps += [{"id": f"s{i}", "tool": "echo", "arguments": {"v": i}, "dependsOn": ["hold"] if i == 0 else [f"s{i-1}"]}
              for i in range(20)]
    steps += [{"id": f"f{i}", "tool": "echo", "arguments": {"v": i}, "dependsOn": ["hold"]} for i in range(30)]
    run_id = api.start({"steps": steps}, planApproval="auto")
    first = Stream(api.base, run_id)
    first.first("step_start")  # "hold" is running: the run is in the middle
    middle = Stream(api.base, run_id)
    tools.release.set()
    # More streams join while 50 steps publish as fast as they can.
    late = []
    for _ in range(4):
        gevent.sleep(0.003)
        late.append(Stream(api.base, run_id))
    for stream in [first, middle, *late]:
        stream.join()
    history = api.streamed(run_id)
    assert history[-1][0] == "complete"
    for stream in [first, middle, *late]:
        assert stream.events[0] == (": connected", None)
        assert stream.frames() == history  # each event once, in order


def test_every_event_is_committed_before_a_subscriber_sees_it(served):
    tools, api = served
    tools.failures["b"] = 1
    seen = []
    problems = []

    def check(event, data):
        seen.append((event, data))
        detail = api.detail(run_id)
        streamed = [(e["type"], e["data"]) for e in detail["events"] if e["streamed"]]
        if streamed[:len(seen)] != seen:
            problems.append(("event not yet in history", event))
        if event == "step_complete":
            step = detail["steps"][data["index"]]
            if step["status"] != "complete" or step["result"] != data["result"]:
                problems.append(("step row behind its event", step))
        if event == "complete" and detail["status"] != "complete":
            problems.append(("run status behind complete", detail["status"]))

    run_id = api.start(LINEAR, planApproval="auto")
    stream = Stream(api.base, run_id, on_event=check)
    stream.join()
    assert stream.names()[-1] == "complete"
    assert problems == []
    assert len(seen) == len(api.streamed(run_id))


def test_a_large_result_is_truncated_for_display_but_later_steps_get_all_of_it(served):
    tools, api = served
    size = 100_000  # over MySQL's 64 KiB TEXT as well as over the display cap
    plan = {"steps": [{"id": "big", "tool": "big", "arguments": {"size": size}},
                      {"id": "measure", "tool": "size_of", "arguments": {"value": "{{steps.big.output}}"}},
                      {"id": "small", "tool": "echo", "arguments": {"v": "tiny"}}]}
    run_id = api.start(plan, planApproval="auto")
    stream = Stream(api.base, run_id).join()
    done = {d["id"]: d for e, d in stream.frames() if e == "step_complete"}
    assert done["big"]["resultTruncated"] is True
    assert len(done["big"]["result"]["preview"]) == CAP
    assert done["big"]["result"]["size"] > size
    assert done["measure"] == {**done["measure"], "resultTruncated": False, "result": {"length": size}}
    assert done["small"]["resultTruncated"] is False and done["small"]["result"] == {"v": "tiny", "ok": True}
    measured = next(c for c in tools.calls if c[0] == "size_of")
    assert measured[1]["value"]["blob"] == "x" * size  # the full value, not the preview

    detail = api.detail(run_id)
    steps = {s["id"]: s for s in detail["steps"]}
    assert steps["big"]["resultTruncated"] is True and steps["big"]["result"] == done["big"]["result"]
    assert steps["measure"]["resultTruncated"] is False and steps["measure"]["result"] == {"length": size}
    assert detail["result"]["outputs"]["big"] == done["big"]["result"]


def test_runs_are_listed_newest_updated_first(served):
    tools, api = served
    waiting = api.start({"steps": [{"id": "a", "tool": "echo"}]}, goal="first")
    Stream(api.base, waiting).first("plan_approval_requested")
    done = api.start({"steps": [{"id": "a", "tool": "echo"}]}, goal="second", planApproval="auto")
    api.wait_status(done, "complete")
    runs = [r for r in api.http.get(f"{api.base}/api/agent/runs").json() if r["runId"] in (done, waiting)]
    assert [r["runId"] for r in runs] == [done, waiting]
    assert api.approve(waiting).ok
    api.wait_status(waiting, "complete")
    everything = api.http.get(f"{api.base}/api/agent/runs").json()
    assert [r["updatedAt"] for r in everything] == sorted((r["updatedAt"] for r in everything), reverse=True)
    runs = [r for r in everything if r["runId"] in (done, waiting)]
    assert [r["runId"] for r in runs] == [waiting, done]
    assert [r["goal"] for r in runs] == ["first", "second"]
    assert set(runs[0]) == {"runId", "goal", "status", "workflowId", "workflowRevision", "parentRunId", "error",
                            "createdAt", "updatedAt", "finishedAt"}
    assert runs[0]["updatedAt"] >= runs[1]["updatedAt"]
    assert [r["runId"] for r in api.http.get(f"{api.base}/api/agent/runs?limit=1").json()] == [waiting]
    for bad in ("0", "201", "abc"):
        body = assert_problem(api.http.get(f"{api.base}/api/agent/runs?limit={bad}"), 400, "validation_failed")
        assert "limit" in body["errors"]
    assert requests.get(f"{api.base}/api/agent/runs", timeout=5).status_code == 401
