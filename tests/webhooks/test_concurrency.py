"""Concurrent deliveries over real sockets on every backend: one event id admits exactly one task."""
import collections

import gevent
import requests
from gevent.event import Event

from .support import HookTools, create_trigger, delivery_rows, published_workflow, webhook_tasks

CLIENTS = 50


def post_all(url, headers_for):
    """POST from CLIENTS greenlets at once (each its own connection); returns the responses."""
    start = Event()

    def one(i):
        start.wait()
        return requests.post(url, json={"order": f"A-{i}"}, headers=headers_for(i), timeout=30)

    greenlets = [gevent.spawn(one, i) for i in range(CLIENTS)]
    gevent.sleep(0)
    start.set()
    gevent.joinall(greenlets, timeout=60, raise_error=True)
    return [g.value for g in greenlets]


def test_50_concurrent_duplicates_admit_exactly_one_task(make_app, live_server, backend):
    app = make_app(plugins=[HookTools()], backend=backend)
    host = app.extensions["agenthost"]
    client = app.test_client()
    trigger = create_trigger(client, published_workflow(client))
    base = live_server(app)

    answers = post_all(base + trigger["hookPath"], lambda i: {"X-Service-Webhook-Secret": trigger["secret"],
                                                             "X-Service-Event-Id": "one-event"})
    codes = collections.Counter(r.status_code for r in answers)
    assert codes == {202: 1, 200: CLIENTS - 1}, [r.text for r in answers if r.status_code not in (200, 202)]
    assert len({r.json()["taskId"] for r in answers}) == 1
    assert len({r.json()["deliveryId"] for r in answers}) == 1
    assert len(webhook_tasks(host, trigger["triggerId"])) == 1
    assert len(delivery_rows(host, trigger["triggerId"])) == 1


def test_50_concurrent_new_events_keep_every_claim_paired_with_a_task(make_app, live_server):
    """Some get 429 (the owner's share is 24 queued); none of those leaves a claim behind."""
    app = make_app(plugins=[HookTools()])
    host = app.extensions["agenthost"]
    host.tasks.stop()  # nothing drains the queue while the flood arrives
    client = app.test_client()
    trigger = create_trigger(client, published_workflow(client))
    base = live_server(app)

    answers = post_all(base + trigger["hookPath"], lambda i: {"X-Service-Webhook-Secret": trigger["secret"],
                                                             "X-Service-Event-Id": f"event-{i}"})
    codes = collections.Counter(r.status_code for r in answers)
    assert codes == {202: 24, 429: CLIENTS - 24}
    assert all(r.headers["Retry-After"] == "1" for r in answers if r.status_code == 429)
    admitted = {r.json()["taskId"] for r in answers if r.status_code == 202}
    assert set(webhook_tasks(host, trigger["triggerId"])) == admitted
    assert {d.task_id for d in delivery_rows(host, trigger["triggerId"])} == admitted
