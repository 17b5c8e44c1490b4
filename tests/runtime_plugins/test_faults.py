"""Worker faults: framing, handshake, timeout, crash, out of memory, runtime missing; backoff and crash loops."""
import pytest

from tests.core.problems import assert_problem
from tests.runtime_plugins.support import (FAST, arm, assert_gone, authed, install, invoke, set_enabled, status,
                                           upload, wait_until, worker_plugin, zip_folder)


def setup_worker(rt, tmp_path, script, plugin_id=None):
    plugin_id = plugin_id or f"test.{script.replace('_', '-')}"
    install(rt, worker_plugin(tmp_path, script, plugin_id))
    return plugin_id


def test_garbage_on_stdout_is_a_framing_fault_that_kills_the_worker(rt, tmp_path):
    plugin = setup_worker(rt, tmp_path, "garbage")
    assert invoke(rt, plugin, "ping").status_code == 200
    pid = status(rt, plugin)["pid"]

    body = assert_problem(invoke(rt, plugin, "work"), 502, "worker_fault")

    assert body["faultCategory"] == "framing"
    assert "standard output" in body["detail"] and "hello from print()" in body["detail"]
    assert_gone(pid)
    snapshot = status(rt, plugin)
    assert snapshot["state"] == "faulted" and snapshot["pid"] is None
    assert snapshot["fault"]["category"] == "framing"
    assert snapshot["fault"]["message"] == body["detail"]


@pytest.mark.parametrize("script, detail", [
    ("exit_at_start", "exited during initialize"),
    ("hang_initialize", "initialize got no answer"),
    ("wrong_protocol", "protocol version mismatch"),
])
def test_a_failed_handshake_is_a_handshake_fault(rt, tmp_path, data_dir, script, detail):
    plugin = setup_worker(rt, tmp_path, script)
    arm(data_dir, plugin)

    body = assert_problem(invoke(rt, plugin, "ping"), 502, "worker_fault")

    assert body["faultCategory"] == "handshake"
    assert detail in body["detail"]
    snapshot = status(rt, plugin)
    assert snapshot["fault"]["category"] == "handshake" and snapshot["pid"] is None
    assert snapshot["state"] == "faulted"
    workers = rt.application.extensions["agenthost"].service("workers")
    assert_gone(workers.get(plugin).faulted_worker.pid)


def test_the_protocol_mismatch_names_both_versions(rt, tmp_path, data_dir):
    plugin = setup_worker(rt, tmp_path, "wrong_protocol")
    arm(data_dir, plugin)
    detail = assert_problem(invoke(rt, plugin, "ping"), 502)["detail"]
    assert "2025-06-18" in detail and "1999-01-01" in detail


def test_a_call_that_is_never_answered_times_out(rt, tmp_path):
    plugin = setup_worker(rt, tmp_path, "never_answers")
    assert invoke(rt, plugin, "ping").status_code == 200
    pid = status(rt, plugin)["pid"]

    body = assert_problem(invoke(rt, plugin, "work"), 502, "worker_fault")

    assert body["faultCategory"] == "timeout"
    assert "work got no answer within 1 s" in body["detail"]
    assert_gone(pid)
    assert status(rt, plugin)["fault"]["category"] == "timeout"


def test_a_worker_that_dies_mid_call_is_a_crash_and_the_next_invoke_restarts_it(rt, tmp_path):
    plugin = setup_worker(rt, tmp_path, "crash")
    assert invoke(rt, plugin, "ping").status_code == 200
    first_pid = status(rt, plugin)["pid"]

    body = assert_problem(invoke(rt, plugin, "work"), 502, "worker_fault")
    assert body["faultCategory"] == "crashed" and "exit 1" in body["detail"]
    assert_gone(first_pid)

    assert invoke(rt, plugin, "ping").status_code == 200  # respawned after the (short) backoff
    snapshot = status(rt, plugin)
    assert snapshot["restarts"] == 1 and snapshot["state"] == "running"
    assert snapshot["pid"] not in (None, first_pid)
    assert snapshot["fault"] is None


def test_running_out_of_memory_is_its_own_category(rt, tmp_path):
    plugin = setup_worker(rt, tmp_path, "oom")
    body = assert_problem(invoke(rt, plugin, "work"), 502, "worker_fault")
    assert body["faultCategory"] == "out-of-memory"
    assert status(rt, plugin)["fault"]["category"] == "out-of-memory"
    messages = [e["message"] for e in rt.get(f"/api/plugin-runtime/{plugin}/logs").json]
    assert any("MemoryError" in m for m in messages)


def test_three_crashes_put_the_plugin_in_a_crash_loop_until_disable_and_enable(rt, tmp_path):
    plugin = setup_worker(rt, tmp_path, "crash")
    delays = []
    for _ in range(3):
        assert_problem(invoke(rt, plugin, "work"), 502, "worker_fault")
        delays.append(status(rt, plugin)["backoff"]["lastDelayMs"])

    snapshot = status(rt, plugin)
    assert snapshot["state"] == "crash-loop" and snapshot["pid"] is None
    assert delays[:2] == [50, 100]  # exponential from the 0.05 s base
    refused = assert_problem(invoke(rt, plugin, "ping"), 503, "plugin_crash_loop")
    assert "disable and enable" in refused["detail"]
    assert status(rt, plugin)["pid"] is None  # refused without spawning

    set_enabled(rt, plugin, False)
    set_enabled(rt, plugin, True)

    assert invoke(rt, plugin, "ping").status_code == 200
    fresh = status(rt, plugin)
    assert fresh["state"] == "running" and fresh["fault"] is None and fresh["restarts"] == 0


def test_backoff_is_capped(make_app, tmp_path):
    app = make_app(config={**FAST, "plugins.crash-limit": 10, "plugins.backoff-cap-seconds": 0.1})
    rt = authed(app)
    plugin = setup_worker(rt, tmp_path, "crash")
    delays = []
    for _ in range(4):
        assert_problem(invoke(rt, plugin, "work"), 502)
        delays.append(status(rt, plugin)["backoff"]["lastDelayMs"])
    assert delays == [50, 100, 100, 100]


def test_a_long_backoff_is_visible_in_status_and_refuses_invokes_with_retry_after(make_app, tmp_path):
    app = make_app(config={**FAST, "plugins.backoff-base-seconds": 30, "plugins.backoff-cap-seconds": 60})
    rt = authed(app)
    plugin = setup_worker(rt, tmp_path, "crash")
    assert_problem(invoke(rt, plugin, "work"), 502)

    backoff = status(rt, plugin)["backoff"]
    assert backoff["active"] is True and backoff["lastDelayMs"] == 30000
    assert 0 < backoff["remainingMs"] <= 30000

    resp = invoke(rt, plugin, "ping")
    assert_problem(resp, 503, "plugin_backing_off")
    assert 1 <= int(resp.headers["Retry-After"]) <= 31
    assert status(rt, plugin)["pid"] is None


def test_a_missing_runtime_is_a_clear_fault(rt, tmp_path):
    """A `command` plugin whose program is not on this machine fails its install health check."""
    folder = worker_plugin(tmp_path, "echo", "test.missing", runtime="command",
                           command=["no-such-program-here", "--serve"])
    body = assert_problem(upload(rt, zip_folder(folder)), 422, "health_check_failed")
    assert body["faultCategory"] == "runtime-missing"
    assert "no-such-program-here" in body["detail"]


def test_fault_events_reach_the_log(rt, tmp_path):
    plugin = setup_worker(rt, tmp_path, "garbage")
    invoke(rt, plugin, "work")
    events = rt.get(f"/api/plugin-runtime/{plugin}/logs").json
    faults = [e for e in events if e["logger"] == "agenthost.supervisor"]
    assert faults and faults[-1]["level"] == "ERROR" and "framing" in faults[-1]["message"]
    assert wait_until(lambda: status(rt, plugin)["pid"] is None)
