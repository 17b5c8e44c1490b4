"""Server definitions: add connects at once, read back masked, replace reconnects, delete disconnects, all persisted."""
import datetime as dt
import json
import sys

import pytest

from tests.conftest import TOKEN
from tests.core.problems import assert_problem
from tests.core.shared_app import module_app
from tests.mcp.support import FAST, FIXTURE_TOOLS, STDIO_FIXTURE, TIME_SERVER, http_definition, process_gone, wait_until

GHOST = {"name": "ghost", "transport": "STDIO", "command": "/nonexistent/agenthost-mcp"}


def authed(app):
    client = app.test_client()
    client.environ_base["HTTP_X_SERVICE_TOKEN"] = TOKEN
    return client


def catalog(api):
    return {t["name"]: t for t in api.get("/api/agent/tools").json}


# -- the time server from PyPI, added once for the rules that only read -------------------------

@pytest.fixture(scope="module")
def time_app(tmp_path_factory):
    for app in module_app(tmp_path_factory, config=FAST):
        client = authed(app)
        app.time_server = client.post("/api/mcp/servers", json=TIME_SERVER)
        app.ghost = client.post("/api/mcp/servers", json=GHOST)
        yield app


@pytest.fixture
def time_api(time_app):
    return authed(time_app)


def test_adding_a_stdio_server_connects_at_once_and_lists_its_tools(time_app, time_api):
    resp = time_app.time_server

    assert resp.status_code == 201
    server = resp.json
    assert server["state"] == "connected" and server["lastError"] is None
    assert server["transport"] == "STDIO" and server["command"] == sys.executable
    assert server["tools"] == ["convert_time", "get_current_time"]
    assert server["serverInfo"]["name"] == "mcp-time"
    assert isinstance(server["pid"], int) and not process_gone(server["pid"])
    assert time_api.get(f"/api/mcp/servers/{server['id']}").json["tools"] == server["tools"]


def test_the_current_time_tool_answers_with_the_real_time(time_app, time_api):
    server_id = time_app.time_server.json["id"]

    resp = time_api.post(f"/api/mcp/servers/{server_id}/call",
                         json={"tool": "get_current_time", "arguments": {"timezone": "Europe/Paris"}})

    assert resp.status_code == 200 and resp.json["isError"] is False and resp.json["error"] is None
    answer = json.loads(resp.json["content"][0]["text"])
    assert answer["timezone"] == "Europe/Paris"
    told = dt.datetime.fromisoformat(answer["datetime"])
    assert told.utcoffset() in (dt.timedelta(hours=1), dt.timedelta(hours=2))
    assert abs((told - dt.datetime.now(dt.timezone.utc)).total_seconds()) < 300


def test_a_tool_error_comes_back_as_a_result_carrying_the_error(time_app, time_api):
    server_id = time_app.time_server.json["id"]

    resp = time_api.post(f"/api/mcp/servers/{server_id}/call",
                         json={"tool": "get_current_time", "arguments": {"timezone": "Mars/Olympus_Mons"}})

    assert resp.status_code == 200 and resp.json["isError"] is True
    assert resp.json["error"] == resp.json["content"][0]["text"] and "error" in resp.json["error"].lower()


def test_connected_tools_join_the_catalog_with_their_schemas_and_source(time_app, time_api):
    server = time_app.time_server.json

    tools = catalog(time_api)

    assert server["catalogTools"] == ["time__convert_time", "time__get_current_time"]
    entry = tools["time__get_current_time"]
    assert entry["source"] == f"mcp:{server['id']}"
    assert entry["parameters"]["type"] == "object" and "timezone" in entry["parameters"]["properties"]
    assert entry["parameters"]["required"] == ["timezone"]
    assert not [name for name in tools if name.startswith("ghost__")]


def test_a_catalog_tool_calls_the_server_like_any_other_tool(time_app):
    tools = time_app.extensions["agenthost"].tools

    result = tools.call("time__get_current_time", {"timezone": "UTC"})

    assert json.loads(result["content"][0]["text"])["timezone"] == "UTC"


def test_status_counts_configured_connections_and_discovered_tools(time_api):
    status = time_api.get("/api/mcp/status").json

    assert status["servers"] == 2 and status["connected"] == 1 and status["tools"] == 2
    assert status["failed"] + status["connecting"] == 1
    assert {c["name"]: (c["transport"], c["toolCount"]) for c in status["connections"]} == {
        "time": ("STDIO", 2), "ghost": ("STDIO", 0)}


def test_a_server_that_cannot_connect_is_saved_with_its_state_and_error(time_app, time_api):
    resp = time_app.ghost

    assert resp.status_code == 201 and resp.json["state"] == "failed"
    assert "command not found" in resp.json["lastError"]
    assert resp.json["tools"] == [] and resp.json["catalogTools"] == []
    listed = {s["name"]: s for s in time_api.get("/api/mcp/servers").json}
    assert listed["ghost"]["command"] == GHOST["command"] and "command not found" in listed["ghost"]["lastError"]


def test_calling_a_tool_the_server_does_not_have_is_404(time_app, time_api):
    server_id = time_app.time_server.json["id"]
    assert_problem(time_api.post(f"/api/mcp/servers/{server_id}/call", json={"tool": "nope", "arguments": {}}),
                   404, "tool_not_found")


def test_a_server_that_is_not_connected_answers_503_with_its_state(time_app, time_api):
    server_id = time_app.ghost.json["id"]

    for method, path, kwargs in [("post", "call", {"json": {"tool": "x", "arguments": {}}}),
                                 ("get", "prompts", {}), ("get", "resources", {})]:
        resp = getattr(time_api, method)(f"/api/mcp/servers/{server_id}/{path}", **kwargs)
        body = assert_problem(resp, 503, "mcp_not_connected")
        assert body["state"] in ("failed", "connecting")


def test_a_server_without_prompts_or_resources_lists_none(time_app, time_api):
    server_id = time_app.time_server.json["id"]
    assert time_api.get(f"/api/mcp/servers/{server_id}/prompts").json == []
    assert time_api.get(f"/api/mcp/servers/{server_id}/resources").json == []


# -- changes ---------------------------------------------------------------------------------

def test_names_are_unique_ignoring_case(api):
    api.post("/api/mcp/servers", json={**GHOST, "name": "Ghost"})

    assert_problem(api.post("/api/mcp/servers", json={**GHOST, "command": "/nonexistent/b"}), 409, "name_taken")
    assert [s["command"] for s in api.get("/api/mcp/servers").json] == [GHOST["command"]]


def test_replacing_a_server_closes_the_old_session_and_refreshes_the_catalog(api, streamable_server, sse_server):
    server = api.post("/api/mcp/servers", json=http_definition(streamable_server, "STREAMABLE_HTTP", "one")).json
    assert wait_until(lambda: streamable_server.stats()["sessions"] == 1, what="the session to open")

    resp = api.put(f"/api/mcp/servers/{server['id']}", json=http_definition(sse_server, "SSE", "two"))

    assert resp.status_code == 200
    replaced = resp.json
    assert (replaced["id"], replaced["name"], replaced["transport"]) == (server["id"], "two", "SSE")
    assert replaced["state"] == "connected" and replaced["tools"] == FIXTURE_TOOLS
    assert wait_until(lambda: streamable_server.stats()["sessions"] == 0, what="the old session to close")
    names = set(catalog(api))
    assert "two__echo" in names and not [n for n in names if n.startswith("one__")]


def test_a_replace_that_cannot_connect_keeps_the_new_definition_and_drops_the_tools(api, streamable_server):
    server = api.post("/api/mcp/servers", json=http_definition(streamable_server, "STREAMABLE_HTTP", "one")).json

    resp = api.put(f"/api/mcp/servers/{server['id']}", json={**GHOST, "name": "one"})

    assert resp.json["state"] == "failed" and "command not found" in resp.json["lastError"]
    assert resp.json["transport"] == "STDIO" and resp.json["url"] is None and resp.json["headers"] == {}
    assert not [n for n in catalog(api) if n.startswith("one__")]


def test_a_put_with_a_taken_name_is_409_and_changes_nothing(api):
    first = api.post("/api/mcp/servers", json={**GHOST, "name": "a"}).json
    api.post("/api/mcp/servers", json={**GHOST, "name": "b"})

    assert_problem(api.put(f"/api/mcp/servers/{first['id']}", json={**GHOST, "name": "B", "command": "/x"}),
                   409, "name_taken")
    assert api.get(f"/api/mcp/servers/{first['id']}").json["command"] == GHOST["command"]


def test_deleting_a_server_closes_its_session_and_its_tools_leave(api, streamable_server):
    server = api.post("/api/mcp/servers", json=http_definition(streamable_server, "STREAMABLE_HTTP", "gone")).json
    assert "gone__echo" in catalog(api)

    resp = api.delete(f"/api/mcp/servers/{server['id']}")

    assert resp.status_code == 200 and resp.json == {"ok": True, "id": server["id"]}
    assert wait_until(lambda: streamable_server.stats()["sessions"] == 0, what="the session to close")
    assert not [n for n in catalog(api) if n.startswith("gone__")]
    assert_problem(api.get(f"/api/mcp/servers/{server['id']}"), 404)
    assert api.get("/api/mcp/status").json["servers"] == 0


def test_test_reconnects_and_reports_what_it_found(api, streamable_server):
    server = api.post("/api/mcp/servers", json=http_definition(streamable_server, "STREAMABLE_HTTP")).json

    result = api.post(f"/api/mcp/servers/{server['id']}/test").json

    assert result["ok"] is True and result["error"] is None and result["state"] == "connected"
    assert result["tools"] == FIXTURE_TOOLS and result["serverInfo"]["name"] == "fixture"
    assert result["protocolVersion"] and isinstance(result["elapsedMs"], int)
    after = api.get(f"/api/mcp/servers/{server['id']}").json
    assert after["connectedAt"] > server["connectedAt"], "test opens a new session"
    assert wait_until(lambda: streamable_server.stats()["sessions"] == 1, what="the old session to close")


def test_test_of_a_broken_server_returns_the_error(api):
    server = api.post("/api/mcp/servers", json=GHOST).json

    result = api.post(f"/api/mcp/servers/{server['id']}/test").json

    assert result["ok"] is False and result["state"] == "failed"
    assert "command not found" in result["error"] and result["tools"] == []


def test_env_reaches_the_process_and_reads_back_masked_and_stars_on_put_keep_it(api):
    server = api.post("/api/mcp/servers", json={**STDIO_FIXTURE, "env": {"FIXTURE_SECRET": "s3cr3t", "O": "x"}}).json
    assert server["env"] == {"FIXTURE_SECRET": "***", "O": "***"}

    def getenv(name):
        return api.post(f"/api/mcp/servers/{server['id']}/call",
                        json={"tool": "getenv", "arguments": {"name": name}}).json["content"][0]["text"]

    assert getenv("FIXTURE_SECRET") == "s3cr3t"

    resp = api.put(f"/api/mcp/servers/{server['id']}", json={**STDIO_FIXTURE, "env": {"FIXTURE_SECRET": "***",
                                                                                       "NEW": "n"}})

    assert resp.json["env"] == {"FIXTURE_SECRET": "***", "NEW": "***"}
    assert getenv("FIXTURE_SECRET") == "s3cr3t" and getenv("NEW") == "n" and getenv("O") == ""
    assert "s3cr3t" not in json.dumps(api.get("/api/mcp/servers").json)


def test_stars_without_a_stored_value_are_refused_on_put(api):
    server = api.post("/api/mcp/servers", json=GHOST).json
    body = assert_problem(api.put(f"/api/mcp/servers/{server['id']}", json={**GHOST, "env": {"NOPE": "***"}}), 400)
    assert "NOPE" in body["errors"]["env"]
    assert api.get(f"/api/mcp/servers/{server['id']}").json["env"] == {}


def test_definitions_survive_a_restart(make_app, backend, data_dir):
    first = make_app(backend=backend, config=FAST)
    api = authed(first)
    stdio = api.post("/api/mcp/servers", json={**GHOST, "args": ["-x", "ü"], "env": {"K": "v"},
                                               "cwd": str(data_dir), "callTimeoutSeconds": 7.5}).json
    http = api.post("/api/mcp/servers", json={"name": "remote", "transport": "SSE", "url": "http://127.0.0.1:9/sse",
                                              "headers": {"Authorization": "Bearer t0ken"}}).json
    first.extensions["agenthost"].stop()

    again = authed(make_app(backend=backend, config=FAST))
    servers = {s["id"]: s for s in again.get("/api/mcp/servers").json}

    assert set(servers) == {stdio["id"], http["id"]}
    kept = servers[stdio["id"]]
    assert (kept["command"], kept["args"], kept["cwd"], kept["env"], kept["callTimeoutSeconds"]) == (
        GHOST["command"], ["-x", "ü"], str(data_dir), {"K": "***"}, 7.5)
    assert (servers[http["id"]]["url"], servers[http["id"]]["headers"]) == (
        "http://127.0.0.1:9/sse", {"Authorization": "***"})
    assert servers[http["id"]]["state"] in ("connecting", "failed"), "stored servers connect on start"


def test_definitions_at_every_size_limit_are_stored_on_every_backend(make_app, backend):
    api = authed(make_app(backend=backend, config=FAST))
    env = {f"VAR_{i}": chr(0x41 + i % 26) * 16384 for i in range(100)}
    args = ["ü" * 4096] * 100

    created = api.post("/api/mcp/servers", json={**GHOST, "name": "名" * 64, "command": "/" + "c" * 4095,
                                                 "args": args, "env": env})

    assert created.status_code == 201, created.json
    back = api.get(f"/api/mcp/servers/{created.json['id']}").json
    assert back["name"] == "名" * 64 and back["args"] == args and back["env"] == {name: "***" for name in env}
    spec = api.application.extensions["agenthost"].service("mcp")._spec(_row(api, created.json["id"]))
    assert spec.env == env


def _row(api, server_id):
    from builtin_plugins.mcp.models import McpServer

    with api.application.extensions["agenthost"].db.session() as s:
        return s.get(McpServer, server_id)


def test_stored_servers_connect_again_when_the_host_starts(make_app):
    first = make_app(config=FAST)
    server = authed(first).post("/api/mcp/servers", json=STDIO_FIXTURE).json
    first.extensions["agenthost"].stop()
    assert wait_until(lambda: process_gone(server["pid"]), what="shutdown to end the server process")

    again = authed(make_app(config=FAST))

    back = wait_until(lambda: (s := again.get(f"/api/mcp/servers/{server['id']}").json)["state"] == "connected" and s,
                      what="the stored server to reconnect")
    assert back["tools"] == FIXTURE_TOOLS and back["pid"] != server["pid"]
    assert "fixture__echo" in catalog(again)
