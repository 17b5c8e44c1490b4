"""Cancelling a tracked call: the call fails, that worker is torn down, the next invoke respawns it."""
import gevent
import pytest

from tests.core.problems import assert_problem
from tests.runtime_plugins.support import assert_gone, install, invoke, status, wait_until, worker_plugin

ECHO = "test.echo"


@pytest.fixture
def echo(rt, tmp_path):
    install(rt, worker_plugin(tmp_path, "echo", ECHO))
    return ECHO


def start_held_call(rt, plugin_id, call_id):
    """An invoke the worker never answers, running in the background until it is tracked."""
    call = gevent.spawn(invoke, rt, plugin_id, "hold", {}, call_id)
    runtime = rt.application.extensions["agenthost"].service("workers")
    assert wait_until(lambda: call_id in getattr(runtime.get(plugin_id), "calls", {}))
    return call


def cancel(rt, plugin_id, call_id):
    return rt.post(f"/api/plugin-runtime/{plugin_id}/invoke/{call_id}/cancel")


def test_cancel_fails_the_call_and_tears_the_worker_down(rt, echo):
    call = start_held_call(rt, echo, "job-1")
    pid = status(rt, echo)["pid"]

    resp = cancel(rt, echo, "job-1")

    assert resp.status_code == 200 and resp.json == {"cancelled": True}
    assert_problem(call.get(timeout=5), 409, "call_cancelled")
    assert_gone(pid)
    after = status(rt, echo)
    assert after["pid"] is None and after["state"] == "stopped"
    assert after["fault"] is None  # a cancel is not a crash: no backoff, no crash count
    assert after["backoff"]["active"] is False


def test_the_next_invoke_after_a_cancel_respawns_the_worker(rt, echo):
    call = start_held_call(rt, echo, "job-2")
    old_pid = status(rt, echo)["pid"]
    cancel(rt, echo, "job-2")
    call.get(timeout=5)

    resp = invoke(rt, echo, "pid")

    assert resp.status_code == 200
    assert resp.json["pid"] != old_pid and resp.json["pid"] == status(rt, echo)["pid"]


def test_cancel_with_a_numeric_call_id(rt, echo):
    call = start_held_call(rt, echo, 42)
    assert cancel(rt, echo, "42").json == {"cancelled": True}
    assert_problem(call.get(timeout=5), 409, "call_cancelled")


def test_cancel_of_an_unknown_call_id_changes_nothing(rt, echo):
    pid = invoke(rt, echo, "pid").json["pid"]
    assert cancel(rt, echo, "never-started").json == {"cancelled": False}
    assert status(rt, echo)["pid"] == pid  # the worker was not torn down


def test_cancel_of_a_finished_call_is_false(rt, echo):
    assert invoke(rt, echo, "echo", {}, "done-1").status_code == 200
    assert cancel(rt, echo, "done-1").json == {"cancelled": False}


def test_cancel_on_an_unknown_plugin_is_404(rt):
    assert_problem(cancel(rt, "no.such.plugin", "x"), 404)


def test_other_calls_on_the_torn_down_worker_fail_with_a_clear_error(rt, echo):
    held = start_held_call(rt, echo, "job-a")
    other = gevent.spawn(invoke, rt, echo, "hold", {}, "job-b")
    assert wait_until(lambda: "job-b" in rt.application.extensions["agenthost"].service("workers").get(echo).calls)
    cancel(rt, echo, "job-a")
    assert_problem(held.get(timeout=5), 409, "call_cancelled")
    body = assert_problem(other.get(timeout=5), 502, "worker_fault")
    assert "stopped" in body["detail"]
