"""Catalog names of MCP tools: <server>__<tool>, sanitised to the model APIs' rule, short enough and unique."""
import re

from builtin_plugins.mcp.service import catalog_name
from core.tools import NAME_RE
from tests.mcp.support import http_definition


def never(_):
    return False


def test_server_and_tool_names_are_joined_and_sanitised():
    assert catalog_name("time", "get_current_time", never) == "time__get_current_time"
    assert catalog_name("My Server!", "files.read/all", never) == "My_Server__files_read_all"
    assert catalog_name("日本語", "ツール", never) == "mcp__tool"


def test_long_names_are_cut_to_64_characters_keeping_them_distinct():
    first = catalog_name("s" * 40, "t" * 60 + "one", never)
    second = catalog_name("s" * 40, "t" * 60 + "two", never)
    assert len(first) <= 64 and len(second) <= 64 and first != second
    assert NAME_RE.fullmatch(first) and NAME_RE.fullmatch(second)


def test_a_taken_name_gets_a_numbered_suffix():
    taken = {"a__b", "a__b_2"}
    assert catalog_name("a", "b", taken.__contains__) == "a__b_3"
    long_taken = {catalog_name("x" * 30, "y" * 40, never)}
    suffixed = catalog_name("x" * 30, "y" * 40, long_taken.__contains__)
    assert len(suffixed) <= 64 and suffixed.endswith("_2")


def test_two_servers_whose_names_sanitise_alike_both_keep_their_tools(api, streamable_server):
    one = api.post("/api/mcp/servers", json=http_definition(streamable_server, "STREAMABLE_HTTP", "my server")).json
    two = api.post("/api/mcp/servers", json=http_definition(streamable_server, "STREAMABLE_HTTP", "my_server")).json

    tools = {t["name"]: t for t in api.get("/api/agent/tools").json}

    assert "my_server__echo" in one["catalogTools"] and "my_server__echo_2" in two["catalogTools"]
    assert tools["my_server__echo"]["source"] == f"mcp:{one['id']}"
    assert tools["my_server__echo_2"]["source"] == f"mcp:{two['id']}"
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in tools)
