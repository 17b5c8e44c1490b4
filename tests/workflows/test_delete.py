"""Deleting a workflow cancels what triggers it through the workflow_deleting hook, in the same transaction."""
import pytest
import sqlalchemy as sa

from hookspecs import hookimpl
from tests.conftest import HEADERS
from tests.core.problems import assert_problem
from tests.core.shared_app import module_app
from tests.workflows.support import FlowTools, create, get, tools_of

META = sa.MetaData()
TRIGGERS = sa.Table("wf_test_triggers", META,
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("workflow_id", sa.String(36), nullable=False),
                    sa.Column("kind", sa.String(20), nullable=False),
                    sa.Column("active", sa.Boolean, nullable=False))


class Triggers:
    """A test plugin owning schedules and webhook triggers; it cancels them through the given session."""

    __name__ = "wf_test_triggers"

    def __init__(self):
        self.seen = []

    @hookimpl
    def startup(self, host):
        META.create_all(host.db.engine)

    @hookimpl
    def workflow_deleting(self, host, workflow_id, session):
        # The workflow row is still there: this runs inside the deleting transaction.
        exists = session.execute(sa.text("SELECT COUNT(*) FROM workflows WHERE id = :id"),
                                 {"id": workflow_id}).scalar()
        self.seen.append((workflow_id, exists, host is not None))
        counts = {}
        for kind, key in (("schedule", "schedules"), ("webhook", "webhookTriggers")):
            result = session.execute(sa.update(TRIGGERS).where(TRIGGERS.c.workflow_id == workflow_id,
                                                               TRIGGERS.c.kind == kind, TRIGGERS.c.active)
                                     .values(active=False))
            counts[key] = result.rowcount
        return counts


class MoreSchedules:
    """A second implementation: its counts add to the first one's."""

    __name__ = "wf_test_more"

    @hookimpl
    def workflow_deleting(self, host, workflow_id, session):
        return {"schedules": 4}


class Quiet:
    """An implementation with nothing to cancel answers None."""

    __name__ = "wf_test_quiet"

    @hookimpl
    def workflow_deleting(self, host, workflow_id, session):
        return None


class Failing:
    """An implementation that fails (when told to) after the first plugin already wrote through the session."""

    __name__ = "wf_test_failing"

    def __init__(self):
        self.answer, self.error = None, None

    @hookimpl(trylast=True)
    def workflow_deleting(self, host, workflow_id, session):
        if self.error:
            raise self.error
        return self.answer


TRIGGERS_PLUGIN, FAILING = Triggers(), Failing()


@pytest.fixture(scope="module")
def shared_app(tmp_path_factory):
    yield from module_app(tmp_path_factory, plugins=[FlowTools(), TRIGGERS_PLUGIN, MoreSchedules(), Quiet(), FAILING])


@pytest.fixture
def app(shared_app):
    """The module's app with the failing plugin behaving until a test says otherwise."""
    TRIGGERS_PLUGIN.seen.clear()
    FAILING.answer = FAILING.error = None
    yield shared_app
    FAILING.answer = FAILING.error = None


def add_triggers(app, workflow_id, schedules, webhooks, active=True):
    with app.extensions["agenthost"].db.engine.begin() as conn:
        for kind, n in (("schedule", schedules), ("webhook", webhooks)):
            for _ in range(n):
                conn.execute(TRIGGERS.insert().values(workflow_id=workflow_id, kind=kind, active=active))


def active_triggers(app, workflow_id):
    with app.extensions["agenthost"].db.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(TRIGGERS).where(
            TRIGGERS.c.workflow_id == workflow_id, TRIGGERS.c.active)).scalar()


def published(client):
    wf = create(client)
    resp = client.post(f"/api/workflows/{wf['id']}/publish", json={"published": True}, headers=HEADERS)
    return resp.json


def test_delete_sums_the_counts_of_every_implementation(app):
    triggers = TRIGGERS_PLUGIN
    client = app.test_client()
    wf, other = published(client), create(client)
    add_triggers(app, wf["id"], schedules=2, webhooks=3)
    add_triggers(app, wf["id"], schedules=1, webhooks=0, active=False)  # already cancelled: not counted
    add_triggers(app, other["id"], schedules=1, webhooks=1)

    resp = client.delete(f"/api/workflows/{wf['id']}", headers=HEADERS)
    assert resp.status_code == 200
    assert resp.json == {"ok": True, "cancelledSchedules": 6, "cancelledWebhookTriggers": 3}
    assert triggers.seen == [(wf["id"], 1, True)]
    assert active_triggers(app, wf["id"]) == 0
    assert active_triggers(app, other["id"]) == 2
    assert wf["toolName"] not in tools_of(client)


@pytest.mark.parametrize("answer, error", [
    (None, RuntimeError("scheduler database is locked")),
    ("two", None),
    ({"schedules": -1}, None),
    ({"schedules": "1"}, None),
    ({"schedules": True}, None),
    ({"timers": 1}, None),
], ids=["raises", "not-counts", "negative", "string-count", "bool-count", "unknown-key"])
def test_a_failed_cancel_rolls_the_whole_delete_back(app, answer, error):
    FAILING.answer, FAILING.error = answer, error
    client = app.test_client()
    wf = published(client)
    add_triggers(app, wf["id"], schedules=2, webhooks=1)

    resp = client.delete(f"/api/workflows/{wf['id']}", headers=HEADERS)
    problem = assert_problem(resp, 500, "workflow_delete_failed")
    assert "wf_test_failing" in problem["detail"] and "Traceback" not in resp.get_data(as_text=True)
    assert "locked" not in problem["detail"]  # the plugin's own message stays in the log
    # Nothing happened: the workflow, its snapshot, its tool and its live triggers are all still there.
    assert get(client, wf["id"]) == wf
    assert len(client.get(f"/api/workflows/{wf['id']}/revisions", headers=HEADERS).json) == 1
    assert wf["toolName"] in tools_of(client)
    assert active_triggers(app, wf["id"]) == 3


def test_the_delete_goes_through_once_the_plugin_recovers(app):
    failing = FAILING
    failing.error = RuntimeError("down")
    client = app.test_client()
    wf = published(client)
    add_triggers(app, wf["id"], schedules=1, webhooks=1)
    assert client.delete(f"/api/workflows/{wf['id']}", headers=HEADERS).status_code == 500
    failing.error = None
    resp = client.delete(f"/api/workflows/{wf['id']}", headers=HEADERS)
    assert resp.json == {"ok": True, "cancelledSchedules": 1 + 4, "cancelledWebhookTriggers": 1}
    assert active_triggers(app, wf["id"]) == 0
