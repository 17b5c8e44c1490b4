"""Deleting a workflow disables its webhook triggers in the deleting transaction and reports how many."""
from sqlalchemy import select

from builtin_plugins.webhooks.models import WebhookTrigger
from hookspecs import hookimpl
from tests.conftest import HEADERS
from tests.core.problems import assert_problem

from .support import TRIGGERS, HookTools, create_trigger, deliver, deliveries, listed, published_workflow


class FailsAfterWebhooks:
    """Runs after the webhooks plugin in the same delete, looks at its work, then fails."""

    __name__ = "fails_after_webhooks"

    def __init__(self):
        self.seen_active = None

    @hookimpl(trylast=True)
    def workflow_deleting(self, host, workflow_id, session):
        self.seen_active = session.execute(select(WebhookTrigger.active)
                                           .where(WebhookTrigger.workflow_id == workflow_id)).scalars().all()
        raise RuntimeError("this plugin cannot let go")


def test_deleting_a_workflow_disables_its_triggers_and_counts_them(make_app):
    client = make_app(plugins=[HookTools()]).test_client()
    doomed, kept = published_workflow(client), published_workflow(client, name="Kept")
    one, two = create_trigger(client, doomed), create_trigger(client, doomed)
    gone_before = create_trigger(client, doomed)
    client.delete(f"{TRIGGERS}/{gone_before['triggerId']}", headers=HEADERS)
    other = create_trigger(client, kept)

    resp = client.delete(f"/api/workflows/{doomed}", headers=HEADERS)
    assert resp.status_code == 200
    assert resp.json["ok"] is True and resp.json["cancelledWebhookTriggers"] == 2
    assert [t["triggerId"] for t in listed(client)] == [other["triggerId"]]
    for trigger in (one, two):
        assert_problem(deliver(client, trigger), 401, "invalid_webhook_secret")
        assert_problem(deliveries(client, trigger["triggerId"]), 404)
    assert deliver(client, other).status_code == 202


def test_a_failed_delete_keeps_the_triggers_active(make_app):
    """The disable happened in the delete's transaction: the rollback undoes it too."""
    failing = FailsAfterWebhooks()
    app = make_app(plugins=[HookTools(), failing])
    client = app.test_client()
    workflow_id = published_workflow(client)
    trigger = create_trigger(client, workflow_id)

    resp = client.delete(f"/api/workflows/{workflow_id}", headers=HEADERS)
    assert_problem(resp, 500, "workflow_delete_failed")
    assert failing.seen_active == [False]  # disabled inside the transaction...
    assert [t["triggerId"] for t in listed(client)] == [trigger["triggerId"]]  # ...and restored by its rollback
    assert client.get(f"/api/workflows/{workflow_id}", headers=HEADERS).status_code == 200
    assert deliver(client, trigger).status_code == 202
