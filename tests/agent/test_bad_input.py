"""Bad requests to the agent endpoints answer problem bodies and start nothing."""
import pytest

from tests.agent.support import Tools, assert_problem
from tests.conftest import TOKEN

PLAN = {"steps": [{"id": "a", "tool": "echo"}]}


@pytest.fixture
def agent_client(make_app):
    tools = Tools()
    client = make_app(plugins=[tools]).test_client()
    client.environ_base["HTTP_X_SERVICE_TOKEN"] = TOKEN
    client.tools = tools
    return client


def no_runs(client):
    assert client.get("/api/agent/runs").get_json() == []
    assert client.tools.calls == []


BAD_RUNS = [
    ({}, "goal"),
    ({"goal": ""}, "goal"),
    ({"goal": 5}, "goal"),
    ({"goal": "x" * 20001}, "goal"),
    ({"goal": "nul\x00byte"}, "goal"),
    ({"goal": "g", "config": "auto"}, "config"),
    ({"goal": "g", "config": {"planApproval": "maybe"}}, "config"),
    ({"goal": "g", "config": {"permissionMode": "yolo"}}, "config"),
    ({"goal": "g", "config": {"maxSteps": "3"}}, "config"),
    ({"goal": "g", "config": {"maxSteps": 0}}, "config"),
    ({"goal": "g", "config": {"maxSteps": 257}}, "config"),
    ({"goal": "g", "config": {"plan": [1]}}, "config"),
    ({"goal": "g", "config": {"surprise": 1}}, "config"),
    ({"goal": "g", "extra": 1}, "extra"),
]


def test_run_bodies_with_wrong_or_missing_fields(agent_client):
    for body, field in BAD_RUNS:
        resp = agent_client.post("/api/agent/run", json=body)
        problem = assert_problem(resp, 400, "validation_failed")
        assert field in problem["errors"], (body, problem)
    no_runs(agent_client)


def test_malformed_json_wrong_media_type_and_tokens(agent_client, make_app):
    for path in ("/api/agent/run", "/api/agent/batch"):
        resp = agent_client.post(path, data="{not json", content_type="application/json")
        assert_problem(resp, 400, "malformed_json")
        resp = agent_client.post(path, data="[1, 2]", content_type="application/json")
        assert_problem(resp, 400, "malformed_json")
        resp = agent_client.post(path, data="goal=x", content_type="application/x-www-form-urlencoded")
        assert_problem(resp, 415)
        resp = agent_client.post(path, data="", content_type="application/json")
        assert_problem(resp, 400, "body_required")
    bare = agent_client.application.test_client()
    assert_problem(bare.post("/api/agent/run", json={"goal": "g", "config": {"plan": PLAN}}), 401)
    wrong = bare.post("/api/agent/run", json={"goal": "g", "config": {"plan": PLAN}},
                      headers={"X-Service-Token": "wrong-" + TOKEN})
    assert_problem(wrong, 401)
    for path in ("/api/agent/runs", "/api/agent/tools", "/api/agent/runs/" + "0" * 36):
        assert_problem(bare.get(path), 401)
    no_runs(agent_client)


def test_batch_bodies(agent_client):
    for body in ({"goals": "one"}, {"goals": [1]}, {"goals": [""]}, {"goals": []}, {"goals": ["g"] * 9},
                 {"config": {"plan": PLAN}}, {"goals": ["g"], "config": {"planApproval": 1}}):
        assert_problem(agent_client.post("/api/agent/batch", json=body), 400, "validation_failed")
    resp = agent_client.post("/api/agent/batch", json={"goals": ["a", "b"], "config": {
        "plan": {"steps": [{"tool": "unknown_tool"}]}}})
    assert_problem(resp, 400, "invalid_plan")
    no_runs(agent_client)


def test_unknown_runs_and_bad_ids(agent_client):
    unknown = "00000000-0000-0000-0000-000000000000"
    for method, path in (("get", f"/api/agent/runs/{unknown}"), ("post", f"/api/agent/{unknown}/approve"),
                         ("post", f"/api/agent/{unknown}/cancel"), ("post", f"/api/agent/runs/{unknown}/resume"),
                         ("get", "/api/agent/runs/" + "a" * 40)):
        assert_problem(getattr(agent_client, method)(path), 404)
    assert_problem(agent_client.post("/api/agent/stream-ticket", json={"runId": 5}), 400, "validation_failed")
    assert_problem(agent_client.post("/api/agent/stream-ticket", json={"runId": unknown}), 404)
    assert_problem(agent_client.get(f"/api/agent/stream?runId={unknown}"), 403, "ticket_required")
    no_runs(agent_client)
