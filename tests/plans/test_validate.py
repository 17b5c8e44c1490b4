"""core.plans.validate: the AgentPlan rules shared by workflows and agent runs."""
import pytest

from core import plans
from core.tools import Tool, ToolCatalog


def catalog():
    tools = ToolCatalog()
    tools.add(Tool("echo", "Echo", {"type": "object"}, lambda a, c: a))
    tools.add(Tool("typed", "Typed arguments", {
        "type": "object", "required": ["count"], "additionalProperties": False,
        "properties": {"count": {"type": "integer", "minimum": 1}, "label": {"type": "string", "maxLength": 5},
                       "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                       "mode": {"enum": ["a", "b"]}}}, lambda a, c: a))
    return tools


def step(sid, **extra):
    return {"id": sid, "tool": "echo", **extra}


def errors_of(plan, **kwargs):
    with pytest.raises(plans.PlanError) as info:
        plans.validate(plan, **kwargs)
    return info.value.errors


def test_a_valid_plan_is_normalised_with_defaults():
    out = plans.validate({"goal": "g", "steps": [{"tool": "echo"}, {"tool": "echo", "dependsOn": [0]}]})
    first, second = out["steps"]
    assert first == {"id": "s0", "index": 0, "title": "s0", "tool": "echo", "arguments": {}, "dependsOn": [],
                     "runWhen": None, "retry": {"maxAttempts": 1, "delayMs": 0}, "approval": False,
                     "retrySafe": None}
    assert second["id"] == "s1" and second["dependsOn"] == [0]


def test_depends_on_accepts_ids_and_indexes_alike():
    out = plans.validate({"steps": [step("a"), step("b"), step("c", dependsOn=["a", 1])]})
    assert out["steps"][2]["dependsOn"] == [0, 1]


def test_the_input_plan_is_not_modified():
    plan = {"steps": [step("a", arguments={"x": [1]}), step("b", dependsOn=["a"])]}
    out = plans.validate(plan)
    out["steps"][0]["arguments"]["x"].append(2)
    assert plan == {"steps": [step("a", arguments={"x": [1]}), step("b", dependsOn=["a"])]}


def test_referenced_steps_become_implicit_dependencies():
    out = plans.validate({"steps": [step("a"), step("b"), step("c", arguments={"v": "{{steps.b.output.x}}"},
                                                                  runWhen={"ref": "steps.a.output", "op": "truthy"})]})
    assert out["steps"][2]["dependsOn"] == [0, 1]


def test_run_when_ref_may_be_written_as_a_placeholder():
    out = plans.validate({"steps": [step("a"), step("b", runWhen={"ref": "{{ steps.a.output.ok }}", "op": "truthy"})]})
    assert out["steps"][1]["runWhen"]["ref"] == "steps.a.output.ok"
    assert out["steps"][1]["dependsOn"] == [0]


@pytest.mark.parametrize("plan, where", [
    ("not a plan", "plan"),
    ({"steps": []}, "steps"),
    ({"steps": {"a": 1}}, "steps"),
    ({"steps": [step("a")], "extra": 1}, "plan"),
    ({"goal": 5, "steps": [step("a")]}, "goal"),
    ({"steps": [7]}, "steps.0"),
    ({"steps": [step("a", colour="red")]}, "steps.0.colour"),
    ({"steps": [step("a"), step("a")]}, "steps.1.id"),
    ({"steps": [step("bad id")]}, "steps.0.id"),
    ({"steps": [step(5)]}, "steps.0.id"),
    ({"steps": [{"id": "a"}]}, "steps.0.tool"),
    ({"steps": [step("a", title=["x"])]}, "steps.0.title"),
    ({"steps": [step("a", arguments=[1])]}, "steps.0.arguments"),
    ({"steps": [step("a", approval="yes")]}, "steps.0.approval"),
    ({"steps": [step("a", retrySafe=1)]}, "steps.0.retrySafe"),
    ({"steps": [step("a", retry=3)]}, "steps.0.retry"),
    ({"steps": [step("a", retry={"maxAttempts": 2, "backoff": 1})]}, "steps.0.retry"),
    ({"steps": [step("a", retry={"maxAttempts": 0})]}, "steps.0.retry.maxAttempts"),
    ({"steps": [step("a", retry={"maxAttempts": 11})]}, "steps.0.retry.maxAttempts"),
    ({"steps": [step("a", retry={"maxAttempts": True})]}, "steps.0.retry.maxAttempts"),
    ({"steps": [step("a", retry={"maxAttempts": 2.0})]}, "steps.0.retry.maxAttempts"),
    ({"steps": [step("a", retry={"delayMs": -1})]}, "steps.0.retry.delayMs"),
    ({"steps": [step("a", retry={"delayMs": 600_001})]}, "steps.0.retry.delayMs"),
    ({"steps": [step("a", runWhen={"ref": "inputs.x", "op": "matches", "value": 1})]}, "steps.0.runWhen"),
    ({"steps": [step("a", runWhen={"ref": 3, "op": "eq", "value": 1})]}, "steps.0.runWhen"),
    ({"steps": [step("a", runWhen={"ref": "inputs.x", "op": "eq", "value": 1, "x": 1})]}, "steps.0.runWhen"),
    ({"steps": [step("a", runWhen="inputs.x")]}, "steps.0.runWhen"),
    ({"steps": [step("a", runWhen={"ref": "inputs.x", "op": "gt"})]}, "steps.0.runWhen.value"),
    ({"steps": [step("a", runWhen={"ref": "inputs.x", "op": "in", "value": "abc"})]}, "steps.0.runWhen.value"),
    ({"steps": [step("a", runWhen={"ref": "outputs.x", "op": "truthy"})]}, "steps.0.runWhen.ref"),
    ({"steps": [step("a", dependsOn="b")]}, "steps.0.dependsOn"),
    ({"steps": [step("a", dependsOn=["zz"])]}, "steps.0.dependsOn"),
    ({"steps": [step("a", dependsOn=[3])]}, "steps.0.dependsOn"),
    ({"steps": [step("a", dependsOn=[-1])]}, "steps.0.dependsOn"),
    ({"steps": [step("a", dependsOn=[True])]}, "steps.0.dependsOn"),
    ({"steps": [step("a", dependsOn=[["b"]])]}, "steps.0.dependsOn"),
    ({"steps": [step("a", dependsOn=[{"id": "a"}])]}, "steps.0.dependsOn"),
    ({"steps": [step("a", dependsOn=["a"])]}, "steps.0.dependsOn"),
    ({"steps": [step("a", dependsOn=[0])]}, "steps.0.dependsOn"),
])
def test_a_bad_plan_is_refused_naming_the_place(plan, where):
    assert where in errors_of(plan)


@pytest.mark.parametrize("text", [
    "{{steps.zz.output}}",           # unknown step
    "{{inputs.nope}}",               # undeclared input
    "{{steps.a}}",                   # no .output
    "{{steps.a.result}}",
    "{{outputs.a}}",                 # unknown root
    "{{inputs.}}",                   # empty name
    "{{steps.a.output..x}}",         # empty path part
    "{{steps.b.output}}",            # its own output
    "see {{inputs.nope}} here",      # embedded placeholders are checked too
])
def test_a_dangling_or_malformed_placeholder_is_refused(text):
    plan = {"steps": [step("a"), step("b", arguments={"deep": [{"v": text}]})]}
    errors = errors_of(plan, input_names={"url"})
    assert list(errors) == ["steps.1.arguments"], errors


def test_any_input_is_accepted_when_no_names_are_declared():
    plans.validate({"steps": [step("a", arguments={"v": "{{inputs.anything.deep}}"})]}, input_names=None)


def test_unknown_tools_are_refused_only_against_a_catalog():
    plan = {"steps": [{"id": "a", "tool": "nope"}]}
    plans.validate(plan)
    assert "Unknown tool" in errors_of(plan, tools=catalog())["steps.0.tool"][0]


@pytest.mark.parametrize("steps, first", [
    ([step("a", dependsOn=["b"]), step("b", dependsOn=["a"])], "steps.0.dependsOn"),
    ([step("a", dependsOn=["c"]), step("b", dependsOn=["a"]), step("c", dependsOn=[1])], "steps.0.dependsOn"),
    # implicit: a reads c's output, c depends on a
    ([step("a", arguments={"v": "{{steps.c.output}}"}), step("c", dependsOn=["a"])], "steps.0.dependsOn"),
    # implicit both ways, one through runWhen
    ([step("a", runWhen={"ref": "steps.b.output.ok", "op": "truthy"}),
      step("b", arguments={"v": "x{{steps.a.output}}"})], "steps.0.dependsOn"),
])
def test_dependency_cycles_are_refused_with_the_path(steps, first):
    errors = errors_of({"steps": steps})
    assert list(errors) == [first]
    assert "cycle" in errors[first][0].lower()


def test_a_long_chain_is_not_a_cycle():
    steps = [step(f"s{i}", dependsOn=[i - 1] if i else []) for i in range(256)]
    out = plans.validate({"steps": steps})
    assert out["steps"][255]["dependsOn"] == [254]
    assert plans.find_cycle(out["steps"]) is None


def test_size_limits():
    assert "steps" in errors_of({"steps": [step(f"s{i}") for i in range(257)]})
    big = {"steps": [step("a", arguments={"blob": "x" * (512 * 1024)})]}
    assert "512 KiB" in errors_of(big)["plan"][0]


@pytest.mark.parametrize("arguments, ok", [
    ({"count": 2}, True),
    ({"count": "2"}, False),                                 # wrong literal type
    ({"count": 0}, False),                                   # literal out of range
    ({}, False),                                             # missing required
    ({"count": 1, "other": 1}, False),                       # unknown argument
    ({"count": 1, "label": "far too long"}, False),
    ({"count": 1, "tags": ["a", "b", "c"]}, False),          # literal array too long
    ({"count": "{{inputs.n}}"}, True),                       # a whole placeholder may be any type
    ({"count": 1, "label": "{{inputs.n}} and more"}, True),  # embedded: content unknown, still a string
    ({"count": 1, "tags": "x{{inputs.n}}"}, False),          # embedded placeholder is still a string, not an array
    ({"count": "{{inputs.n}}", "extra": "{{inputs.n}}"}, False),  # the key itself is literal
    ({"count": 1, "tags": ["{{inputs.n}}", "{{inputs.n}}", "{{inputs.n}}"]}, False),  # length is literal
    ({"count": 1, "mode": "{{inputs.n}}"}, True),
    ({"count": 1, "mode": "c"}, False),
])
def test_literal_arguments_are_checked_against_the_tool_schema(arguments, ok):
    plan = {"steps": [{"id": "t", "tool": "typed", "arguments": arguments}]}
    if ok:
        plans.validate(plan, tools=catalog(), input_names={"n"})
    else:
        errors = errors_of(plan, tools=catalog(), input_names={"n"})
        assert list(errors) == ["steps.0.arguments"]
        assert errors["steps.0.arguments"][0].startswith("Invalid arguments for typed")


def test_every_error_is_reported_not_only_the_first():
    errors = errors_of({"steps": [step("a", retry={"maxAttempts": 0}), {"id": "a"}]})
    assert {"steps.0.retry.maxAttempts", "steps.1.id", "steps.1.tool"} <= set(errors)
