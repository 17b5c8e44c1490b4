"""How a background run is written: its task's claim, its plan, step rows and first step
starts commit together; its end, notification and task end commit together, and a
failure of either joined transaction still runs and ends it."""
import gevent
import pytest
from sqlalchemy import event

from tests.agent.run_end_support import finished_task, start_plan
from tests.agent.support import Tools, wait_for
from tests.conftest import HEADERS
from tests.transactions import committed_transactions

PLAN = {"steps": [{"id": "pick", "tool": "json_extract", "arguments": {"value": {"a": 5}, "path": "a"}}]}


@pytest.fixture
def host_and_client(make_app):
    app = make_app(plugins=[Tools()])
    client = app.test_client()
    client.environ_base["HTTP_X_SERVICE_TOKEN"] = HEADERS["X-Service-Token"]
    return app.extensions["agenthost"], client


def start(client):
    return start_plan(client, PLAN)


def notes_for(client, run_id):
    return [n for n in client.get("/api/notifications?limit=100").json if n["link"] == f"agent/runs/{run_id}"]


def committed(host, action):
    """``action()``'s result and the statements of each transaction committed meanwhile (first three words)."""
    with committed_transactions(host.db.engine) as transactions:
        return action(), transactions


def dispatch_by_hand(host, places=1):
    """What the (stopped) dispatcher would do once: claim tasks and run their bodies."""
    from core.tasks import TaskContext

    for task, row, started in host.tasks._claim(places):
        gevent.spawn(host.tasks.execute, TaskContext(task, host.tasks, row, started))


def run_to_end(host, client, plan=PLAN):
    run_id = start_plan(client, plan)
    task = finished_task(host, client, run_id)
    return run_id, task


def test_the_plan_step_rows_and_first_step_starts_are_one_transaction(host_and_client):
    host, client = host_and_client
    plan = {"steps": [{"id": "a", "tool": "echo"}, {"id": "b", "tool": "echo"},
                      {"id": "c", "tool": "echo", "dependsOn": ["a", "b"]}]}
    (run_id, task), transactions = committed(host, lambda: run_to_end(host, client, plan))
    assert task["state"] == "succeeded"
    planned = [t for t in transactions if "INSERT INTO AGENT_STEPS" in t]
    assert len(planned) == 1
    assert "UPDATE TASKS SET" in planned[0]  # the task's claim: the embedded executor starts the run there
    # A run that never wrote an event has no step rows to look for: they are inserted with the
    # two roots already running, beside the run's status and the plan's and the starts' events.
    assert "UPDATE AGENT_RUNS SET" in planned[0] and "UPDATE AGENT_STEPS SET" not in planned[0]
    assert not [s for s in planned[0] if s.startswith("SELECT AGENT_STEPS")]
    detail = client.get(f"/api/agent/runs/{run_id}").json
    types = [(e["type"], e["data"].get("id")) for e in detail["events"] if e["type"] != "plan_token"]
    assert types == [("plan_ready", None), ("step_start", "a"), ("step_start", "b"), ("step_complete", "a"),
                     ("step_complete", "b"), ("step_start", "c"), ("step_complete", "c"), ("complete", None)]
    assert [e["seq"] for e in detail["events"]] == list(range(1, len(detail["events"]) + 1))
    assert [(s["id"], s["status"], s["attempts"]) for s in detail["steps"]] == [
        ("a", "complete", 1), ("b", "complete", 1), ("c", "complete", 1)]
    starts = [e["data"] for e in detail["events"] if e["type"] == "step_start"]
    assert [s["invocationId"] for s in starts] == [s["invocationId"] for s in detail["steps"]]
    # The roots' results commit on their own; the last step's joins the run's end.
    ending = [t for t in transactions if "INSERT INTO NOTIFICATIONS" in t]
    assert len(ending) == 1 and ending[0].count("UPDATE AGENT_STEPS SET") == 1
    # The start of c on its own, 3 results (the roots' starts were inserted with the plan)
    assert sum(t.count("UPDATE AGENT_STEPS SET") for t in transactions) == 1 + 3


@pytest.mark.parametrize("first", [
    {"id": "a", "tool": "echo", "approval": True},  # a gate: its events come first
    {"id": "a", "tool": "echo", "runWhen": {"ref": "inputs.go", "op": "truthy"}},  # skipped: step_skipped first
], ids=["approval", "skipped"])
def test_first_steps_that_gate_or_skip_start_on_their_own(host_and_client, first):
    host, client = host_and_client
    plan = {"steps": [first, {"id": "b", "tool": "echo"}]}

    def run():
        resp = client.post("/api/agent/run", json={"goal": "g", "config": {
            "plan": plan, "planApproval": "auto", "permissionMode": "auto"}})
        assert resp.status_code == 201, resp.json
        finished_task(host, client, resp.json["runId"])
        return resp.json["runId"]

    run_id, transactions = committed(host, run)
    planned = [t for t in transactions if "INSERT INTO AGENT_STEPS" in t]
    assert len(planned) == 1 and "UPDATE AGENT_STEPS SET" not in planned[0]
    detail = client.get(f"/api/agent/runs/{run_id}").json
    assert detail["status"] == "complete"
    types = [e["type"] for e in detail["events"]]
    assert ("step_approval_requested" in types) == ("approval" in first)
    assert ("step_skipped" in types) == ("runWhen" in first)
    assert types.count("step_start") == (2 if "approval" in first else 1)


def test_the_run_end_its_notification_and_its_task_end_are_one_transaction(host_and_client):
    host, client = host_and_client
    (run_id, task), transactions = committed(host, lambda: run_to_end(host, client))
    assert task["state"] == "succeeded" and task["output"] == {"runId": run_id, "status": "complete"}
    ending = [t for t in transactions if "INSERT INTO NOTIFICATIONS" in t]
    assert len(ending) == 1
    assert "UPDATE AGENT_RUNS SET" in ending[0] and "UPDATE TASKS SET" in ending[0]
    # Nothing else wrote the task's end: the claim and the end are its only updates.
    assert sum(t.count("UPDATE TASKS SET") for t in transactions) == 2
    assert len(notes_for(client, run_id)) == 1


def test_the_ended_task_view_is_what_a_fresh_read_returns(host_and_client):
    host, client = host_and_client
    published = []
    host.tasks.finished_listeners.append(published.append)
    run_id = start(client)
    task = finished_task(host, client, run_id)
    wait_for(lambda: published)
    assert len(published) == 1
    assert {k: published[0][k] for k in task} == task  # the API shows a subset of the view


def test_a_failed_joined_end_still_ends_the_run_the_task_and_notifies_once(host_and_client, caplog):
    host, client = host_and_client
    failures = []

    def refuse_first_notification(conn, cursor, sql, parameters, context, executemany):
        if sql.lstrip().upper().startswith("INSERT INTO NOTIFICATIONS") and not failures:
            failures.append(sql)
            raise RuntimeError("the disk hiccuped")

    event.listen(host.db.engine, "before_cursor_execute", refuse_first_notification)
    try:
        run_id = start(client)
        task = finished_task(host, client, run_id)
    finally:
        event.remove(host.db.engine, "before_cursor_execute", refuse_first_notification)
    assert failures, "the joined end transaction never ran"
    assert task["state"] == "succeeded" and task["output"] == {"runId": run_id, "status": "complete"}
    assert client.get(f"/api/agent/runs/{run_id}").json["status"] == "complete"
    notes = notes_for(client, run_id)
    assert [(n["level"], n["title"]) for n in notes] == [("success", "Run complete")]
    assert "recording the end alone" in caplog.text


def test_a_shutdown_during_the_run_end_keeps_the_last_steps_result(host_and_client):
    """The host stopping (GreenletExit) while the run's end is written: the run stays active
    for recovery, but the last step's result, which would have joined that end, is kept."""
    host, client = host_and_client
    killed = []

    def stop_here(conn, cursor, sql, parameters, context, executemany):
        if sql.lstrip().upper().startswith("INSERT INTO NOTIFICATIONS") and not killed:
            killed.append(sql)
            raise gevent.GreenletExit()

    event.listen(host.db.engine, "before_cursor_execute", stop_here)
    try:
        run_id = start(client)
        wait_for(lambda: killed)
        gevent.sleep(0.2)
    finally:
        event.remove(host.db.engine, "before_cursor_execute", stop_here)
    detail = client.get(f"/api/agent/runs/{run_id}").json
    assert detail["status"] == "running"  # not ended: the next start marks it recovery-required
    assert [(s["id"], s["status"], s["result"]) for s in detail["steps"]] == [("pick", "complete", 5)]
    assert [e["type"] for e in detail["events"] if e["type"] != "plan_token"] == [
        "plan_ready", "step_start", "step_complete"]


def test_a_failed_claim_commit_leaves_the_task_queued_and_the_run_unstarted(host_and_client):
    """The claim and the run's start are one transaction: neither survives without the other."""
    host, client = host_and_client
    failures = []

    def fail_first_start(conn):
        if not failures:
            failures.append(1)
            raise RuntimeError("injected: the claim's commit fails")

    def statement(conn, cursor, sql, parameters, context, executemany):
        if sql.startswith("INSERT INTO agent_steps") and not failures:
            event.listen(conn, "commit", fail_first_start)  # this transaction's commit

    event.listen(host.db.engine, "before_cursor_execute", statement)
    try:
        host.tasks.stop()  # claim by hand, below
        run_id = start(client)
        task_id = host.tasks.for_run(run_id)["taskId"]
        with pytest.raises(RuntimeError):
            host.tasks._claim(1)
    finally:
        event.remove(host.db.engine, "before_cursor_execute", statement)
    assert host.tasks.for_run(run_id)["state"] == "queued"
    detail = client.get(f"/api/agent/runs/{run_id}").json
    assert detail["status"] == "queued" and detail["events"] == [] and detail["steps"] == []
    dispatch_by_hand(host)  # claimed again, and this time it runs
    task = finished_task(host, client, run_id)
    assert task["taskId"] == task_id and task["state"] == "succeeded"
    detail = client.get(f"/api/agent/runs/{run_id}").json
    assert detail["status"] == "complete"
    assert [e["seq"] for e in detail["events"]] == list(range(1, len(detail["events"]) + 1))


def test_a_start_that_fails_in_the_claim_is_claimed_again_without_it(host_and_client, caplog):
    host, client = host_and_client
    agent = host.service("agent")
    calls = []
    real = agent.engine.start_in

    def broken(conn, run_id, after):
        calls.append(run_id)
        real(conn, run_id, after)  # writes the start, then fails: all of it must roll back
        raise RuntimeError("injected start failure")

    agent.engine.start_in = broken
    try:
        run_id, task = run_to_end(host, client)
    finally:
        agent.engine.start_in = real
    assert calls == [run_id]
    assert task["state"] == "succeeded"
    assert "its start failed" in caplog.text
    detail = client.get(f"/api/agent/runs/{run_id}").json
    assert detail["status"] == "complete"
    types = [e["type"] for e in detail["events"] if e["type"] != "plan_token"]
    assert types == ["plan_ready", "step_start", "step_complete", "complete"]  # written once, by the body
    assert [e["seq"] for e in detail["events"]] == list(range(1, len(detail["events"]) + 1))


def test_the_start_written_at_the_claim_reaches_a_live_subscriber_once_and_in_order(host_and_client):
    from builtin_plugins.agent.store import channel

    host, client = host_and_client
    host.tasks.stop()  # the run waits in the queue until the subscriber is listening
    run_id = start(client)
    subscription = host.events.subscribe(channel(run_id))
    try:
        dispatch_by_hand(host)
        live = []
        while not live or live[-1][0] != "complete":
            live.append(subscription.get(timeout=10))
    finally:
        subscription.close()
    stored = client.get(f"/api/agent/runs/{run_id}").json["events"]
    assert [(event, seq) for event, _, seq in live] == [(e["type"], e["seq"]) for e in stored]
    assert [event for event, _, _ in live if event != "plan_token"][:2] == ["plan_ready", "step_start"]


def test_runs_that_end_together_write_their_ends_in_one_transaction(host_and_client):
    host, client = host_and_client
    host.tasks.stop()  # queue them all, then start them in one claim
    run_ids = [start(client) for _ in range(6)]

    def run_all():
        dispatch_by_hand(host, places=6)
        return [finished_task(host, client, run_id) for run_id in run_ids]

    tasks, transactions = committed(host, run_all)
    assert [t["state"] for t in tasks] == ["succeeded"] * 6
    ends = [t.count("INSERT INTO NOTIFICATIONS") for t in transactions if "INSERT INTO NOTIFICATIONS" in t]
    assert sum(ends) == 6 and max(ends) > 1, ends  # fewer commits than runs
    for run_id in run_ids:
        detail = client.get(f"/api/agent/runs/{run_id}").json
        assert detail["status"] == "complete"
        assert [e["seq"] for e in detail["events"]] == list(range(1, len(detail["events"]) + 1))
        assert detail["events"][-1]["type"] == "complete"
        assert len(notes_for(client, run_id)) == 1


def test_a_run_end_that_fails_in_a_group_is_written_alone_and_the_others_are_kept(host_and_client, caplog):
    host, client = host_and_client
    host.tasks.stop()
    run_ids = [start(client) for _ in range(4)]
    doomed = run_ids[2]
    failures = []

    def statement(conn, cursor, sql, parameters, context, executemany):
        # The first time the doomed run's end is written (in a group), it fails.
        if (sql.startswith("UPDATE agent_runs SET status") and not failures
                and doomed in str(parameters) and "complete" in str(parameters)):
            failures.append(1)
            raise RuntimeError("injected: one run's end fails")

    event.listen(host.db.engine, "before_cursor_execute", statement)
    try:
        dispatch_by_hand(host, places=4)
        tasks = [finished_task(host, client, run_id) for run_id in run_ids]
    finally:
        event.remove(host.db.engine, "before_cursor_execute", statement)
    assert failures == [1]
    assert [t["state"] for t in tasks] == ["succeeded"] * 4
    for run_id in run_ids:
        detail = client.get(f"/api/agent/runs/{run_id}").json
        assert detail["status"] == "complete"
        types = [e["type"] for e in detail["events"] if e["type"] != "plan_token"]
        assert types == ["plan_ready", "step_start", "step_complete", "complete"]
        assert [e["seq"] for e in detail["events"]] == list(range(1, len(detail["events"]) + 1))
        assert len(notes_for(client, run_id)) == 1
