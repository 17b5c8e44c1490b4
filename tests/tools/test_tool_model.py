"""core.tools: what a Tool accepts, and how the catalog checks arguments before a handler runs."""
import pytest

from core.tools import Tool, ToolCatalog, ToolContext, ToolError

SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "maxLength": 10},
        "times": {"type": "integer", "minimum": 1},
    },
    "required": ["text"],
    "additionalProperties": False,
}


def echo_tool(calls, name="echo", parameters=SCHEMA, **kwargs):
    def handler(arguments, ctx):
        calls.append((arguments, ctx))
        return {"echo": arguments["text"] * arguments.get("times", 1)}

    return Tool(name, "Repeat a text.", parameters, handler, **kwargs)


@pytest.mark.parametrize("name", ["echo", "read_file", "http-request", "A1", "x" * 64])
def test_valid_names_are_accepted(name):
    assert echo_tool([], name=name).name == name


@pytest.mark.parametrize("name", ["", "has space", "dot.name", "slash/name", "x" * 65, "name\n", "ünïcode",
                                  None, 5])
def test_invalid_names_are_refused(name):
    with pytest.raises(ValueError, match="invalid tool name"):
        echo_tool([], name=name)


@pytest.mark.parametrize("parameters", [
    {"type": "string"},
    {"type": "array", "items": {"type": "string"}},
    {"type": ["object", "null"]},
    [],
    None,
    "object",
])
def test_non_object_schemas_are_refused(parameters):
    with pytest.raises(ValueError, match="parameters"):
        echo_tool([], parameters=parameters)


def test_a_schema_that_is_not_valid_json_schema_is_refused():
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        echo_tool([], parameters={"type": "object", "properties": {"x": {"type": "nope"}}})


def test_a_schema_without_type_is_taken_as_an_object():
    tool = echo_tool([], parameters={"properties": {"text": {"type": "string"}}})
    assert tool.parameters["type"] == "object"
    with pytest.raises(ToolError):
        tool.validate(["not", "an", "object"])


def test_description_and_handler_are_checked():
    with pytest.raises(ValueError, match="description"):
        Tool("t", None, SCHEMA, lambda a, c: None)
    with pytest.raises(ValueError, match="handler"):
        Tool("t", "d", SCHEMA, "not callable")


def test_describe_is_the_wire_shape():
    tool = echo_tool([], retry_safe=True, source="extension:demo")
    assert tool.describe() == {"name": "echo", "description": "Repeat a text.", "parameters": SCHEMA,
                               "source": "extension:demo", "retrySafe": True}


def test_catalog_runs_a_valid_call_with_its_context():
    calls = []
    catalog = ToolCatalog()
    catalog.add(echo_tool(calls))
    ctx = ToolContext(owner="local", run_id="r1", step_id="s1")
    assert catalog.call("echo", {"text": "ab", "times": 2}, ctx) == {"echo": "abab"}
    assert calls == [({"text": "ab", "times": 2}, ctx)]


@pytest.mark.parametrize("arguments, where, reason", [
    ({}, "arguments", "'text' is a required property"),
    ({"text": 5}, "text", "5 is not of type 'string'"),
    ({"text": "x" * 11}, "text", "is too long"),
    ({"text": "a", "times": 0}, "times", "less than the minimum of 1"),
    ({"text": "a", "times": "2"}, "times", "'2' is not of type 'integer'"),
    ({"text": "a", "extra": 1}, "arguments", "Additional properties are not allowed"),
    (None, "arguments", "None is not of type 'object'"),
    (["a"], "arguments", "is not of type 'object'"),
])
def test_invalid_arguments_raise_tool_error_before_the_handler_runs(arguments, where, reason):
    calls = []
    catalog = ToolCatalog()
    catalog.add(echo_tool(calls))
    with pytest.raises(ToolError) as info:
        catalog.call("echo", arguments)
    message = str(info.value)
    assert message.startswith(f"invalid arguments for echo: {where}: "), message
    assert reason in message
    assert calls == []


def test_unknown_tool_is_a_tool_error():
    with pytest.raises(ToolError, match="unknown tool 'nope'"):
        ToolCatalog().call("nope", {})


def test_catalog_refuses_a_taken_name_and_keeps_the_first():
    first, second = [], []
    catalog = ToolCatalog()
    catalog.add(echo_tool(first))
    with pytest.raises(ValueError, match="already registered"):
        catalog.add(echo_tool(second))
    catalog.call("echo", {"text": "a"})
    assert len(first) == 1 and second == []


def test_catalog_is_live_and_tells_its_listeners():
    events = []
    catalog = ToolCatalog()
    catalog.listeners.append(lambda event, name: events.append((event, name)))
    catalog.add(echo_tool([], name="a", source="mcp:one"))
    catalog.add(echo_tool([], name="b", source="mcp:one"))
    catalog.add(echo_tool([], name="c"))
    assert [t.name for t in catalog.list()] == ["a", "b", "c"]
    assert sorted(catalog.remove_source("mcp:one")) == ["a", "b"]
    assert catalog.remove("c") is True
    assert catalog.remove("c") is False
    assert catalog.list() == []
    assert events == [("added", "a"), ("added", "b"), ("added", "c"),
                      ("removed", "a"), ("removed", "b"), ("removed", "c")]


def test_replaced_parameters_are_what_arguments_are_checked_against():
    tool = echo_tool([])
    tool.parameters = {"type": "object", "required": ["other"]}
    with pytest.raises(ToolError, match="'other' is a required property"):
        tool.validate({"text": "a"})
