"""Branches, skip propagation, retries and concurrent steps, driven through the HTTP API."""
import datetime as dt

from tests.agent.support import Api, Stream, Tools

SOURCE = {"id": "src", "tool": "echo", "arguments": {"v": {"n": 5, "s": "x", "flag": True, "zero": 0}}}


def live(make_app, live_server, **config):
    tools = Tools()
    return tools, Api(live_server(make_app(plugins=[tools], config=config)))


def when(step_id, path, op, value=None, **extra):
    cond = {"ref": f"steps.src.output.v.{path}", "op": op}
    if op not in ("truthy", "falsy"):
        cond["value"] = value
    return {"id": step_id, "tool": "echo", "arguments": {"v": step_id}, "runWhen": cond, **extra}


def test_run_when_ops_decide_which_branches_run(make_app, live_server):
    tools, api = live(make_app, live_server)
    steps = [SOURCE,
             when("eq_yes", "n", "eq", 5), when("eq_no", "n", "eq", 6),
             when("ne_yes", "n", "ne", 6), when("ne_no", "n", "ne", 5),
             when("gt_yes", "n", "gt", 4), when("gt_no", "n", "gt", 5),
             when("lt_yes", "n", "lt", 6), when("lt_no", "n", "lt", 5),
             when("in_yes", "s", "in", ["x", "y"]), when("in_no", "s", "in", ["y"]),
             when("truthy_yes", "flag", "truthy"), when("truthy_no", "zero", "truthy"),
             when("falsy_yes", "zero", "falsy"), when("falsy_no", "flag", "falsy"),
             when("gt_wrong_type", "s", "gt", 3)]  # incomparable: the branch does not fire
    run_id = api.start({"steps": steps}, planApproval="auto")
    detail = api.wait_status(run_id, "complete")
    status = {s["id"]: s["status"] for s in detail["steps"]}
    assert {k for k, v in status.items() if v == "complete"} == {
        "src", "eq_yes", "ne_yes", "gt_yes", "lt_yes", "in_yes", "truthy_yes", "falsy_yes"}
    assert {k for k, v in status.items() if v == "skipped"} == {
        "eq_no", "ne_no", "gt_no", "lt_no", "in_no", "truthy_no", "falsy_no", "gt_wrong_type"}
    ran = {c[1]["v"] for c in tools.calls if isinstance(c[1]["v"], str)}
    assert ran == {k for k, v in status.items() if v == "complete"} - {"src"}
    skipped = [s for s in detail["steps"] if s["status"] == "skipped"]
    assert all(s["result"] is None and s["attempts"] == 0 for s in skipped)
    assert sorted(detail["result"]["skipped"]) == sorted(s["id"] for s in skipped)


def test_a_step_is_skipped_only_when_every_dependency_was_skipped(make_app, live_server):
    tools, api = live(make_app, live_server)
    steps = [SOURCE, when("off", "n", "eq", 0),
             {"id": "after_off", "tool": "echo", "dependsOn": ["off"]},
             {"id": "chain", "tool": "echo", "dependsOn": ["after_off"]},
             {"id": "mixed", "tool": "echo", "arguments": {"v": "mixed"}, "dependsOn": ["off", "src"]},
             {"id": "reads_skipped", "tool": "echo", "arguments": {"v": "{{steps.after_off.output}}"}}]
    run_id = api.start({"steps": steps}, planApproval="auto")
    stream = Stream(api.base, run_id).join()
    detail = api.detail(run_id)
    assert detail["status"] == "complete"
    status = {s["id"]: s["status"] for s in detail["steps"]}
    assert status == {"src": "complete", "off": "skipped", "after_off": "skipped", "chain": "skipped",
                      "mixed": "complete", "reads_skipped": "skipped"}
    assert sorted(d["id"] for e, d in stream.frames() if e == "step_skipped") == [
        "after_off", "chain", "off", "reads_skipped"]


def test_a_retry_safe_tool_retries_with_step_retry_events(make_app, live_server):
    tools, api = live(make_app, live_server)
    tools.failures["k"] = 2
    plan = {"steps": [{"id": "r", "tool": "flaky", "arguments": {"key": "k"},
                       "retry": {"maxAttempts": 3, "delayMs": 0}}]}
    run_id = api.start(plan, planApproval="auto")
    stream = Stream(api.base, run_id).join()
    assert stream.names()[-1] == "complete"
    retries = [d for e, d in stream.frames() if e == "step_retry"]
    assert retries == [
        {"index": 0, "nextAttempt": 2, "maxAttempts": 3, "delayMs": 0, "error": "k not yet"},
        {"index": 0, "nextAttempt": 3, "maxAttempts": 3, "delayMs": 0, "error": "k not yet"}]
    assert [d["attempt"] for e, d in stream.frames() if e == "step_start"] == [1, 2, 3]
    detail = api.detail(run_id)
    assert detail["steps"][0]["attempts"] == 3 and detail["steps"][0]["status"] == "complete"
    assert detail["steps"][0]["error"] is None
    assert api.audit(run_id, "step_retry") == retries  # kept in run history
    assert len({c[2] for c in tools.calls}) == 1  # every attempt is the same invocation


def test_retries_wait_delay_ms_between_attempts(make_app, live_server):
    tools, api = live(make_app, live_server)
    tools.failures["slow"] = 1
    plan = {"steps": [{"id": "r", "tool": "flaky", "arguments": {"key": "slow"},
                       "retry": {"maxAttempts": 2, "delayMs": 150}}]}
    run_id = api.start(plan, planApproval="auto")
    detail = api.wait_status(run_id, "complete")
    events = [(e["type"], e["createdAt"]) for e in detail["events"] if e["type"] in ("step_retry", "step_start")]
    assert [t for t, _ in events] == ["step_start", "step_retry", "step_start"]
    retry_at, next_start = (dt.datetime.fromisoformat(events[i][1].replace("Z", "+00:00")) for i in (1, 2))
    assert next_start - retry_at >= dt.timedelta(milliseconds=150)
    assert api.audit(run_id, "step_retry")[0]["delayMs"] == 150


def test_no_retry_unless_the_tool_or_the_step_is_retry_safe(make_app, live_server):
    tools, api = live(make_app, live_server)
    # A non-retry-safe tool fails at once, however many attempts the step allows.
    tools.failures["u"] = 1
    unsafe = {"steps": [{"id": "u", "tool": "flaky_unsafe", "arguments": {"key": "u"},
                         "retry": {"maxAttempts": 3, "delayMs": 0}},
                        {"id": "next", "tool": "echo", "dependsOn": ["u"]}]}
    run_id = api.start(unsafe, planApproval="auto")
    stream = Stream(api.base, run_id).join()
    assert "step_retry" not in stream.names() and "complete" not in stream.names()
    assert stream.frames()[-1] == ("error", {"message": "step u failed: u not yet"})
    detail = api.detail(run_id)
    assert detail["status"] == "failed"
    assert [(s["status"], s["attempts"]) for s in detail["steps"]] == [("failed", 1), ("pending", 0)]
    assert detail["steps"][0]["error"] == "u not yet"
    assert tools.names() == ["flaky_unsafe"]

    # The step can declare itself retry-safe ...
    tools.calls.clear()
    tools.failures["u2"] = 1
    opted_in = {"steps": [{"id": "u", "tool": "flaky_unsafe", "arguments": {"key": "u2"}, "retrySafe": True,
                           "retry": {"maxAttempts": 2, "delayMs": 0}}]}
    assert api.wait_status(api.start(opted_in, planApproval="auto"), "complete", "failed")["status"] == "complete"
    assert tools.names() == ["flaky_unsafe", "flaky_unsafe"]

    # ... or opt out although the tool is retry-safe.
    tools.calls.clear()
    tools.failures["s"] = 1
    opted_out = {"steps": [{"id": "s", "tool": "flaky", "arguments": {"key": "s"}, "retrySafe": False,
                            "retry": {"maxAttempts": 3, "delayMs": 0}}]}
    assert api.wait_status(api.start(opted_out, planApproval="auto"), "complete", "failed")["status"] == "failed"
    assert tools.names() == ["flaky"]


def test_a_step_fails_when_its_attempts_run_out(make_app, live_server):
    tools, api = live(make_app, live_server)
    tools.failures["x"] = 5
    plan = {"steps": [{"id": "x", "tool": "flaky", "arguments": {"key": "x"},
                       "retry": {"maxAttempts": 2, "delayMs": 0}}]}
    run_id = api.start(plan, planApproval="auto")
    stream = Stream(api.base, run_id).join()
    assert stream.names()[-3:] == ["step_retry", "step_start", "error"]
    assert api.detail(run_id)["steps"][0]["attempts"] == 2


def test_independent_steps_run_concurrently(make_app, live_server):
    tools, api = live(make_app, live_server, **{"agent.step-concurrency": 64})
    plan = {"steps": [{"id": f"w{i}", "tool": "wait", "arguments": {"ms": 200}} for i in range(64)]}
    run_id = api.start(plan, planApproval="auto")
    detail = api.wait_status(run_id, "complete", timeout=30)
    events = [e for e in detail["events"] if e["type"] in ("step_start", "step_complete", "complete")]
    first_done = next(i for i, e in enumerate(events) if e["type"] == "step_complete")
    assert first_done == 64  # all 64 started before any finished
    at = [dt.datetime.fromisoformat(e["createdAt"].replace("Z", "+00:00")) for e in events]
    elapsed = (at[-1] - at[0]).total_seconds()
    serial = 64 * 0.2
    assert elapsed < serial / 4, elapsed


def test_the_step_pool_bounds_concurrency(make_app, live_server):
    tools, api = live(make_app, live_server, **{"agent.step-concurrency": 4})
    plan = {"steps": [{"id": f"w{i}", "tool": "wait", "arguments": {"ms": 30}} for i in range(12)]}
    run_id = api.start(plan, planApproval="auto")
    detail = api.wait_status(run_id, "complete", timeout=30)
    in_flight, peak = 0, 0
    for e in detail["events"]:
        in_flight += {"step_start": 1, "step_complete": -1}.get(e["type"], 0)
        peak = max(peak, in_flight)
    assert peak == 4
    assert len(detail["result"]["outputs"]) == 12


def test_placeholders_pass_typed_values_between_steps(make_app, live_server):
    tools, api = live(make_app, live_server)
    plan = {"steps": [{"id": "a", "tool": "number", "arguments": {"n": 3}},
                      {"id": "b", "tool": "number", "arguments": {"n": "{{steps.a.output}}"}},
                      {"id": "c", "tool": "echo", "arguments": {"v": "a={{steps.a.output}} b={{steps.b.output}}"}}]}
    detail = api.wait_status(api.start(plan, planApproval="auto"), "complete")
    assert detail["result"]["outputs"] == {"a": 6, "b": 12, "c": {"v": "a=6 b=12", "ok": True}}
