"""The task rules that hold on both executors: the embedded pool and RQ with a `core worker` process."""
import os
import secrets
import subprocess
import sys

import gevent
import pytest

from tests.conftest import HEADERS, require_service

REDIS_URL = "redis://127.0.0.1:6379/0"
QUICK = {"steps": [{"id": "pick", "tool": "json_extract", "arguments": {"value": {"a": 5}, "path": "a"}}]}
SLOW = {"steps": [{"id": "long", "tool": "wait", "arguments": {"ms": 60000}}]}


@pytest.fixture(params=["embedded", "rq"])
def queue_app(request, make_app, data_dir):
    """``(app, client)`` on the executor of the parameter; for RQ a real `core worker` runs the bodies."""
    config = {"tasks.max-running": 1, "tasks.poll-seconds": 0.2}
    worker = None
    if request.param == "rq":
        require_service("redis")
        namespace = "e" + secrets.token_hex(6)
        config.update({"service.redis-url": REDIS_URL, "service.redis-namespace": namespace})
    app = make_app(config=config)
    if request.param == "rq":
        worker = subprocess.Popen([sys.executable, "-m", "core", "worker", f"--redis={REDIS_URL}",
                                   f"--namespace={namespace}", f"--data-dir={data_dir}"],
                                  env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = app.test_client()
    client.environ_base["HTTP_X_SERVICE_TOKEN"] = HEADERS["X-Service-Token"]
    yield app, client
    if worker is not None:
        worker.terminate()
        try:
            worker.wait(10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(5)


def start(client, plan):
    resp = client.post("/api/agent/run", json={"goal": "g", "config": {"plan": plan, "planApproval": "auto"}})
    assert resp.status_code == 201, resp.json
    return resp.json["runId"]


def task_of(app, run_id):
    return app.extensions["agenthost"].tasks.for_run(run_id)["taskId"]


def test_a_run_is_a_task_whose_snapshot_reports_its_phases(queue_app):
    app, client = queue_app
    task_id = task_of(app, start(client, QUICK))
    done = client.get(f"/api/agent/tasks/{task_id}?timeoutMs=30000").json
    assert done["state"] == "succeeded" and done["phase"] == "finished"
    assert done["priority"] == "interactive"
    assert done["output"]["status"] == "complete"
    assert done["queueWaitMs"] >= 0 and done["runDurationMs"] >= 0
    assert any(t["taskId"] == task_id for t in client.get("/api/agent/tasks").json)


def test_a_queued_task_is_removed_and_a_running_one_stops_cooperatively(queue_app):
    app, client = queue_app
    running = task_of(app, start(client, SLOW))
    queue = app.extensions["agenthost"].tasks
    with gevent.Timeout(30):
        while queue.get(running, "local")["state"] != "running":
            gevent.sleep(0.05)
    queued = task_of(app, start(client, QUICK))  # max-running 1: this one waits in the queue
    assert queue.get(queued, "local")["state"] == "queued"
    assert client.delete(f"/api/agent/tasks/{queued}").json["state"] == "cancelled"
    assert client.delete(f"/api/agent/tasks/{running}").json["state"] == "cancelling"
    final = client.get(f"/api/agent/tasks/{running}?timeoutMs=30000").json
    assert final["state"] == "cancelled"
    assert queue.get(queued, "local")["startedAt"] is None


def test_capacity_counts_running_and_queued_work(queue_app):
    app, client = queue_app
    running = task_of(app, start(client, SLOW))
    queue = app.extensions["agenthost"].tasks
    with gevent.Timeout(30):
        while queue.get(running, "local")["state"] != "running":
            gevent.sleep(0.05)
    start(client, QUICK)
    cap = client.get("/api/agent/tasks/capacity").json
    assert cap["running"] == 1 and cap["queued"] == 1
    assert cap["interactive"] == {"running": 1, "queued": 1}
    assert cap["owner"]["queued"] == 1 and cap["activeOwners"] == 1
    assert cap["oldestInteractiveQueueWaitMs"] >= 0
    client.delete(f"/api/agent/tasks/{running}")


def test_a_cancel_that_reaches_a_task_before_its_executor_does_is_kept(make_app):
    """Cancelled between being handed to an executor and starting: it never runs, its run ends cancelled."""
    app = make_app(config={"tasks.max-running": 1})
    host = app.extensions["agenthost"]
    run_id = host.service("agent").start_run("g", {"plan": QUICK, "planApproval": "auto"})
    task = host.tasks.for_run(run_id)
    host.tasks.stop()  # hold it: claim it by hand as a dispatcher handing it to RQ would
    from sqlalchemy import update

    from core.tasks import Task
    with host.db.session() as s:
        s.execute(update(Task).where(Task.id == task["taskId"]).values(state="running", executor="rq"))
    assert host.tasks.cancel(task["taskId"], "local")["state"] == "cancelling"
    host.tasks.execute_by_id(task["taskId"])  # what the worker does when it gets to it
    assert host.tasks.get(task["taskId"], "local")["state"] == "cancelled"
    assert host.service("agent").store.load(run_id).status == "cancelled"
