"""What a workflow definition must satisfy: a JSON Schema object for inputs and a valid AgentPlan."""
import pytest

from tests.conftest import HEADERS
from tests.core.problems import assert_problem
from tests.workflows.support import INPUT_SCHEMA, body, get


@pytest.fixture
def wf(unchanged):
    """A workflow that every refused write must leave exactly as it was."""
    return unchanged


def refused(client, wf, status=400, code=None, **changes):
    """POST and PUT are both refused with the same problem; returns the PUT problem."""
    created = client.post("/api/workflows", json=body(**changes), headers=HEADERS)
    replaced = client.put(f"/api/workflows/{wf['id']}", json=body(**changes), headers=HEADERS)
    first = assert_problem(created, status, code)
    second = assert_problem(replaced, status, code)
    assert first["errors"] == second["errors"]
    return second


@pytest.mark.parametrize("schema, message", [
    ({"type": "string"}, "object"),
    ({"type": ["object", "null"]}, "object"),
    ({"type": "objekt"}, ""),
    ({"type": "object", "properties": {"a": {"type": 5}}}, ""),
    ({"type": "object", "required": "a"}, ""),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "(("}}}, "regex"),
    ({"type": "object", "minProperties": -1}, ""),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/schema.json"}}}, "$ref"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "$ref"),
    ({"type": "object", "description": "x" * (256 * 1024)}, "KiB"),
])
def test_an_unusable_input_schema_is_400(client, wf, schema, message):
    problem = refused(client, wf, 400, "validation_failed", inputSchema=schema)
    assert message in problem["errors"]["inputSchema"][0]


def test_local_refs_and_a_schema_without_type_are_accepted(client, wf):
    schema = {"$defs": {"u": {"type": "string"}}, "properties": {"url": {"$ref": "#/$defs/u"}}}
    resp = client.post("/api/workflows", json=body(inputSchema=schema), headers=HEADERS)
    assert resp.status_code == 201, resp.json
    client.delete(f"/api/workflows/{resp.json['id']}", headers=HEADERS)


def steps(*items):
    return {"goal": "g", "steps": list(items)}


def echo(sid, **extra):
    return {"id": sid, "tool": "echo", **extra}


@pytest.mark.parametrize("plan, where", [
    (steps(echo("a", dependsOn=["b"]), echo("b", dependsOn=["a"])), "plan.steps.0.dependsOn"),
    (steps(echo("a", arguments={"x": "{{steps.b.output}}"}), echo("b", dependsOn=["a"])), "plan.steps.0.dependsOn"),
    (steps(echo("a"), {"id": "b", "tool": "no_such_tool"}), "plan.steps.1.tool"),
    (steps(echo("a"), echo("a")), "plan.steps.1.id"),
    (steps(echo("a"), echo("b", arguments={"x": "{{steps.ghost.output}}"})), "plan.steps.1.arguments"),
    (steps(echo("a"), echo("b", arguments={"x": "{{inputs.undeclared}}"})), "plan.steps.1.arguments"),
    (steps(echo("a"), echo("b", arguments={"x": "{{inputs}}"})), "plan.steps.1.arguments"),
    (steps(echo("a"), echo("b", arguments={"x": "{{steps.a.out}}"})), "plan.steps.1.arguments"),
    (steps(echo("a"), {"id": "b", "tool": "typed", "arguments": {"count": "three"}}), "plan.steps.1.arguments"),
    (steps(echo("a"), {"id": "b", "tool": "typed", "arguments": {}}), "plan.steps.1.arguments"),
    (steps(echo("a"), {"id": "b", "tool": "typed", "arguments": {"count": 1, "x": 2}}), "plan.steps.1.arguments"),
    (steps(echo("a", runWhen={"ref": "inputs.url", "op": "like", "value": 1})), "plan.steps.0.runWhen"),
    (steps(echo("a", runWhen={"ref": "inputs.url", "op": "eq"})), "plan.steps.0.runWhen.value"),
    (steps(echo("a", runWhen={"ref": "steps.zz.output", "op": "truthy"})), "plan.steps.0.runWhen.ref"),
    (steps(echo("a", retry={"maxAttempts": 11, "delayMs": 0})), "plan.steps.0.retry.maxAttempts"),
    (steps(echo("a", retry={"maxAttempts": 2, "delayMs": -5})), "plan.steps.0.retry.delayMs"),
    (steps(echo("a", retry={"maxAttempts": "2"})), "plan.steps.0.retry.maxAttempts"),
    (steps(*[echo(f"s{i}") for i in range(257)]), "plan.steps"),
    (steps(echo("a", arguments={"blob": "x" * (512 * 1024)})), "plan"),
    ({"steps": [echo("a")], "extra": True}, "plan"),
    ({"goal": ["g"], "steps": [echo("a")]}, "plan.goal"),
    ({"steps": []}, "plan.steps"),
    ({"goal": "g"}, "plan.steps"),
])
def test_an_invalid_plan_is_400_naming_the_step(client, wf, plan, where):
    problem = refused(client, wf, 400, "invalid_plan", plan=plan)
    assert where in problem["errors"], problem["errors"]


def test_a_typed_placeholder_argument_is_left_for_the_run(client):
    plan = steps({"id": "t", "tool": "typed", "arguments": {"count": "{{inputs.n}}", "label": "n={{inputs.n}}"}})
    resp = client.post("/api/workflows", json=body(plan=plan), headers=HEADERS)
    assert resp.status_code == 201, resp.json
    client.delete(f"/api/workflows/{resp.json['id']}", headers=HEADERS)


def test_the_largest_accepted_plan_is_stored(client, wf):
    plan = steps(*[echo(f"s{i}", dependsOn=[i - 1] if i else []) for i in range(256)])
    resp = client.post("/api/workflows", json=body(plan=plan), headers=HEADERS)
    assert resp.status_code == 201, resp.json
    assert get(client, resp.json["id"])["plan"] == plan
    client.delete(f"/api/workflows/{resp.json['id']}", headers=HEADERS)


def test_oversized_layout_and_graph_are_400(client, wf):
    blob = {"x": "y" * (1024 * 1024)}
    for key in ("layout", "graph"):
        problem = refused(client, wf, 400, "validation_failed", **{key: blob})
        assert key in problem["errors"]


def test_input_schema_properties_declare_the_inputs(client, wf):
    schema = {**INPUT_SCHEMA, "properties": {**INPUT_SCHEMA["properties"], "extra": {"type": "string"}}}
    plan = steps(echo("a", arguments={"x": "{{inputs.extra}}"}))
    resp = client.post("/api/workflows", json=body(inputSchema=schema, plan=plan), headers=HEADERS)
    assert resp.status_code == 201, resp.json
    client.delete(f"/api/workflows/{resp.json['id']}", headers=HEADERS)
