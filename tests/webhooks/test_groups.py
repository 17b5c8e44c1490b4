"""Deliveries ready at the same moment are admitted in one transaction, and each keeps its own answer."""
import collections

import gevent
import pytest
from tests.conftest import HEADERS
from tests.core.problems import assert_problem
from tests.transactions import committed_transactions, counts

from .support import HookTools, create_trigger, deliver, delivery_rows, published_workflow, webhook_tasks


@pytest.fixture
def setup(make_app, backend):
    app = make_app(plugins=[HookTools()], backend=backend)
    host = app.extensions["agenthost"]
    host.tasks.stop()  # what is admitted stays queued: the test reads it back as admitted
    client = app.test_client()
    return app, host, client, create_trigger(client, published_workflow(client))


def at_once(app, trigger, bodies, event_ids):
    """Deliver from one greenlet each, all in the same turn of the event loop; returns the responses."""
    def one(body, event_id):
        return deliver(app.test_client(), trigger, body, event_id=event_id)

    greenlets = [gevent.spawn(one, body, event_id) for body, event_id in zip(bodies, event_ids)]
    gevent.joinall(greenlets, timeout=60, raise_error=True)
    return [g.value for g in greenlets]


def admitting_transactions(host, action):
    """``action()``'s result, and the number of delivery rows each committed transaction wrote."""
    with committed_transactions(host.db.engine) as transactions:
        result = action()
    return result, counts(transactions, "INSERT INTO WEBHOOK_DELIVERIES")


def test_deliveries_ready_together_commit_together_and_each_gets_its_own_run(setup):
    app, host, client, trigger = setup
    ids = [f"order-{i}" for i in range(8)]
    answers, groups = admitting_transactions(
        host, lambda: at_once(app, trigger, [{"order": i} for i in ids], ids))
    assert [r.status_code for r in answers] == [202] * 8
    assert sum(groups) == 8 and max(groups) > 1, groups  # fewer commits than deliveries
    tasks = [r.json["taskId"] for r in answers]
    assert len(set(tasks)) == 8 and len({r.json["runId"] for r in answers}) == 8
    assert sorted(webhook_tasks(host, trigger["triggerId"])) == sorted(tasks)
    rows = delivery_rows(host, trigger["triggerId"])
    assert sorted(r.task_id for r in rows) == sorted(tasks)
    # Each run holds its own delivery's inputs.
    for order, answer in zip(ids, answers):
        run = client.get(f"/api/agent/runs/{answer.json['runId']}", headers=HEADERS).json
        assert run["inputs"]["order"] == order


def test_a_bad_delivery_in_a_group_fails_alone_and_leaves_nothing(setup):
    app, host, client, trigger = setup
    bodies = [{"order": "A-1"}, {"order": "A-2", "qty": "many"}, {"order": "A-3"}, {"order": "A-4"}]
    answers = at_once(app, trigger, bodies, ["e1", "e2", "e3", "e4"])
    assert [r.status_code for r in answers] == [202, 400, 202, 202]
    assert_problem(answers[1], 400)
    admitted = {r.json["taskId"] for r in answers if r.status_code == 202}
    assert set(webhook_tasks(host, trigger["triggerId"])) == admitted
    assert len(delivery_rows(host, trigger["triggerId"])) == 3
    # The refused event id was never claimed: sent again correctly, it is admitted.
    assert deliver(client, trigger, {"order": "A-2"}, event_id="e2").status_code == 202


def test_a_repeated_event_id_within_one_group_admits_one_task(setup):
    app, host, client, trigger = setup
    answers = at_once(app, trigger, [{"order": "A"}] * 6, ["same", "other", "same", "same", "third", "same"])
    codes = collections.Counter(r.status_code for r in answers)
    assert codes == {202: 3, 200: 3}
    same = {r.json["taskId"] for r, e in zip(answers, ["same", "other", "same", "same", "third", "same"])
            if e == "same"}
    assert len(same) == 1
    assert len(webhook_tasks(host, trigger["triggerId"])) == 3
    assert len(delivery_rows(host, trigger["triggerId"])) == 3


def test_a_repeat_this_host_did_not_admit_is_still_answered_while_the_queue_is_full(make_app):
    config = {"webhooks.admission-wait-ms": 100}
    here = make_app(plugins=[HookTools()], config=config)
    there = make_app(plugins=[HookTools()], config=config)  # the same database
    for app in (here, there):
        app.extensions["agenthost"].tasks.stop()
    client = here.test_client()
    trigger = create_trigger(client, published_workflow(client))
    first = deliver(there.test_client(), trigger, event_id="early")  # admitted by the other host
    assert first.status_code == 202
    host = here.extensions["agenthost"]
    for _ in range(23):
        host.tasks.admit("local", "normal", "filler", {})
    assert deliver(client, trigger, event_id="late").status_code == 429  # full, and known to be
    again = deliver(client, trigger, event_id="early")
    assert again.status_code == 200 and again.json["taskId"] == first.json["taskId"]
