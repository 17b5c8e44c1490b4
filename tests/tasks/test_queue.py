"""The background task queue: admission limits, fair dispatch, long-poll, cancel and restart rules."""
import gevent
import pytest
from gevent.event import Event

from core.tasks import FairPolicy, Limits, TaskQueue
from hookspecs import hookimpl
from tests.conftest import HEADERS


class Kinds:
    """Registers test task kinds: `hold` waits for a release event, `echo` returns its payload."""

    __name__ = "task_kinds"

    def __init__(self):
        self.release = Event()
        self.started = []

    @hookimpl
    def startup(self, host):
        def hold(task, ctx):
            self.started.append(task["taskId"])
            gevent.wait([self.release, ctx.cancelled], count=1)
            return {"released": self.release.is_set()}

        def echo(task, ctx):
            self.started.append(task["taskId"])
            return {"echo": task["taskId"]}

        host.tasks.register_kind("hold", hold)
        host.tasks.register_kind("echo", echo)


def wait_until(predicate, timeout=5):
    with gevent.Timeout(timeout):
        while not predicate():
            gevent.sleep(0.005)


def test_a_task_runs_and_its_snapshot_reports_queue_wait_and_duration(make_app):
    kinds = Kinds()
    app = make_app(plugins=[kinds])
    host = app.extensions["agenthost"]
    task = host.tasks.admit("local", "normal", "echo", {})
    client = app.test_client()
    done = client.get(f"/api/agent/tasks/{task['taskId']}?timeoutMs=5000", headers=HEADERS).json
    assert done["state"] == "succeeded"
    assert done["output"] == {"echo": task["taskId"]}
    assert done["queueWaitMs"] >= 0 and done["runDurationMs"] >= 0 and done["startedAt"]
    listed = client.get("/api/agent/tasks", headers=HEADERS).json
    assert listed[0]["taskId"] == task["taskId"]


def test_long_poll_returns_when_the_task_ends_and_times_out_otherwise(make_app):
    kinds = Kinds()
    app = make_app(plugins=[kinds])
    host = app.extensions["agenthost"]
    task = host.tasks.admit("local", "interactive", "hold", {})
    client = app.test_client()
    pending = client.get(f"/api/agent/tasks/{task['taskId']}?timeoutMs=50", headers=HEADERS).json
    assert pending["state"] == "running"
    poller = gevent.spawn(client.get, f"/api/agent/tasks/{task['taskId']}?timeoutMs=5000", headers=HEADERS)
    gevent.sleep(0.05)
    kinds.release.set()
    assert poller.get(timeout=5).json["state"] == "succeeded"
    too_long = client.get(f"/api/agent/tasks/{task['taskId']}?timeoutMs=60001", headers=HEADERS)
    assert too_long.status_code == 400


def test_cancel_removes_a_queued_task_and_stops_a_running_one(make_app):
    kinds = Kinds()
    app = make_app(plugins=[kinds], config={"tasks.max-running": 1})
    host = app.extensions["agenthost"]
    running = host.tasks.admit("local", "normal", "hold", {})
    wait_until(lambda: running["taskId"] in kinds.started)
    queued = host.tasks.admit("local", "normal", "hold", {})
    client = app.test_client()
    resp = client.delete(f"/api/agent/tasks/{queued['taskId']}", headers=HEADERS)
    assert resp.json == {"taskId": queued["taskId"], "cancelled": True, "state": "cancelled"}
    assert client.delete(f"/api/agent/tasks/{queued['taskId']}", headers=HEADERS).status_code == 409
    resp = client.delete(f"/api/agent/tasks/{running['taskId']}", headers=HEADERS)
    assert resp.json["state"] == "cancelling"
    final = client.get(f"/api/agent/tasks/{running['taskId']}?timeoutMs=5000", headers=HEADERS).json
    assert final["state"] == "cancelled"
    assert queued["taskId"] not in kinds.started
    assert client.delete("/api/agent/tasks/nope", headers=HEADERS).status_code == 404


@pytest.mark.parametrize("priority,fill,scope,cap_priority", [
    ("interactive", {"interactive": 32}, "owner", None),
    ("batch", {"batch": 16}, "owner-priority", "batch"),
    ("normal", {"normal": 24}, "owner-priority", "normal"),
])
def test_owner_limits_answer_429_with_their_scope(make_app, priority, fill, scope, cap_priority):
    app = make_app(plugins=[Kinds()], config={"tasks.max-running": 1})
    host = app.extensions["agenthost"]
    host.tasks.stop()  # keep everything queued
    for p, n in fill.items():
        for _ in range(n):
            host.tasks.admit("local", p, "echo", {})
    with pytest.raises(Exception) as info:
        host.tasks.admit("local", priority, "echo", {})
    err = info.value
    assert err.status == 429 and err.extra["capacityScope"] == scope
    assert err.extra.get("capacityPriority") == cap_priority
    assert err.headers["Retry-After"] == "1"


def test_global_limits_answer_429_with_their_scope(make_app):
    app = make_app(plugins=[Kinds()])
    host = app.extensions["agenthost"]
    host.tasks.stop()
    for i in range(4):  # four owners x 16 batch = the global batch limit of 64
        for _ in range(16):
            host.tasks.admit(f"o{i}", "batch", "echo", {})
    with pytest.raises(Exception) as info:
        host.tasks.admit("o9", "batch", "echo", {})
    assert info.value.extra == {"capacityScope": "global-priority", "capacityPriority": "batch"}
    for i in range(4, 8):  # 64 batch + 32 normal = the non-interactive limit of 96
        for _ in range(8):
            host.tasks.admit(f"o{i}", "normal", "echo", {})
    with pytest.raises(Exception) as info:
        host.tasks.admit("o9", "normal", "echo", {})
    assert info.value.extra == {"capacityScope": "global-priority", "capacityPriority": "normal"}
    for i in range(8, 12):  # 96 + 32 interactive = the global limit of 128
        for _ in range(8):
            host.tasks.admit(f"o{i}", "interactive", "echo", {})
    with pytest.raises(Exception) as info:
        host.tasks.admit("o99", "interactive", "echo", {})
    assert info.value.extra == {"capacityScope": "global"}
    cap = app.test_client().get("/api/agent/tasks/capacity", headers=HEADERS).json
    assert cap["queued"] == 128 and cap["saturated"] is True and cap["remaining"]["global"] == 0
    assert cap["schedulingPolicy"] == "owner-round-robin-weighted-priority"
    assert cap["activeOwners"] == 12
    assert cap["owner"]["queued"] == 0  # "local" has none; others' details are never exposed
    assert "o1" not in str(cap)


def test_policy_takes_owners_in_turn_and_weights_priorities_4_2_1():
    import datetime as dt
    now = dt.datetime.now(dt.timezone.utc)
    policy = FairPolicy(aging_seconds=3600)
    heads = {(o, p): now for o in ("a", "b") for p in ("interactive", "normal", "batch")}
    picks = [policy.pick(heads, now) for _ in range(14)]
    assert [o for o, _ in picks] == ["a", "b"] * 7
    a_priorities = [p for o, p in picks if o == "a"]
    assert a_priorities.count("interactive") == 4 and a_priorities.count("normal") == 2
    assert a_priorities.count("batch") == 1


def test_a_starving_task_runs_first():
    import datetime as dt
    now = dt.datetime.now(dt.timezone.utc)
    policy = FairPolicy(aging_seconds=10)
    heads = {("a", "interactive"): now, ("a", "batch"): now - dt.timedelta(seconds=11)}
    assert policy.pick(heads, now) == ("a", "batch")


def test_unfinished_tasks_are_failed_at_start_and_not_replayed(make_app, data_dir):
    kinds = Kinds()
    first = make_app(plugins=[kinds], config={"tasks.max-running": 1})
    host = first.extensions["agenthost"]
    running = host.tasks.admit("local", "normal", "hold", {})
    wait_until(lambda: running["taskId"] in kinds.started)
    queued = host.tasks.admit("local", "normal", "echo", {})
    host.tasks._loop.kill()  # as if the host died: no orderly end for these tasks
    host.tasks._loop = None
    host.tasks.pool.kill()
    again = Kinds()
    second = make_app(plugins=[again])
    queue = second.extensions["agenthost"].tasks
    assert queue.get(running["taskId"], "local")["state"] == "failed"
    assert queue.get(queued["taskId"], "local")["state"] == "failed"
    gevent.sleep(0.1)
    assert again.started == []


def test_task_endpoints_need_the_token(app):
    client = app.test_client()
    for path in ("/api/agent/tasks", "/api/agent/tasks/capacity", "/api/agent/tasks/x"):
        assert client.get(path).status_code == 401


def test_interactive_and_batch_runs_are_tasks_of_their_priority(make_app):
    app = make_app()
    client = app.test_client()
    plan = {"steps": [{"id": "x", "tool": "json_extract", "arguments": {"value": {"a": 1}, "path": "a"}}]}
    config = {"plan": plan, "planApproval": "auto"}
    run_id = client.post("/api/agent/run", json={"goal": "one", "config": config}, headers=HEADERS).json["runId"]
    run_ids = client.post("/api/agent/batch", json={"goals": ["a", "b"], "config": config},
                          headers=HEADERS).json["runIds"]
    queue = app.extensions["agenthost"].tasks
    assert queue.for_run(run_id)["priority"] == "interactive"
    assert {queue.for_run(r)["priority"] for r in run_ids} == {"batch"}


def test_a_batch_is_admitted_whole_or_not_at_all(make_app):
    app = make_app()
    host = app.extensions["agenthost"]
    host.tasks.stop()  # keep everything queued
    for _ in range(14):
        host.tasks.admit("local", "batch", "noop", {})
    plan = {"steps": [{"id": "x", "tool": "json_extract", "arguments": {"value": {"a": 1}, "path": "a"}}]}
    resp = app.test_client().post("/api/agent/batch", headers=HEADERS, json={
        "goals": ["a", "b", "c"], "config": {"plan": plan, "planApproval": "auto"}})
    assert resp.status_code == 429
    assert resp.json["capacityScope"] == "owner-priority" and resp.json["capacityPriority"] == "batch"
    assert host.tasks.capacity("local")["batch"]["queued"] == 14  # none of the three got in
    assert host.service("agent").runs() == []


def test_a_host_starting_on_a_shared_database_fails_only_its_own_unfinished_tasks(make_app, tmp_path,
                                                                                  fresh_datasource):
    """Two hosts (two data directories) on one PostgreSQL database: a restart sweeps its own tasks only."""
    datasource = fresh_datasource("postgresql")
    first_dir, second_dir = tmp_path / "one", tmp_path / "two"
    first_dir.mkdir()
    second_dir.mkdir()
    first = make_app(plugins=[Kinds()], data_dir=first_dir, datasource=datasource).extensions["agenthost"]
    first.tasks.stop()
    mine = first.tasks.admit("local", "normal", "echo", {})
    from sqlalchemy import update

    from core.tasks import Task
    with first.db.session() as s:  # as if the first host's dispatcher had started it
        s.execute(update(Task).where(Task.id == mine["taskId"])
                  .values(state="running", claimed_by=first.instance_id))
    make_app(plugins=[Kinds()], data_dir=second_dir, datasource=datasource)  # the other host starts
    assert first.tasks.get(mine["taskId"], "local")["state"] == "running"
    again = make_app(plugins=[Kinds()], data_dir=first_dir, datasource=datasource)  # the first restarts
    assert again.extensions["agenthost"].tasks.get(mine["taskId"], "local")["state"] == "failed"
