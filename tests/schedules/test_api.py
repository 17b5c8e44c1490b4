"""The schedule endpoints: create, list, read, cancel, and every bad request answered as a problem."""
import datetime as dt

import pytest

from builtin_plugins.schedules import calendar as cal
from hookspecs import hookimpl
from tests.conftest import HEADERS
from tests.core.problems import assert_problem
from tests.schedules.support import EchoTool, get, listed, schedule, workflow

WEEK = dt.timedelta(days=7)


def parse(stamp):
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@pytest.fixture
def client(make_app):
    c = make_app(plugins=[EchoTool()]).test_client()
    return c


@pytest.fixture
def wf(client):
    return workflow(client)


def test_interval_schedule_row(client, wf):
    row = schedule(client, wf, intervalSeconds=3600, inputs={"url": "https://a.example", "n": 2})
    created = parse(row["createdAt"])
    assert row["workflowId"] == wf and row["inputs"] == {"url": "https://a.example", "n": 2}
    assert row["intervalSeconds"] == 3600 and row["recurring"] is True and row["calendar"] is None
    assert row["active"] is True and row["state"] == "active"
    assert parse(row["nextFireAt"]) == created + dt.timedelta(hours=1)
    assert parse(row["expiresAt"]) == created + WEEK
    assert (row["fires"], row["missedFires"]) == (0, 0)
    assert row["lastTaskId"] is row["lastRunId"] is row["lastError"] is row["lastFiredAt"] is None
    assert row["sandbox"] == {"planApproval": "auto", "permissionMode": "auto", "fileGrants": "none"}
    assert listed(client) == [row]
    assert get(client, row["id"]) == row


def test_one_shot_interval_schedule(client, wf):
    row = schedule(client, wf, intervalSeconds=600, recurring=False)
    assert row["recurring"] is False
    assert parse(row["nextFireAt"]) == parse(row["createdAt"]) + dt.timedelta(minutes=10)


def test_calendar_schedule_row_has_no_expiry_and_overrides_interval_timing(client, wf):
    body = {"frequency": "WEEKLY", "time": "07:30", "zoneId": "America/New_York", "weekdays": [5, 1]}
    row = schedule(client, wf, calendar=body, intervalSeconds=3600, recurring=False)
    assert row["calendar"] == {"frequency": "WEEKLY", "time": "07:30", "zoneId": "America/New_York",
                               "weekdays": [1, 5]}
    assert row["expiresAt"] is None
    assert row["intervalSeconds"] is None and row["recurring"] is True  # calendar rules always recur
    next_fire = parse(row["nextFireAt"])
    assert next_fire == cal.next_fire(row["calendar"], parse(row["createdAt"]))
    from zoneinfo import ZoneInfo
    local = next_fire.astimezone(ZoneInfo("America/New_York"))
    assert (local.hour, local.minute, local.isoweekday() in (1, 5)) == (7, 30, True)


def test_monthly_last_day_schedule(client, wf):
    row = schedule(client, wf, calendar={"frequency": "MONTHLY", "time": "23:00", "zoneId": "UTC", "monthDay": -1})
    next_fire = parse(row["nextFireAt"])
    assert (next_fire + dt.timedelta(days=1)).day == 1 and next_fire.hour == 23


def test_schedules_survive_a_restart(make_app, data_dir):
    app = make_app(plugins=[EchoTool()])
    client = app.test_client()
    row = schedule(client, workflow(client), intervalSeconds=7200)
    app.extensions["agenthost"].stop()
    again = make_app(plugins=[EchoTool()], data_dir=data_dir).test_client()
    assert listed(again) == [row]


# -- cancel ------------------------------------------------------------------------------

def test_delete_cancels_durably(make_app, data_dir):
    app = make_app(plugins=[EchoTool()])
    client = app.test_client()
    wf = workflow(client)
    keep = schedule(client, wf, intervalSeconds=3600)
    gone = schedule(client, wf, intervalSeconds=3600)
    resp = client.delete(f"/api/agent/schedules/{gone['id']}", headers=HEADERS)
    assert resp.status_code == 200
    assert resp.json["state"] == "cancelled" and resp.json["active"] is False and resp.json["nextFireAt"] is None
    assert resp.json["endedAt"] is not None
    assert [r["id"] for r in listed(client)] == [keep["id"]]
    again = client.delete(f"/api/agent/schedules/{gone['id']}", headers=HEADERS)
    assert assert_problem(again, 409, "schedule_not_active")["state"] == "cancelled"
    app.extensions["agenthost"].stop()
    restarted = make_app(plugins=[EchoTool()], data_dir=data_dir).test_client()
    assert [r["id"] for r in listed(restarted)] == [keep["id"]]
    assert get(restarted, gone["id"])["state"] == "cancelled"


def test_deleting_the_workflow_cancels_its_schedules_in_the_same_transaction(client, wf):
    other = workflow(client)
    first = schedule(client, wf, intervalSeconds=3600)
    second = schedule(client, wf, calendar={"frequency": "DAILY", "time": "09:00", "zoneId": "Europe/Berlin"})
    already = schedule(client, wf, intervalSeconds=3600)
    assert client.delete(f"/api/agent/schedules/{already['id']}", headers=HEADERS).status_code == 200
    kept = schedule(client, other, intervalSeconds=3600)
    resp = client.delete(f"/api/workflows/{wf}", headers=HEADERS)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.json["ok"] is True and resp.json["cancelledSchedules"] == 2
    assert [r["id"] for r in listed(client)] == [kept["id"]]
    for row in (first, second):
        assert get(client, row["id"])["state"] == "cancelled"
        assert get(client, row["id"])["nextFireAt"] is None


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_inputs_near_the_body_limit_are_stored(make_app, backend):
    """240 KiB of inputs (past MySQL's 64 KiB TEXT) come back whole on every backend."""
    client = make_app(plugins=[EchoTool()], backend=backend).test_client()
    wf = workflow(client, input_schema={"type": "object", "properties": {"url": {"type": "string"}}})
    row = schedule(client, wf, intervalSeconds=3600, inputs={"url": "\u00e9" * (40 * 1024)})
    assert listed(client)[0]["inputs"] == row["inputs"] == {"url": "\u00e9" * (40 * 1024)}


def test_disabled_plugin_mounts_nothing_and_workflow_delete_still_works(make_app, data_dir):
    from core.plugins import write_disabled
    write_disabled(data_dir, {"schedules"})
    client = make_app(plugins=[EchoTool()]).test_client()
    assert client.get("/api/agent/schedules", headers=HEADERS).status_code == 404
    wf = workflow(client)
    resp = client.delete(f"/api/workflows/{wf}", headers=HEADERS)
    assert resp.status_code == 200 and resp.json["cancelledSchedules"] == 0


class RefuseDelete:
    """A test plugin whose ``workflow_deleting`` fails after the schedules plugin cancelled its rows."""

    __name__ = "refuse_delete"

    @hookimpl
    def workflow_deleting(self, host, workflow_id, session):
        raise RuntimeError("not today")


def test_a_rolled_back_workflow_delete_keeps_its_schedules_active(make_app):
    """The cancel is part of the delete's transaction: when the delete fails, nothing is cancelled."""
    client = make_app(plugins=[EchoTool(), RefuseDelete()]).test_client()
    wf = workflow(client)
    row = schedule(client, wf, intervalSeconds=3600)
    assert client.delete(f"/api/workflows/{wf}", headers=HEADERS).status_code == 500
    assert listed(client) == [row]
    assert client.get(f"/api/workflows/{wf}", headers=HEADERS).status_code == 200
