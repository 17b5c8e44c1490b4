"""Several hosts on one database fire each due time once; a host killed across or during a fire coalesces."""
import datetime as dt
import os
import signal
import subprocess
import sys
from pathlib import Path

import gevent
import pytest
import requests

from core import datasource as ds_file
from tests.conftest import HEADERS, TOKEN
from tests.schedules.support import (FAST, INPUT_SCHEMA, INPUTS, PLAN, EchoTool, get, schedule, schedule_tasks,
                                     wait_for, workflow)

ROOT = Path(__file__).resolve().parents[2]


def parse(stamp):
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_hosts_fire_each_due_time_exactly_once(make_app, backend):
    # Both loops look at the database often, so both are awake at every due time.
    config = {**FAST, "schedules.rescan-seconds": 0.05}
    app_a = make_app(plugins=[EchoTool()], backend=backend, config=config)
    app_b = make_app(plugins=[EchoTool()], config=config)  # same data dir: the same database
    client = app_a.test_client()
    row = schedule(client, workflow(client), intervalSeconds=1)
    created = parse(row["createdAt"])
    done = wait_for(lambda: (r := get(app_b.test_client(), row["id"]))["fires"] >= 3 and r)
    assert client.delete(f"/api/agent/schedules/{row['id']}", headers=HEADERS).status_code == 200
    tasks = schedule_tasks(client, row["id"])
    fires = get(client, row["id"])["fires"]
    assert len(tasks) == fires >= done["fires"]
    assert len({t["runId"] for t in tasks}) == fires
    # One fire per due time: the k-th task belongs to the k-th second after creation.
    slots = [int((parse(t["queuedAt"]) - created).total_seconds()) for t in tasks]
    assert slots == list(range(1, fires + 1)), slots


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_concurrent_claims_of_one_fire_admit_one_run(make_app, backend):
    app_a = make_app(plugins=[EchoTool()], backend=backend, config=FAST)
    app_b = make_app(plugins=[EchoTool()], config=FAST)
    services = [app.extensions["agenthost"].service("schedules") for app in (app_a, app_b)]
    for service in services:
        service.stop()  # only the racing greenlets below fire
    client = app_a.test_client()
    row = schedule(client, workflow(client), intervalSeconds=60, fireImmediately=True)
    racers = [gevent.spawn(services[i % 2].fire_due) for i in range(12)]
    gevent.joinall(racers, raise_error=True)
    assert sum(g.value for g in racers) == 1
    after = get(client, row["id"])
    assert after["fires"] == 1 and len(schedule_tasks(client, row["id"])) == 1
    assert parse(after["nextFireAt"]) == parse(row["createdAt"]) + dt.timedelta(seconds=60)


def test_host_down_across_due_times_coalesces_them_on_restart(make_app, data_dir):
    config = {**FAST, "schedules.missed-grace-seconds": 0.2}
    app_a = make_app(plugins=[EchoTool()], config=config)
    client = app_a.test_client()
    row = schedule(client, workflow(client), intervalSeconds=1)
    created = parse(row["createdAt"])
    app_a.extensions["agenthost"].service("schedules").stop()  # the host's firing stops dead
    gevent.sleep(max(0.0, (created + dt.timedelta(seconds=2.5) - dt.datetime.now(dt.timezone.utc)).total_seconds()))
    started = dt.datetime.now(dt.timezone.utc)
    app_b = make_app(plugins=[EchoTool()], config=config, data_dir=data_dir)
    client_b = app_b.test_client()
    wait_for(lambda: get(client_b, row["id"])["fires"] >= 1)
    client_b.delete(f"/api/agent/schedules/{row['id']}", headers=HEADERS)
    after = get(client_b, row["id"])
    tasks = schedule_tasks(client_b, row["id"])
    assert len(tasks) == after["fires"]
    coalesced = parse(tasks[0]["queuedAt"])
    assert coalesced >= started  # nothing fired while the host was down
    # Every due time up to the coalesced fire was missed (all came late); later ones were on time.
    due_times_passed = int((coalesced - created).total_seconds())
    assert due_times_passed >= 2
    assert after["missedFires"] == due_times_passed


def start_host(data_dir, *flags):
    proc = subprocess.Popen([sys.executable, "-m", "tests.schedules.host_process", str(data_dir), TOKEN, *flags],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = proc.stdout.readline()
    assert line.startswith("SERVICE_PORT="), line
    return proc, f"http://127.0.0.1:{int(line.strip().split('=', 1)[1])}"


def stop(proc, sig=signal.SIGTERM):
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(15)
    proc.stdout.close()


def test_host_killed_during_a_fire_fires_once_after_restart(data_dir, fresh_datasource):
    """SIGKILL inside the fire's transaction: the claim is rolled back with it, so the restarted
    host fires the (now late) due time once, counted as missed; nothing fires twice."""
    ds_file.write(data_dir, fresh_datasource("sqlite"))
    proc, url = start_host(data_dir, "--pause-in-fire")
    try:
        http = requests.Session()
        http.headers.update(HEADERS)
        resp = http.post(f"{url}/api/workflows", json={"name": "Ping", "inputSchema": INPUT_SCHEMA, "plan": PLAN})
        wf = resp.json()["id"]
        assert http.post(f"{url}/api/workflows/{wf}/publish", json={"published": True}).status_code == 200
        resp = http.post(f"{url}/api/agent/schedules",
                         json={"workflowId": wf, "inputs": INPUTS, "intervalSeconds": 1, "recurring": False})
        assert resp.status_code == 201
        row = resp.json()
        assert proc.stdout.readline().strip() == "FIRE_IN_PROGRESS"
    finally:
        stop(proc, signal.SIGKILL)
    proc, url = start_host(data_dir)
    try:
        http = requests.Session()
        http.headers.update(HEADERS)

        def ended():
            current = http.get(f"{url}/api/agent/schedules/{row['id']}").json()
            return current["state"] != "active" and current

        done = wait_for(ended)
        assert done["state"] == "completed" and done["fires"] == 1 and done["missedFires"] == 1
        tasks = [t for t in http.get(f"{url}/api/agent/tasks?limit=200").json()
                 if t["source"] == f"schedule:{row['id']}"]
        assert [t["taskId"] for t in tasks] == [done["lastTaskId"]]
        # Fired after the start-up sweep of queued tasks: the run really happens.
        task = http.get(f"{url}/api/agent/tasks/{done['lastTaskId']}?timeoutMs=10000").json()
        assert task["state"] == "succeeded", task
        runs = http.get(f"{url}/api/agent/runs").json()
        assert [r["runId"] for r in runs] == [done["lastRunId"]]  # the killed fire left no run behind
    finally:
        stop(proc)
