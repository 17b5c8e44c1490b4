"""A full background queue answers 429 with Retry-After: 1 and releases the event-id claim, so a retry is admitted."""
import pytest

from tests.conftest import HEADERS
from tests.core.problems import assert_problem

from .support import HookTools, create_trigger, deliver, delivery_rows, published_workflow, webhook_tasks


@pytest.fixture
def app(make_app):
    app = make_app(plugins=[HookTools()])
    app.extensions["agenthost"].tasks.stop()  # nothing starts: what is admitted stays queued
    return app


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def host(app):
    return app.extensions["agenthost"]


def runs_of(client, workflow_id):
    return [r for r in client.get("/api/agent/runs", headers=HEADERS).json if r["workflowId"] == workflow_id]


def test_a_full_queue_refuses_with_429_and_the_retry_of_the_same_event_is_admitted(client, host):
    trigger = create_trigger(client, published_workflow(client))
    # The owner's share of non-interactive queued tasks is 24.
    fillers = [host.tasks.admit("local", "normal", "filler", {})["taskId"] for _ in range(24)]

    refused = deliver(client, trigger, event_id="order-42")
    problem = assert_problem(refused, 429, "capacity_exceeded")
    assert refused.headers["Retry-After"] == "1"
    assert problem["capacityScope"] == "owner-priority" and problem["capacityPriority"] == "normal"
    # The claim went with the rolled-back transaction: no row, no task, no run.
    assert delivery_rows(host, trigger["triggerId"]) == []
    assert webhook_tasks(host, trigger["triggerId"]) == []
    assert runs_of(client, trigger["workflowId"]) == []
    # Still full: the same answer again (also without an event id).
    assert deliver(client, trigger, event_id="order-42").status_code == 429
    assert deliver(client, trigger).status_code == 429

    host.tasks.cancel(fillers[0], "local")  # one place frees up
    retried = deliver(client, trigger, event_id="order-42")
    assert retried.status_code == 202, retried.get_data(as_text=True)
    again = deliver(client, trigger, event_id="order-42")
    assert again.status_code == 200 and again.json["taskId"] == retried.json["taskId"]
    assert webhook_tasks(host, trigger["triggerId"]) == [retried.json["taskId"]]
    assert [r["runId"] for r in runs_of(client, trigger["workflowId"])] == [retried.json["runId"]]
    # And the queue is full once more.
    assert deliver(client, trigger, event_id="order-43").status_code == 429


def test_a_duplicate_is_answered_even_while_the_queue_is_full(client, host):
    trigger = create_trigger(client, published_workflow(client))
    first = deliver(client, trigger, event_id="early")
    assert first.status_code == 202
    for _ in range(23):
        host.tasks.admit("local", "normal", "filler", {})
    assert deliver(client, trigger, event_id="late").status_code == 429
    again = deliver(client, trigger, event_id="early")
    assert again.status_code == 200 and again.json["taskId"] == first.json["taskId"]


def test_the_global_queue_limit_shows_its_scope(client, host):
    trigger = create_trigger(client, published_workflow(client))
    for owner in ("a", "b", "c", "d"):  # 4 x 32 = the global limit of 128 queued tasks
        for _ in range(32):
            host.tasks.admit(owner, "interactive", "filler", {})
    refused = deliver(client, trigger, event_id="e")
    problem = assert_problem(refused, 429, "capacity_exceeded")
    assert problem["capacityScope"] == "global" and refused.headers["Retry-After"] == "1"
    assert delivery_rows(host, trigger["triggerId"]) == []
