"""Worker processes across the host's life: none left behind, and a restarted host respawns them lazily."""
import os
from pathlib import Path

import gevent

from tests.core.problems import assert_problem
from tests.runtime_plugins.support import (FAST, HELLO_ID, assert_gone, authed, install, installed_ids, invoke,
                                           set_enabled, status, wait_until, worker_plugin)

ECHO = "test.echo"


def child_pids():
    """Live (or unreaped) children of this test process."""
    me, found = str(os.getpid()), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                found.add(int(entry))
    return found


def running_pid(rt, plugin_id):
    assert invoke(rt, plugin_id, "ping").status_code == 200
    pid = status(rt, plugin_id)["pid"]
    assert isinstance(pid, int)
    return pid


def test_install_and_its_health_check_leave_no_process_behind(rt, hello_zip):
    before = child_pids()
    install(rt, hello_zip)
    assert status(rt, HELLO_ID)["pid"] is None
    assert child_pids() - before == set()


def test_disable_stops_the_worker_at_once(rt, hello_zip):
    install(rt, hello_zip)
    pid = running_pid(rt, HELLO_ID)
    set_enabled(rt, HELLO_ID, False)
    assert_gone(pid)


def test_uninstall_stops_the_worker(rt, hello_zip):
    install(rt, hello_zip)
    pid = running_pid(rt, HELLO_ID)
    assert rt.delete(f"/api/plugin-packages/{HELLO_ID}").status_code == 200
    assert_gone(pid)


def test_host_shutdown_stops_every_worker(rt_app, rt, hello_zip, tmp_path):
    before = child_pids()
    install(rt, hello_zip)
    install(rt, worker_plugin(tmp_path, "echo", ECHO))
    pids = [running_pid(rt, HELLO_ID), running_pid(rt, ECHO)]

    rt_app.extensions["agenthost"].stop()

    assert_gone(*pids)
    assert child_pids() - before == set()


def test_a_restarted_host_brings_plugins_back_and_respawns_workers_lazily(make_app, hello_zip, tmp_path, data_dir):
    first = make_app(config=FAST)
    rt = authed(first)
    install(rt, hello_zip)
    install(rt, worker_plugin(tmp_path, "echo", ECHO))
    set_enabled(rt, HELLO_ID, False)
    assert rt.put("/api/settings", json={"logLevel": "ERROR"}).status_code == 200
    old_pid = running_pid(rt, ECHO)
    first.extensions["agenthost"].stop()
    assert_gone(old_pid)

    second = make_app(config=FAST, data_dir=data_dir)
    rt2 = authed(second)

    assert installed_ids(rt2) == [ECHO]
    assert status(rt2, ECHO)["pid"] is None and status(rt2, ECHO)["state"] == "stopped"
    assert status(rt2, HELLO_ID)["state"] == "disabled"
    params = invoke(rt2, ECHO, "initialize-params").json
    assert params["_meta"]["agenthost"]["logLevel"] == "ERROR"  # the stored level, from the first spawn
    new_pid = status(rt2, ECHO)["pid"]
    assert new_pid not in (None, old_pid)
    set_enabled(rt2, HELLO_ID, True)
    assert invoke(rt2, HELLO_ID, "hello/echo", {"back": True}).json == {"echo": {"back": True}}


def test_a_host_that_died_inside_an_update_recovers_the_installed_version(make_app, hello_zip, data_dir):
    first = make_app(config=FAST)
    install(authed(first), hello_zip)
    first.extensions["agenthost"].stop()
    # What a crash between the two renames of a commit leaves: only the .old folder, and staging debris.
    installed = Path(data_dir) / "plugins" / "installed"
    os.rename(installed / HELLO_ID, installed / f".old-{HELLO_ID}-0123456789ab")
    (Path(data_dir) / "plugins" / "staging" / f"{HELLO_ID}-fedcba987654").mkdir()

    rt = authed(make_app(config=FAST, data_dir=data_dir))

    assert sorted(p.name for p in installed.iterdir()) == [HELLO_ID]
    assert list((Path(data_dir) / "plugins" / "staging").iterdir()) == []
    assert invoke(rt, HELLO_ID, "hello/echo", {"ok": 1}).json == {"echo": {"ok": 1}}


def test_a_plugin_disabled_while_an_invoke_waits_out_its_backoff_spawns_nothing(make_app, tmp_path):
    rt = authed(make_app(config={**FAST, "plugins.backoff-base-seconds": 1}))
    install(rt, worker_plugin(tmp_path, "crash", "test.crash"))
    assert invoke(rt, "test.crash", "work").status_code == 502  # first crash: a 1 s backoff starts
    before = child_pids()
    managed = rt.application.extensions["agenthost"].service("workers").get("test.crash")
    waiting = gevent.spawn(invoke, rt, "test.crash", "ping")
    assert wait_until(managed.lock.locked)  # the invoke now sleeps out the backoff inside the supervisor

    set_enabled(rt, "test.crash", False)

    assert_problem(waiting.get(timeout=5), 409, "plugin_not_enabled")
    assert child_pids() - before == set()
