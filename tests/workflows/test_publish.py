"""Publishing: immutable snapshots, the active revision, unpublish, restore, and the live tool catalog."""
import pytest

from tests.conftest import HEADERS
from tests.core.problems import assert_problem
from tests.workflows.support import INPUT_SCHEMA, FlowTools, body, create, get, tools_of


def own_tools(client, wid):
    return [name for name in tools_of(client) if name.endswith(wid[:8])]


def publish(client, wid, published=True, **extra):
    resp = client.post(f"/api/workflows/{wid}/publish", json={"published": published, **extra}, headers=HEADERS)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.json


def put(client, wid, **changes):
    resp = client.put(f"/api/workflows/{wid}", json=body(**changes), headers=HEADERS)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.json


def revisions(client, wid):
    resp = client.get(f"/api/workflows/{wid}/revisions", headers=HEADERS)
    assert resp.status_code == 200
    return resp.json


def snapshot(client, wid, revision):
    resp = client.get(f"/api/workflows/{wid}/revisions/{revision}", headers=HEADERS)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.json


def test_publish_creates_an_immutable_active_snapshot(client):
    wf = create(client)
    published = publish(client, wf["id"])
    assert published["published"] is True and published["activeRevision"] == 1 and published["revision"] == 1
    listed = revisions(client, wf["id"])
    assert [(r["revision"], r["name"], r["active"]) for r in listed] == [(1, "Fetch report", True)]
    snap = snapshot(client, wf["id"], 1)
    assert snap["active"] is True and snap["workflowId"] == wf["id"]
    assert {k: snap[k] for k in ("name", "description", "inputSchema", "plan", "layout", "graph")} == body()

    # Later draft edits leave the snapshot exactly as it was.
    edited = put(client, wf["id"], name="Edited", plan={"steps": [{"id": "only", "tool": "echo"}]}, graph=None)
    assert edited["revision"] == 2 and edited["activeRevision"] == 1 and edited["published"] is True
    assert snapshot(client, wf["id"], 1) == snap
    assert revisions(client, wf["id"]) == listed


def test_each_publish_of_a_new_revision_adds_a_snapshot_and_moves_active(client):
    wf = create(client)
    publish(client, wf["id"])
    put(client, wf["id"], name="Second")
    put(client, wf["id"], name="Third")
    third = publish(client, wf["id"], expectedRevision=3)
    assert third["activeRevision"] == 3
    listed = revisions(client, wf["id"])
    assert [(r["revision"], r["name"], r["active"]) for r in listed] == [(3, "Third", True), (1, "Fetch report", False)]
    assert all(r["publishedAt"].endswith("Z") for r in listed)
    assert snapshot(client, wf["id"], 1)["active"] is False
    assert_problem(client.get(f"/api/workflows/{wf['id']}/revisions/2", headers=HEADERS), 404)


def test_publishing_the_same_revision_again_reuses_its_snapshot(client):
    wf = create(client)
    publish(client, wf["id"])
    first = snapshot(client, wf["id"], 1)
    publish(client, wf["id"], published=False)
    publish(client, wf["id"])
    publish(client, wf["id"])
    assert snapshot(client, wf["id"], 1) == first
    assert len(revisions(client, wf["id"])) == 1


def test_publish_with_a_stale_expected_revision_is_409_and_changes_nothing(client):
    wf = create(client)
    put(client, wf["id"], name="v2")
    before = get(client, wf["id"])
    resp = client.post(f"/api/workflows/{wf['id']}/publish", json={"published": True, "expectedRevision": 1},
                       headers=HEADERS)
    assert assert_problem(resp, 409, "stale_revision")["currentRevision"] == 2
    assert get(client, wf["id"]) == before and revisions(client, wf["id"]) == []
    assert own_tools(client, wf["id"]) == []


@pytest.mark.parametrize("payload, field", [
    ({}, "published"), ({"published": "yes"}, "published"), ({"published": 1}, "published"),
    ({"published": None}, "published"), ({"published": True, "revision": 1}, "revision"),
])
def test_a_bad_publish_body_is_400(shared_app, payload, field):
    client = shared_app.test_client()
    wf = create(client)
    resp = client.post(f"/api/workflows/{wf['id']}/publish", json=payload, headers=HEADERS)
    assert field in assert_problem(resp, 400, "validation_failed")["errors"]
    assert get(client, wf["id"]) == wf and revisions(client, wf["id"]) == []


def test_unpublish_keeps_the_snapshots_but_marks_none_active(client):
    wf = create(client)
    publish(client, wf["id"])
    off = publish(client, wf["id"], published=False)
    assert off["published"] is False and off["activeRevision"] is None and off["toolName"] is None
    assert [(r["revision"], r["active"]) for r in revisions(client, wf["id"])] == [(1, False)]
    stale = client.post(f"/api/workflows/{wf['id']}/publish", json={"published": False, "expectedRevision": 5},
                        headers=HEADERS)
    assert_problem(stale, 409, "stale_revision")


def test_restore_makes_a_new_draft_and_leaves_the_active_snapshot(client):
    wf = create(client)
    publish(client, wf["id"])
    put(client, wf["id"], name="Changed", plan={"steps": [{"id": "x", "tool": "echo"}]}, layout=None, graph=None)
    put(client, wf["id"], name="Changed twice")
    publish(client, wf["id"])  # snapshot 3 is active now
    restored = client.post(f"/api/workflows/{wf['id']}/revisions/1/restore", json={"expectedRevision": 3},
                           headers=HEADERS)
    assert restored.status_code == 200, restored.json
    draft = restored.json
    assert draft["revision"] == 4 and draft["activeRevision"] == 3 and draft["published"] is True
    assert {k: draft[k] for k in ("name", "description", "inputSchema", "plan", "layout", "graph")} == body()
    assert [(r["revision"], r["active"]) for r in revisions(client, wf["id"])] == [(3, True), (1, False)]
    assert snapshot(client, wf["id"], 3)["name"] == "Changed twice"


def test_restore_without_a_body_and_with_a_stale_revision(client):
    wf = create(client)
    publish(client, wf["id"])
    ok = client.post(f"/api/workflows/{wf['id']}/revisions/1/restore", headers=HEADERS)
    assert ok.status_code == 200 and ok.json["revision"] == 2
    stale = client.post(f"/api/workflows/{wf['id']}/revisions/1/restore", json={"expectedRevision": 1},
                        headers=HEADERS)
    assert assert_problem(stale, 409, "stale_revision")["currentRevision"] == 2
    assert get(client, wf["id"])["revision"] == 2
    unknown = client.post(f"/api/workflows/{wf['id']}/revisions/7/restore", json={}, headers=HEADERS)
    assert_problem(unknown, 404, "not_found")
    bad = client.post(f"/api/workflows/{wf['id']}/revisions/1/restore", json={"extra": 1}, headers=HEADERS)
    assert "extra" in assert_problem(bad, 400, "validation_failed")["errors"]
    assert get(client, wf["id"])["revision"] == 2


def test_a_published_workflow_is_a_tool_with_its_input_schema_as_parameters(client):
    wf = create(client)
    assert own_tools(client, wf["id"]) == []
    published = publish(client, wf["id"])
    name = f"workflow_fetch_report_{wf['id'][:8]}"
    assert published["toolName"] == name
    tool = tools_of(client)[name]
    assert tool["parameters"] == INPUT_SCHEMA
    assert tool["description"] == "Fetches a page." and tool["source"] == f"workflow:{wf['id']}"


def test_the_tool_follows_the_active_snapshot_not_the_draft(client):
    wf = create(client)
    publish(client, wf["id"])
    name = f"workflow_fetch_report_{wf['id'][:8]}"
    schema = {"type": "object", "properties": {"url": {"type": "string"}, "extra": {"type": "boolean"}}}
    draft = put(client, wf["id"], name="Renamed flow!", inputSchema=schema)
    assert draft["toolName"] == name  # the tool is still the published snapshot's
    assert tools_of(client)[name]["parameters"] == INPUT_SCHEMA
    republished = publish(client, wf["id"])
    renamed = f"workflow_renamed_flow_{wf['id'][:8]}"
    assert republished["toolName"] == renamed
    tools = tools_of(client)
    assert name not in tools and tools[renamed]["parameters"] == schema


def test_the_tool_leaves_on_unpublish_and_on_delete(client):
    wf = create(client)
    name = publish(client, wf["id"])["toolName"]
    publish(client, wf["id"], published=False)
    assert name not in tools_of(client)
    publish(client, wf["id"])
    assert name in tools_of(client)
    assert client.delete(f"/api/workflows/{wf['id']}", headers=HEADERS).status_code == 200
    assert name not in tools_of(client)
    assert_problem(client.get(f"/api/workflows/{wf['id']}/revisions", headers=HEADERS), 404)


def test_published_tools_come_back_after_a_restart(make_app, data_dir):
    app = make_app(plugins=[FlowTools()])
    client = app.test_client()
    kept, dropped = create(client, name="Kept"), create(client, name="Dropped")
    kept_name = publish(client, kept["id"])["toolName"]
    dropped_name = publish(client, dropped["id"])["toolName"]
    publish(client, dropped["id"], published=False)
    app.extensions["agenthost"].stop()

    again = make_app(plugins=[FlowTools()], data_dir=data_dir).test_client()
    tools = tools_of(again)
    assert tools[kept_name]["parameters"] == INPUT_SCHEMA
    assert dropped_name not in tools
    assert get(again, kept["id"])["toolName"] == kept_name


def test_publishing_a_plan_whose_tool_has_gone_is_refused(make_app, data_dir):
    client = make_app(plugins=[FlowTools()]).test_client()
    wf = create(client)
    # The same data without the plugin that provided "echo": the stored draft names a missing tool.
    again = make_app(data_dir=data_dir).test_client()
    problem = assert_problem(again.post(f"/api/workflows/{wf['id']}/publish", json={"published": True},
                                        headers=HEADERS), 400, "invalid_plan")
    assert "plan.steps.0.tool" in problem["errors"]
    assert revisions(again, wf["id"]) == [] and get(again, wf["id"])["published"] is False


def test_tool_names_are_slugged_and_bounded():
    from builtin_plugins.workflows.service import tool_name
    wid = "abcdef12-0000-4000-8000-000000000000"
    assert tool_name(wid, "Daily Report: v2 (EU)") == "workflow_daily_report_v2_eu_abcdef12"
    assert tool_name(wid, "???") == "workflow_workflow_abcdef12"
    assert tool_name(wid, "Ünïcode") == "workflow_unicode_abcdef12"
    assert tool_name(wid, "日本語") == "workflow_workflow_abcdef12"
    assert len(tool_name(wid, "x" * 200)) <= 64
