"""Invoking a runtime plugin: lazy spawn, JSON-RPC results and errors, pipelining, call ids, bad input."""
import gevent
import pytest

from tests.conftest import TOKEN
from tests.core.problems import assert_problem
from tests.runtime_plugins.support import (HELLO_ID, install, installed_ids, invoke, process_gone, set_enabled,
                                           status, wait_until, worker_plugin)

ECHO = "test.echo"


def workers(rt):
    return rt.application.extensions["agenthost"].service("workers")


@pytest.fixture
def echo(rt, tmp_path):
    install(rt, worker_plugin(tmp_path, "echo", ECHO))
    return ECHO


def test_worker_spawns_lazily_on_the_first_invoke(rt, hello_zip):
    install(rt, hello_zip)
    before = status(rt, HELLO_ID)
    assert before["pid"] is None and before["state"] == "stopped"

    resp = invoke(rt, HELLO_ID, "hello/echo", {"x": [1, 2]})

    assert resp.status_code == 200
    assert resp.json == {"echo": {"x": [1, 2]}}
    after = status(rt, HELLO_ID)
    assert after["state"] == "running" and after["runtime"] == "python"
    assert isinstance(after["pid"], int) and not process_gone(after["pid"])
    assert after["fault"] is None and after["restarts"] == 0


def test_invoke_returns_the_json_rpc_result_from_the_same_worker(rt, echo):
    first = invoke(rt, echo, "pid").json["pid"]
    second = invoke(rt, echo, "pid").json["pid"]
    assert first == second == status(rt, echo)["pid"]


def test_status_lists_every_installed_plugin(rt, echo, hello_zip):
    install(rt, hello_zip)
    set_enabled(rt, HELLO_ID, False)
    rows = {r["pluginId"]: r for r in rt.get("/api/plugin-runtime/status").json}
    assert set(rows) == {echo, HELLO_ID}
    assert rows[HELLO_ID]["state"] == "disabled" and rows[HELLO_ID]["pid"] is None
    assert rows[echo]["state"] == "stopped"
    assert {"state", "fault", "runtime", "pid", "restarts", "backoff", "sandbox"} <= set(rows[echo])


def test_a_json_rpc_error_answers_a_problem_with_its_code_and_message(rt, echo):
    body = assert_problem(invoke(rt, echo, "fail"), 422, "rpc_error")
    assert body["rpcCode"] == -32050
    assert body["rpcMessage"] == "the widget is broken"
    assert "the widget is broken" in body["detail"]


def test_an_unknown_method_answers_the_workers_method_not_found(rt, echo):
    body = assert_problem(invoke(rt, echo, "no/such/method"), 422, "rpc_error")
    assert body["rpcCode"] == -32601
    assert status(rt, echo)["state"] == "running"  # an error answer is not a fault


def test_concurrent_invokes_pipeline_over_one_worker(rt, echo):
    """Eight calls wait for each other inside the worker: they only finish if all are in flight at once."""
    n = 8
    calls = [gevent.spawn(invoke, rt, echo, "gather", {"n": n, "key": "pipe"}, f"c{i}") for i in range(n)]
    gevent.joinall(calls, timeout=15)
    results = [c.value for c in calls]
    assert all(r is not None and r.status_code == 200 for r in results), [r and r.json for r in results]
    assert all(r.json == {"gathered": n} for r in results)
    assert status(rt, echo)["restarts"] == 0


def test_a_call_id_in_flight_cannot_be_used_again(rt, echo):
    pending = gevent.spawn(invoke, rt, echo, "gather", {"n": 2, "key": "dup"}, "same-id")
    assert wait_until(lambda: "same-id" in getattr(workers(rt).get(echo), "calls", {}))
    assert_problem(invoke(rt, echo, "echo", {}, "same-id"), 409, "call_id_in_use")
    # The first call is undisturbed: a second call with another id releases it.
    assert invoke(rt, echo, "gather", {"n": 2, "key": "dup"}, "other-id").status_code == 200
    assert pending.get(timeout=10).status_code == 200
    # Once answered, the id is free again.
    assert invoke(rt, echo, "echo", {"again": True}, "same-id").json == {"echo": {"again": True}}


def test_numeric_call_ids_do_not_collide_with_the_hosts_own_request_ids(rt, echo):
    for call_id in (1, 2, 3, 4):
        assert invoke(rt, echo, "echo", {"n": call_id}, call_id).json == {"echo": {"n": call_id}}


def test_invoke_of_an_unknown_plugin_is_404(rt):
    assert_problem(invoke(rt, "no.such.plugin", "ping"), 404)
    assert_problem(rt.get("/api/plugin-runtime/no.such.plugin/status"), 404)


def test_invoke_of_a_disabled_plugin_answers_a_problem_and_spawns_nothing(rt, echo):
    set_enabled(rt, echo, False)
    assert_problem(invoke(rt, echo, "echo", {}), 409, "plugin_not_enabled")
    snapshot = status(rt, echo)
    assert snapshot["state"] == "disabled" and snapshot["pid"] is None
    assert installed_ids(rt) == []  # the enabled list leaves it out


BAD_BODIES = [
    {},
    {"method": ""},
    {"method": 7},
    {"method": "x" * 201},
    {"method": "echo", "params": "a string"},
    {"method": "echo", "params": 3},
    {"method": "echo", "callId": True},
    {"method": "echo", "callId": {"a": 1}},
    {"method": "echo", "callId": "c" * 129},
    {"method": "echo", "callId": ""},
    {"method": "echo", "callId": 2**60},
    {"method": "echo", "surprise": 1},
]


def test_invalid_invoke_bodies_are_400_and_spawn_nothing(rt, echo):
    for body in BAD_BODIES:
        problem = assert_problem(rt.post(f"/api/plugin-runtime/{echo}/invoke", json=body), 400)
        assert problem["errors"], body
    assert status(rt, echo)["pid"] is None


def test_malformed_json_and_wrong_media_type_are_refused(rt, echo):
    url = f"/api/plugin-runtime/{echo}/invoke"
    assert_problem(rt.post(url, data="{not json", content_type="application/json"), 400)
    assert_problem(rt.post(url, data="method=echo", content_type="application/x-www-form-urlencoded"), 415)
    assert status(rt, echo)["pid"] is None


def test_runtime_endpoints_need_the_token(rt_app, rt, echo):
    anonymous = rt_app.test_client()
    for path in ("/api/plugin-runtime", "/api/plugin-runtime/status", f"/api/plugin-runtime/{echo}/status",
                 f"/api/plugin-runtime/{echo}/logs"):
        assert_problem(anonymous.get(path), 401)
        assert_problem(anonymous.get(path, headers={"X-Service-Token": TOKEN + "x"}), 401)
    assert_problem(anonymous.post(f"/api/plugin-runtime/{echo}/invoke", json={"method": "echo"}), 401)
    assert status(rt, echo)["pid"] is None
