"""Tools, prompts, resources and calls over each transport against a FastMCP server built for the tests."""
import pytest

from tests.conftest import TOKEN
from tests.core.problems import assert_problem
from tests.core.shared_app import module_app
from tests.mcp.support import FAST, FIXTURE_TOOLS, STDIO_FIXTURE, http_definition, wait_until

TRANSPORTS = ["STDIO", "SSE", "STREAMABLE_HTTP"]


@pytest.fixture(scope="module", params=TRANSPORTS)
def connected(request, tmp_path_factory):
    """One app per transport with the fixture server added over it (these rules only read)."""
    if request.param == "STDIO":
        definition = STDIO_FIXTURE
    else:
        http = request.getfixturevalue("sse_server" if request.param == "SSE" else "streamable_server")
        definition = http_definition(http, request.param, name="fixture")
    for app in module_app(tmp_path_factory, config=FAST):
        client = app.test_client()
        client.environ_base["HTTP_X_SERVICE_TOKEN"] = TOKEN
        resp = client.post("/api/mcp/servers", json=definition)
        assert resp.status_code == 201, resp.json
        yield app, resp.json


@pytest.fixture
def server(connected):
    return connected[1]


@pytest.fixture
def reader(connected):
    client = connected[0].test_client()
    client.environ_base["HTTP_X_SERVICE_TOKEN"] = TOKEN
    return client


def call(api, server, tool, **arguments):
    return api.post(f"/api/mcp/servers/{server['id']}/call", json={"tool": tool, "arguments": arguments})


def test_the_server_connects_and_lists_its_tools(server):
    assert server["state"] == "connected"
    assert server["tools"] == FIXTURE_TOOLS
    assert server["serverInfo"]["name"] == "fixture"


def test_a_tool_call_returns_content_and_structured_content(reader, server):
    resp = call(reader, server, "add", a=2, b=40.5)

    assert resp.status_code == 200
    assert resp.json["isError"] is False
    assert resp.json["content"] == [{"type": "text", "text": "42.5"}]
    assert resp.json["structuredContent"] == {"result": 42.5}


def test_a_tool_that_raises_answers_a_result_with_the_error(reader, server):
    resp = call(reader, server, "fail", message="the widget is broken")

    assert resp.status_code == 200
    assert resp.json["isError"] is True and "the widget is broken" in resp.json["error"]


def test_a_json_rpc_error_from_the_server_is_a_422_problem_with_its_code(reader, server):
    body = assert_problem(call(reader, server, "refuse"), 422, "mcp_error")
    assert body["mcpCode"] == -32042 and body["mcpMessage"]


def test_prompts_of_the_live_session(reader, server):
    prompts = reader.get(f"/api/mcp/servers/{server['id']}/prompts").json
    assert prompts == [{"name": "greet", "title": None, "description": "Greet someone.",
                        "arguments": [{"name": "name", "description": None, "required": True}]}]


def test_resources_of_the_live_session(reader, server):
    resources = reader.get(f"/api/mcp/servers/{server['id']}/resources").json
    assert resources == [{"uri": "fixture://readme", "name": "readme", "title": None,
                          "description": "A fixed text resource.", "mimeType": "text/plain", "size": None}]


def test_catalog_names_are_namespaced_and_sanitised(reader, server):
    tools = {t["name"]: t for t in reader.get("/api/agent/tools").json}
    assert server["catalogTools"] == sorted(f"fixture__{n.replace('.', '_')}" for n in FIXTURE_TOOLS)
    assert set(server["catalogTools"]) <= set(tools)
    assert tools["fixture__weird_name"]["source"] == f"mcp:{server['id']}"


def test_the_agent_path_calls_the_tool_and_a_tool_error_becomes_a_tool_error(connected, server):
    from core.tools import ToolError

    tools = connected[0].extensions["agenthost"].tools
    assert tools.call("fixture__echo", {"text": "through the catalog"})["content"][0]["text"] == "through the catalog"
    with pytest.raises(ToolError, match="nope"):
        tools.call("fixture__fail", {"message": "nope"})
    with pytest.raises(ToolError, match="invalid arguments"):
        tools.call("fixture__add", {"a": "one"})


@pytest.mark.parametrize("transport", ["STDIO", "STREAMABLE_HTTP"])
def test_a_tools_list_changed_notification_refreshes_the_catalog(api, http_server, transport):
    """grow adds a tool on the server and notifies; the new tool joins the catalog."""
    if transport == "STDIO":
        definition = {**STDIO_FIXTURE, "name": "growing"}
    else:
        definition = http_definition(http_server("streamable-http"), transport, name="growing")
    server = api.post("/api/mcp/servers", json=definition).json
    assert "growing__extra" not in server["catalogTools"]

    assert call(api, server, "grow").json["content"][0]["text"] == "grown"

    refreshed = wait_until(lambda: (s := api.get(f"/api/mcp/servers/{server['id']}").json)["tools"] != FIXTURE_TOOLS
                           and s, what="the tool list to refresh")
    assert refreshed["tools"] == sorted(FIXTURE_TOOLS + ["extra"])
    tools = {t["name"]: t for t in api.get("/api/agent/tools").json}
    assert tools["growing__extra"]["parameters"]["properties"]["x"]["type"] == "integer"
    assert call(api, server, "extra", x=21).json["structuredContent"] == {"result": 42}


def test_a_url_with_a_host_name_is_resolved_and_connects(api, streamable_server):
    """Name resolution runs in a real thread beside the loop (the original getaddrinfo)."""
    url = f"http://localhost:{streamable_server.port}/mcp"
    server = api.post("/api/mcp/servers", json={"name": "by-name", "transport": "STREAMABLE_HTTP",
                                                "url": url}).json
    assert server["state"] == "connected", server["lastError"]


@pytest.mark.parametrize("transport", ["SSE", "STREAMABLE_HTTP"])
def test_https_runs_a_real_tls_handshake_and_refuses_an_untrusted_certificate(api, http_server, transport):
    remote = http_server("sse" if transport == "SSE" else "streamable-http", tls=True)
    server = api.post("/api/mcp/servers", json=http_definition(remote, transport, name="tls")).json
    assert remote.url(transport).startswith("https://")
    assert server["state"] == "failed" and "CERTIFICATE_VERIFY_FAILED" in server["lastError"], server["lastError"]
