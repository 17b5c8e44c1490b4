"""The firing loop: runs are admitted on time, one-shot and expired schedules end, refused fires move on."""
import datetime as dt

import gevent
import pytest
from gevent.event import Event

from core.tasks import CapacityError
from hookspecs import hookimpl
from tests.conftest import HEADERS
from tests.schedules.support import (FAST, INPUTS, EchoTool, get, listed, schedule, schedule_tasks, wait_for,
                                     workflow)

# "On time": a fire comes after its nextFireAt, never before, and this soon after it.
LATE_TOLERANCE = dt.timedelta(seconds=0.75)


def parse(stamp):
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def run_status(client, run_id):
    return client.get(f"/api/agent/runs/{run_id}", headers=HEADERS).json["status"]


def test_interval_schedule_fires_on_time_and_runs_the_workflow(make_app):
    tools = EchoTool()
    client = make_app(plugins=[tools], config=FAST).test_client()
    row = schedule(client, workflow(client), intervalSeconds=1)
    created = parse(row["createdAt"])
    done = wait_for(lambda: (r := get(client, row["id"]))["fires"] >= 2 and r)
    tasks = schedule_tasks(client, row["id"])
    assert len(tasks) == done["fires"]
    for k, task in enumerate(tasks, start=1):
        due = created + dt.timedelta(seconds=k)
        queued = parse(task["queuedAt"])
        assert due - dt.timedelta(milliseconds=1) <= queued <= due + LATE_TOLERANCE, (k, due, queued)
        assert task["priority"] == "normal" and task["kind"] == "agent_run"
    last = tasks[-1] if tasks[-1]["taskId"] == done["lastTaskId"] else None
    assert last is not None and done["lastRunId"] == last["runId"]
    assert parse(done["lastFiredAt"]) >= created + dt.timedelta(seconds=done["fires"])
    assert done["missedFires"] == 0 and done["lastError"] is None and done["active"] is True
    wait_for(lambda: run_status(client, tasks[0]["runId"]) == "complete")
    assert INPUTS in tools.calls
    detail = client.get(f"/api/agent/runs/{tasks[0]['runId']}", headers=HEADERS).json
    assert detail["config"]["permissionMode"] == "auto" and detail["config"]["planApproval"] == "auto"
    assert client.delete(f"/api/agent/schedules/{row['id']}", headers=HEADERS).status_code == 200


def test_one_shot_interval_schedule_ends_after_its_fire(make_app):
    client = make_app(plugins=[EchoTool()], config=FAST).test_client()
    row = schedule(client, workflow(client), intervalSeconds=1, recurring=False)
    due = parse(row["nextFireAt"])
    done = wait_for(lambda: (r := get(client, row["id"]))["state"] != "active" and r)
    assert done["state"] == "completed" and done["active"] is False
    assert done["fires"] == 1 and done["nextFireAt"] is None and done["lastTaskId"] is not None
    assert due <= parse(done["lastFiredAt"]) <= due + LATE_TOLERANCE  # never before nextFireAt
    assert listed(client) == []
    assert [t["taskId"] for t in schedule_tasks(client, row["id"])] == [done["lastTaskId"]]


def test_fire_immediately_adds_a_first_fire(make_app):
    client = make_app(plugins=[EchoTool()], config=FAST).test_client()
    row = schedule(client, workflow(client), intervalSeconds=2, recurring=False, fireImmediately=True)
    created = parse(row["createdAt"])
    assert parse(row["nextFireAt"]) == created and row["fireImmediately"] is True
    first = wait_for(lambda: (r := get(client, row["id"]))["fires"] == 1 and r)
    assert parse(first["lastFiredAt"]) < created + dt.timedelta(seconds=1)
    # The regular fire still comes, at creation + interval, and ends the one-shot schedule.
    assert parse(first["nextFireAt"]) == created + dt.timedelta(seconds=2) and first["active"] is True
    done = wait_for(lambda: (r := get(client, row["id"]))["state"] == "completed" and r)
    assert done["fires"] == 2 and done["missedFires"] == 0
    assert len(schedule_tasks(client, row["id"])) == 2


def test_calendar_schedule_with_fire_immediately_keeps_its_calendar_timing(make_app):
    client = make_app(plugins=[EchoTool()], config=FAST).test_client()
    rule = {"frequency": "DAILY", "time": "03:00", "zoneId": "Australia/Lord_Howe"}
    row = schedule(client, workflow(client), calendar=rule, fireImmediately=True)
    done = wait_for(lambda: (r := get(client, row["id"]))["fires"] == 1 and r)
    from builtin_plugins.schedules.calendar import next_fire
    assert parse(done["nextFireAt"]) == next_fire(rule, parse(done["lastFiredAt"]))
    assert done["expiresAt"] is None and done["active"] is True and done["missedFires"] == 0


def test_interval_schedules_expire(make_app):
    client = make_app(plugins=[EchoTool()], config={**FAST, "schedules.expiry-seconds": 2.5}).test_client()
    row = schedule(client, workflow(client), intervalSeconds=1)
    assert parse(row["expiresAt"]) == parse(row["createdAt"]) + dt.timedelta(seconds=2.5)
    done = wait_for(lambda: (r := get(client, row["id"]))["state"] != "active" and r)
    assert done["state"] == "expired" and done["fires"] == 2 and done["nextFireAt"] is None
    assert len(schedule_tasks(client, row["id"])) == 2


def test_cancelled_schedules_never_fire(make_app):
    """Cancelled directly or with their workflow: past their due time nothing was admitted."""
    client = make_app(plugins=[EchoTool()], config=FAST).test_client()
    wf, other = workflow(client), workflow(client)
    cancelled = schedule(client, other, intervalSeconds=1)
    with_workflow = schedule(client, wf, intervalSeconds=1)
    assert client.delete(f"/api/agent/schedules/{cancelled['id']}", headers=HEADERS).status_code == 200
    assert client.delete(f"/api/workflows/{wf}", headers=HEADERS).json["cancelledSchedules"] == 1
    gevent.sleep(1.3)
    for row in (cancelled, with_workflow):
        assert get(client, row["id"])["fires"] == 0 and schedule_tasks(client, row["id"]) == []


def test_unpublished_workflow_at_fire_time_records_the_error_and_moves_on(make_app):
    client = make_app(plugins=[EchoTool()], config=FAST).test_client()
    wf = workflow(client)
    row = schedule(client, wf, intervalSeconds=1)
    client.post(f"/api/workflows/{wf}/publish", json={"published": False}, headers=HEADERS)
    refused = wait_for(lambda: (r := get(client, row["id"]))["lastFiredAt"] and r)
    assert "workflow_not_published" in refused["lastError"] and refused["fires"] == 0
    assert refused["active"] is True and parse(refused["nextFireAt"]) > parse(refused["lastFiredAt"])
    client.post(f"/api/workflows/{wf}/publish", json={"published": True}, headers=HEADERS)
    fired = wait_for(lambda: (r := get(client, row["id"]))["fires"] == 1 and r)
    assert fired["lastError"] is None and len(schedule_tasks(client, row["id"])) == 1


class HoldTasks:
    """A test plugin: a task kind whose bodies wait until released, to fill the queue."""

    __name__ = "hold_tasks"

    def __init__(self):
        self.release = Event()

    @hookimpl
    def startup(self, host):
        host.tasks.register_kind("hold", lambda task, ctx: self.release.wait(30) and None)


def test_full_queue_at_fire_time_records_429_and_moves_on(make_app):
    hold = HoldTasks()
    app = make_app(plugins=[EchoTool(), hold], config={**FAST, "tasks.max-running": 1})
    client, host = app.test_client(), app.extensions["agenthost"]
    wf = workflow(client)
    admitted = 0
    with pytest.raises(CapacityError):
        for _ in range(64):
            host.tasks.admit("local", "normal", "hold", {})
            admitted += 1
    assert admitted >= 24
    row = schedule(client, wf, intervalSeconds=2, fireImmediately=True)
    refused = wait_for(lambda: (r := get(client, row["id"]))["lastFiredAt"] and r)
    assert refused["lastError"].startswith("429 capacity_exceeded")
    assert refused["fires"] == 0 and refused["lastTaskId"] is None and refused["active"] is True
    assert parse(refused["nextFireAt"]) == parse(row["createdAt"]) + dt.timedelta(seconds=2)
    assert schedule_tasks(client, row["id"]) == []
    assert client.get("/api/agent/runs", headers=HEADERS).json == []  # the refused fire left no run behind
    hold.release.set()
    fired = wait_for(lambda: (r := get(client, row["id"]))["fires"] == 1 and r)
    assert fired["lastError"] is None and fired["lastTaskId"] == schedule_tasks(client, row["id"])[0]["taskId"]


def test_a_row_that_cannot_fire_ends_without_stopping_the_others(make_app):
    """Fault injection: a stored zone the tz database no longer knows (as after a tzdata change)."""
    from sqlalchemy import text
    app = make_app(plugins=[EchoTool()], config=FAST)
    client, host = app.test_client(), app.extensions["agenthost"]
    wf = workflow(client)
    broken = schedule(client, wf, calendar={"frequency": "DAILY", "time": "09:00", "zoneId": "UTC"})
    healthy = schedule(client, wf, intervalSeconds=1)
    with host.db.session() as s:
        s.execute(text("UPDATE schedules SET calendar = :rule, next_fire_at = created_at WHERE id = :id"),
                  {"rule": '{"frequency": "DAILY", "time": "09:00", "zoneId": "Gone/Zone"}', "id": broken["id"]})
    host.service("schedules").wake()
    ended = wait_for(lambda: (r := get(client, broken["id"]))["state"] != "active" and r)
    assert ended["state"] == "failed" and "could not fire" in ended["lastError"] and ended["fires"] == 0
    assert wait_for(lambda: get(client, healthy["id"])["fires"] >= 1)


def test_a_schedule_whose_workflow_vanished_is_cancelled_at_its_fire(make_app):
    """Fault injection: the workflow rows go without the delete hook (as when a create races a delete)."""
    from sqlalchemy import text
    app = make_app(plugins=[EchoTool()], config=FAST)
    client, host = app.test_client(), app.extensions["agenthost"]
    wf = workflow(client)
    row = schedule(client, wf, intervalSeconds=1)
    with host.db.session() as s:
        s.execute(text("DELETE FROM workflow_revisions WHERE workflow_id = :id"), {"id": wf})
        s.execute(text("DELETE FROM workflows WHERE id = :id"), {"id": wf})
    ended = wait_for(lambda: (r := get(client, row["id"]))["state"] != "active" and r)
    assert ended["state"] == "cancelled" and ended["lastError"].startswith("404")
    assert ended["fires"] == 0 and schedule_tasks(client, row["id"]) == []


def test_an_idle_loop_sleeps_until_woken_or_due(make_app):
    """With nothing due (and no rescan) the loop sends the database nothing; a change wakes it."""
    from sqlalchemy import event
    app = make_app(plugins=[EchoTool()], config={"schedules.rescan-seconds": 0})
    client, host = app.test_client(), app.extensions["agenthost"]
    wf = workflow(client)
    schedule(client, wf, intervalSeconds=3600)
    gevent.sleep(0.1)  # the woken loop looks once, then sleeps for an hour
    seen = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if "schedules" in statement:
            seen.append(statement)

    event.listen(host.db.engine, "before_cursor_execute", record)
    try:
        gevent.sleep(0.5)
        assert seen == []
        host.service("schedules").wake()
        wait_for(lambda: seen)
    finally:
        event.remove(host.db.engine, "before_cursor_execute", record)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_stopping_the_loop_lets_its_database_call_finish_and_ends_it_quietly(make_app, backend, caplog):
    """A stop never lands inside a statement or a pool checkout (where PostgreSQL's pre-ping
    turned the kill into a driver error that the loop's retry logged and survived)."""
    from sqlalchemy import event
    app = make_app(plugins=[EchoTool()], backend=backend, config={"schedules.rescan-seconds": 0})
    client, host = app.test_client(), app.extensions["agenthost"]
    schedule(client, workflow(client), intervalSeconds=3600)
    service = host.service("schedules")
    gevent.sleep(0.1)
    begun, ended = [], []

    def slow(conn, cursor, statement, parameters, context, executemany):
        if "schedules" in statement:
            begun.append(statement)
            gevent.sleep(0.3)

    def done(conn, cursor, statement, parameters, context, executemany):
        if "schedules" in statement:
            ended.append(statement)

    event.listen(host.db.engine, "before_cursor_execute", slow)
    event.listen(host.db.engine, "after_cursor_execute", done)
    try:
        loop = service._loop
        service.wake()
        wait_for(lambda: begun)
        service.stop()
        assert loop.dead and loop.successful()
        assert len(ended) == len(begun) >= 1  # the statement in flight was not cut off
        assert host.db.engine.pool.checkedout() == 0
    finally:
        event.remove(host.db.engine, "before_cursor_execute", slow)
        event.remove(host.db.engine, "after_cursor_execute", done)
    assert "schedule loop error" not in caplog.text
