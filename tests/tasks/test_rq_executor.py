"""Tasks on the RQ executor: a `core worker` process runs the run while the host serves its stream."""
import json
import os
import secrets
import subprocess
import sys

import gevent
import pytest
import requests

from tests.conftest import HEADERS, require_service

REDIS_URL = "redis://127.0.0.1:6379/0"

PLAN = {"goal": "rq", "steps": [
    {"id": "pause", "tool": "wait", "arguments": {"ms": 20}},
    {"id": "pick", "tool": "json_extract", "arguments": {"value": {"a": [1, 2, 3]}, "path": "a.1"},
     "dependsOn": ["pause"]},
]}


@pytest.fixture
def rq_setup(make_app, live_server, data_dir):
    require_service("redis")
    namespace = "t" + secrets.token_hex(6)
    config = {"service.redis-url": REDIS_URL, "service.redis-namespace": namespace}
    app = make_app(config=config)
    base = live_server(app)
    env = {**os.environ, "AGENTHOST_REDIS_NAMESPACE": namespace}
    worker = subprocess.Popen([sys.executable, "-m", "core", "worker", f"--redis={REDIS_URL}",
                               f"--data-dir={data_dir}"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    yield app, base, worker
    worker.terminate()
    try:
        worker.wait(10)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait(5)
    worker.stdout.close()
    worker.stderr.close()


def stream(base, run_id, events):
    ticket = requests.post(f"{base}/api/agent/stream-ticket", json={"runId": run_id}, headers=HEADERS).json()["ticket"]
    with requests.get(f"{base}/api/agent/stream", params={"runId": run_id, "ticket": ticket},
                      stream=True, timeout=30) as resp:
        name = None
        for raw in resp.iter_lines():
            line = raw.decode()
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))


def test_a_run_executes_in_the_worker_and_the_host_streams_and_gates_it(rq_setup):
    app, base, worker = rq_setup
    run_id = requests.post(f"{base}/api/agent/run", json={"goal": "rq", "config": {"plan": PLAN}},
                           headers=HEADERS).json()["runId"]
    events = []
    reader = gevent.spawn(stream, base, run_id, events)
    with gevent.Timeout(30):
        while not any(e == "plan_approval_requested" for e, _ in events):
            gevent.sleep(0.02)
    gate = next(d for e, d in events if e == "plan_approval_requested")["gateId"]
    stale = requests.post(f"{base}/api/agent/{run_id}/approve", json={"gateId": "stale"}, headers=HEADERS)
    assert stale.status_code == 409  # answered by the worker that holds the gate
    assert requests.post(f"{base}/api/agent/{run_id}/approve", json={"gateId": gate}, headers=HEADERS).ok
    reader.join(timeout=30)
    assert events[-1][0] == "complete"
    assert events[-1][1]["outputs"]["pick"] == 2

    task = app.extensions["agenthost"].tasks.for_run(run_id)
    snapshot = requests.get(f"{base}/api/agent/tasks/{task['taskId']}?timeoutMs=10000", headers=HEADERS).json()
    assert snapshot["state"] == "succeeded"  # the task ends just after the run's last event
    assert snapshot["priority"] == "interactive" and snapshot["runDurationMs"] is not None
    with app.extensions["agenthost"].db.session() as s:
        from core.tasks import Task
        assert s.get(Task, task["taskId"]).executor == "rq"
    assert worker.poll() is None


def test_a_running_rq_task_is_cancelled_through_the_bus(rq_setup):
    app, base, worker = rq_setup
    plan = {"steps": [{"id": "long", "tool": "wait", "arguments": {"ms": 60000}}]}
    run_id = requests.post(f"{base}/api/agent/run",
                           json={"goal": "c", "config": {"plan": plan, "planApproval": "auto"}},
                           headers=HEADERS).json()["runId"]
    host = app.extensions["agenthost"]
    with gevent.Timeout(30):
        while host.service("agent").store.load(run_id).status != "running":
            gevent.sleep(0.05)
    assert requests.post(f"{base}/api/agent/{run_id}/cancel", headers=HEADERS).ok
    with gevent.Timeout(30):
        while host.service("agent").store.load(run_id).status != "cancelled":
            gevent.sleep(0.05)
    task = host.tasks.for_run(run_id)
    final = requests.get(f"{base}/api/agent/tasks/{task['taskId']}?timeoutMs=10000", headers=HEADERS).json()
    assert final["state"] == "cancelled"
