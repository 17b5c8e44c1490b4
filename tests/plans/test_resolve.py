"""core.plans.resolve and condition_holds: placeholder substitution and runWhen branches."""
import pytest

from core import plans

INPUTS = {"n": 3, "name": "ada", "flags": {"on": True}, "items": [10, 20, 30], "nothing": None}
OUTPUTS = {"fetch": {"status": 200, "body": {"rows": [{"id": "r1"}, {"id": "r2"}]}, "ok": True},
           "count": 2, "text": "done"}


def resolve(value):
    return plans.resolve(value, INPUTS, OUTPUTS)


@pytest.mark.parametrize("text, value", [
    ("{{inputs.n}}", 3),
    ("{{ inputs.n }}", 3),
    ("{{inputs.flags}}", {"on": True}),
    ("{{inputs.flags.on}}", True),
    ("{{inputs.items.1}}", 20),
    ("{{inputs.items.-1}}", 30),
    ("{{inputs.nothing}}", None),
    ("{{steps.fetch.output}}", OUTPUTS["fetch"]),
    ("{{steps.fetch.output.body.rows.1.id}}", "r2"),
    ("{{steps.count.output}}", 2),
])
def test_a_string_that_is_exactly_one_placeholder_keeps_the_json_type(text, value):
    assert resolve(text) == value
    assert type(resolve(text)) is type(value)


@pytest.mark.parametrize("text, value", [
    ("n={{inputs.n}}", "n=3"),
    ("hi {{inputs.name}}!", "hi ada!"),
    ("{{inputs.flags}} / {{inputs.nothing}}", '{"on": true} / null'),
    ("{{inputs.flags.on}}{{steps.text.output}}", "truedone"),
    (" {{inputs.n}} ", " 3 "),
    ("rows: {{steps.fetch.output.body.rows.0}}", 'rows: {"id": "r1"}'),
])
def test_embedded_placeholders_are_stringified(text, value):
    assert resolve(text) == value


def test_resolve_walks_nested_arguments_and_leaves_other_values_alone():
    args = {"a": ["{{inputs.n}}", {"b": "x{{inputs.name}}"}], "c": 1.5, "d": None, "e": False, "f": "plain"}
    assert resolve(args) == {"a": [3, {"b": "xada"}], "c": 1.5, "d": None, "e": False, "f": "plain"}


def test_resolved_values_are_copies():
    value = resolve({"v": "{{inputs.flags}}"})
    value["v"]["on"] = False
    assert INPUTS["flags"] == {"on": True}


@pytest.mark.parametrize("text", [
    "{{inputs.missing}}", "{{inputs.items.7}}", "{{inputs.items.x}}", "{{inputs.n.deeper}}",
    "{{steps.nope.output}}", "{{steps.fetch.output.body.rows.²}}", "pre {{inputs.missing}}",
])
def test_a_placeholder_without_a_value_raises_key_error(text):
    with pytest.raises(KeyError) as info:
        resolve(text)
    assert "has no value" in str(info.value)


def holds(ref, op, value=None, **extra):
    run_when = {"ref": ref, "op": op}
    if value is not None or extra.get("with_null"):
        run_when["value"] = value
    return plans.condition_holds(run_when, INPUTS, OUTPUTS)


@pytest.mark.parametrize("ref, op, value, expected", [
    ("steps.fetch.output.status", "eq", 200, True),
    ("steps.fetch.output.status", "eq", 200.0, True),
    ("steps.fetch.output.status", "eq", "200", False),
    ("steps.fetch.output.ok", "eq", True, True),
    ("steps.fetch.output.ok", "eq", 1, False),          # JSON: true is not 1
    ("inputs.flags", "eq", {"on": True}, True),
    ("inputs.flags", "eq", {"on": 1}, False),
    ("inputs.items", "eq", [10, 20, 30], True),
    ("steps.fetch.output.status", "ne", 404, True),
    ("steps.fetch.output.status", "ne", 200, False),
    ("steps.fetch.output.ok", "ne", 1, True),
    ("inputs.n", "gt", 2, True),
    ("inputs.n", "gt", 3, False),
    ("inputs.n", "gt", 2.5, True),
    ("inputs.name", "gt", "abc", True),
    ("inputs.name", "gt", 1, False),                    # incomparable: false, never an error
    ("steps.fetch.output.ok", "gt", 0, False),          # booleans are not numbers
    ("inputs.n", "lt", 4, True),
    ("inputs.n", "lt", 3, False),
    ("inputs.missing", "lt", 4, False),
    ("inputs.n", "in", [1, 2, 3], True),
    ("inputs.n", "in", [1, 2], False),
    ("steps.fetch.output.ok", "in", [1], False),
    ("inputs.name", "in", ["ada", "bob"], True),
])
def test_value_ops(ref, op, value, expected):
    assert holds(ref, op, value) is expected


@pytest.mark.parametrize("ref, truthy", [
    ("steps.fetch.output.ok", True), ("inputs.n", True), ("steps.text.output", True), ("inputs.items", True),
    ("inputs.nothing", False), ("inputs.missing", False), ("steps.nope.output", False),
])
def test_truthy_and_falsy(ref, truthy):
    assert holds(ref, "truthy") is truthy
    assert holds(ref, "falsy") is (not truthy)


def test_a_missing_reference_counts_as_null():
    assert holds("inputs.missing", "eq", None, with_null=True) is True
    assert holds("inputs.missing", "ne", 1) is True


def test_no_run_when_always_holds_and_braces_are_accepted():
    assert plans.condition_holds(None, INPUTS, OUTPUTS) is True
    assert plans.condition_holds({"ref": "{{inputs.n}}", "op": "eq", "value": 3}, INPUTS, OUTPUTS) is True


def test_validated_plans_resolve_with_their_normalised_steps():
    plan = plans.validate({"steps": [
        {"id": "fetch", "tool": "t"},
        {"id": "use", "tool": "t", "arguments": {"id": "{{steps.fetch.output.body.rows.0.id}}", "n": "{{inputs.n}}"},
         "runWhen": {"ref": "{{steps.fetch.output.ok}}", "op": "truthy"}}]}, input_names={"n"})
    use = plan["steps"][1]
    assert plans.condition_holds(use["runWhen"], INPUTS, OUTPUTS)
    assert plans.resolve(use["arguments"], INPUTS, OUTPUTS) == {"id": "r1", "n": 3}
