"""GET /api/agent/tools: the live catalog as clients see it, including tools of plugins."""
from core.tools import Tool
from hookspecs import hookimpl
from tests.conftest import HEADERS
from tests.core.problems import assert_problem

GREET = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


class Greeter:
    """A test extension with two tools."""

    __name__ = "greeter"

    @hookimpl
    def register_tools(self, host):
        return [
            Tool("greet", "Say hello.", GREET, lambda args, ctx: f"hello {args['name']}", retry_safe=True),
            Tool("shout", "Say it loudly.", {"type": "object", "properties": {}}, lambda args, ctx: "HEY"),
        ]


class Clash:
    """A second extension that tries to take a name Greeter already has."""

    __name__ = "clash"

    @hookimpl
    def register_tools(self, host):
        return [Tool("clash_own", "Fine on its own.", {"type": "object"}, lambda a, c: 1),
                Tool("greet", "Taken.", {"type": "object"}, lambda a, c: 2)]


def tools_of(client):
    resp = client.get("/api/agent/tools", headers=HEADERS)
    assert resp.status_code == 200
    return {t["name"]: t for t in resp.json}


def test_plugin_tools_are_listed_with_their_wire_fields(make_app):
    tools = tools_of(make_app(plugins=[Greeter()]).test_client())
    assert tools["greet"] == {"name": "greet", "description": "Say hello.", "parameters": GREET,
                              "source": "extension:greeter", "retrySafe": True}
    assert tools["shout"]["retrySafe"] is False
    assert tools["shout"]["parameters"] == {"type": "object", "properties": {}}
    for tool in tools.values():
        assert set(tool) == {"name", "description", "parameters", "source", "retrySafe"}


def test_listed_tools_are_sorted_by_name(make_app):
    resp = make_app(plugins=[Greeter()]).test_client().get("/api/agent/tools", headers=HEADERS)
    names = [t["name"] for t in resp.json]
    assert names == sorted(names)


def test_catalog_endpoint_is_live(make_app):
    app = make_app(plugins=[Greeter()])
    client = app.test_client()
    host = app.extensions["agenthost"]
    host.tools.add(Tool("late", "Joined at runtime.", {"type": "object"}, lambda a, c: None, source="mcp:demo"))
    assert tools_of(client)["late"]["source"] == "mcp:demo"
    host.tools.remove_source("mcp:demo")
    assert "late" not in tools_of(client)


def test_a_taken_tool_name_fails_the_second_plugin_only(make_app):
    app = make_app(plugins=[Greeter(), Clash()])
    tools = tools_of(app.test_client())
    assert tools["greet"]["source"] == "extension:greeter"
    assert "clash_own" not in tools  # the failing plugin's tools leave together
    records = {r["name"]: r for r in app.extensions["agenthost"].plugins.list()}
    assert records["greeter"]["error"] is None
    assert "greet" in records["clash"]["error"]


def test_tools_need_the_token(make_app):
    client = make_app(plugins=[Greeter()]).test_client()
    assert_problem(client.get("/api/agent/tools"), 401, "invalid_token")
    assert_problem(client.get("/api/agent/tools", headers={"X-Service-Token": "nope"}), 401, "invalid_token")
