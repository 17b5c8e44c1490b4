"""A delivery that meets a full queue waits briefly for a place (first come, first served) before its 429."""
import gevent
import pytest
from gevent.event import Event

from tests.core.problems import assert_problem
from tests.conftest import HEADERS

from .support import HookTools, create_trigger, deliver, delivery_rows, published_workflow, webhook_tasks
from hookspecs import hookimpl


class HeldTasks:
    """Test plugin: a task kind ``hold`` whose bodies run until the test releases them one by one."""

    __name__ = "held_tasks"

    def __init__(self):
        self.release = []  # one Event per started body, in start order

    @hookimpl
    def startup(self, host):
        def hold(task, ctx):
            gate = Event()
            self.release.append(gate)
            gate.wait(30)
            return None
        host.tasks.register_kind("hold", hold)


def fill_owner_share(host):
    """The owner's 24 places for non-interactive queued tasks, all taken."""
    return [host.tasks.admit("local", "normal", "hold", {})["taskId"] for _ in range(24)]


@pytest.fixture
def held():
    return HeldTasks()


def make(make_app, held, **config):
    # One task body at a time, so a queued place frees only when the test releases a body.
    app = make_app(plugins=[HookTools(), held], config={"tasks.max-running": 1, **config})
    return app, app.extensions["agenthost"], app.test_client()


def wait_for(predicate, timeout=10):
    with gevent.Timeout(timeout):
        while not predicate():
            gevent.sleep(0.005)


def test_a_place_that_frees_during_the_wait_admits_the_delivery(make_app, held):
    app, host, client = make(make_app, held, **{"webhooks.admission-wait-ms": 5000})
    trigger = create_trigger(client, published_workflow(client))
    host.tasks.admit("local", "normal", "hold", {})  # the one running body
    wait_for(lambda: len(held.release) == 1)
    fill_owner_share(host)

    # The running body ends; the dispatcher starts the next queued task, which frees a place.
    gevent.spawn_later(0.1, held.release[0].set)
    answer = deliver(client, trigger, event_id="waited")
    assert answer.status_code == 202, answer.get_data(as_text=True)
    assert webhook_tasks(host, trigger["triggerId"]) == [answer.json["taskId"]]


def test_a_cancelled_queued_task_frees_a_place_for_a_waiting_delivery(make_app, held):
    app, host, client = make(make_app, held, **{"webhooks.admission-wait-ms": 5000})
    host.tasks.stop()  # nothing starts: only the cancel frees a place
    trigger = create_trigger(client, published_workflow(client))
    fillers = fill_owner_share(host)

    gevent.spawn_later(0.1, host.tasks.cancel, fillers[0], "local")
    answer = deliver(client, trigger, event_id="after-cancel")
    assert answer.status_code == 202, answer.get_data(as_text=True)


def test_without_a_freed_place_the_wait_ends_in_429_and_leaves_no_claim(make_app, held):
    app, host, client = make(make_app, held, **{"webhooks.admission-wait-ms": 100})
    host.tasks.stop()
    trigger = create_trigger(client, published_workflow(client))
    fill_owner_share(host)

    refused = deliver(client, trigger, event_id="never")
    problem = assert_problem(refused, 429, "capacity_exceeded")
    assert refused.headers["Retry-After"] == "1"
    assert problem["capacityScope"] == "owner-priority"
    assert delivery_rows(host, trigger["triggerId"]) == []
    assert webhook_tasks(host, trigger["triggerId"]) == []


def test_waiting_deliveries_are_admitted_in_arrival_order_one_per_freed_place(make_app, held, live_server):
    app, host, client = make(make_app, held, **{"webhooks.admission-wait-ms": 5000})
    host.tasks.stop()
    trigger = create_trigger(client, published_workflow(client))
    fillers = fill_owner_share(host)
    service = host.service("webhooks")
    answers = {}

    def send(name):
        answers[name] = deliver(app.test_client(), trigger, event_id=name)

    first = gevent.spawn(send, "first")
    wait_for(lambda: len(service._waiters) == 1)
    second = gevent.spawn(send, "second")
    wait_for(lambda: len(service._waiters) == 2)

    host.tasks.cancel(fillers[0], "local")  # one place: the first to wait gets it
    first.join(10)
    assert answers["first"].status_code == 202
    assert not second.ready() and len(service._waiters) == 1

    host.tasks.cancel(fillers[1], "local")
    second.join(10)
    assert answers["second"].status_code == 202
    assert len(webhook_tasks(host, trigger["triggerId"])) == 2


def test_a_delivery_over_the_waiting_limit_is_refused_at_once(make_app, held):
    app, host, client = make(make_app, held, **{"webhooks.admission-wait-ms": 5000,
                                                "webhooks.max-waiting-deliveries": 0})
    host.tasks.stop()
    trigger = create_trigger(client, published_workflow(client))
    fill_owner_share(host)

    # A place frees 0.2 s in: a delivery that waited (up to 5 s) would be admitted with it.
    later = gevent.spawn_later(0.2, host.tasks.cancel, host.tasks.list("local")[0]["taskId"], "local")
    refused = deliver(client, trigger, event_id="no-room")
    assert_problem(refused, 429, "capacity_exceeded")
    later.join(5)
    assert delivery_rows(host, trigger["triggerId"]) == []
    assert deliver(client, trigger, event_id="no-room").status_code == 202  # the freed place, on retry


def test_a_duplicate_is_answered_at_once_while_deliveries_wait(make_app, held):
    app, host, client = make(make_app, held, **{"webhooks.admission-wait-ms": 5000})
    host.tasks.stop()
    trigger = create_trigger(client, published_workflow(client))
    first = deliver(client, trigger, event_id="early")
    assert first.status_code == 202
    fillers = [host.tasks.admit("local", "normal", "hold", {})["taskId"] for _ in range(23)]
    service = host.service("webhooks")
    waiting = gevent.spawn(deliver, app.test_client(), trigger, event_id="late")
    wait_for(lambda: len(service._waiters) == 1)

    again = deliver(client, trigger, event_id="early")
    assert again.status_code == 200 and again.json["taskId"] == first.json["taskId"]
    # The waiting delivery holds no claim while it waits: only the first event's row exists.
    assert [d.task_id for d in delivery_rows(host, trigger["triggerId"])] == [first.json["taskId"]]
    host.tasks.cancel(fillers[0], "local")
    assert waiting.get(timeout=10).status_code == 202


def test_the_capacity_endpoint_still_reports_the_full_queue_while_deliveries_wait(make_app, held):
    app, host, client = make(make_app, held, **{"webhooks.admission-wait-ms": 5000})
    host.tasks.stop()
    trigger = create_trigger(client, published_workflow(client))
    fillers = fill_owner_share(host)
    service = host.service("webhooks")
    waiting = gevent.spawn(deliver, app.test_client(), trigger, event_id="w")
    wait_for(lambda: len(service._waiters) == 1)

    capacity = client.get("/api/agent/tasks/capacity", headers=HEADERS).json
    assert capacity["owner"]["remaining"]["nonInteractive"] == 0
    host.tasks.cancel(fillers[0], "local")
    assert waiting.get(timeout=10).status_code == 202
