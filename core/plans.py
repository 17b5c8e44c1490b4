"""AgentPlan: validation, placeholders, and the dependency graph shared by workflows and the agent."""
import copy
import functools
import json
import re

import jsonschema

MAX_STEPS = 256
MAX_PLAN_BYTES = 512 * 1024
MAX_RETRY_ATTEMPTS = 10
MAX_RETRY_DELAY_MS = 600_000
RUN_WHEN_OPS = ("eq", "ne", "gt", "lt", "in", "truthy", "falsy")
VALUE_OPS = ("eq", "ne", "gt", "lt", "in")
STEP_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}\Z")
PLACEHOLDER_RE = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
INDEX_RE = re.compile(r"-?[0-9]+\Z")
_STEP_KEYS = {"id", "title", "tool", "arguments", "dependsOn", "runWhen", "retry", "approval", "retrySafe",
              "description"}
# Schema keywords that judge the shape of an object or array, never the values inside it: their
# errors stand even when some of those values are placeholders only known at run time.
_STRUCTURAL_KEYWORDS = {"type", "required", "additionalProperties", "minProperties", "maxProperties",
                        "minItems", "maxItems", "propertyNames", "dependentRequired", "dependencies",
                        "unevaluatedProperties"}


class PlanError(ValueError):
    """The plan is invalid; ``errors`` maps a location (``steps.2.tool``) to messages."""

    def __init__(self, errors):
        self.errors = errors
        first = next(iter(errors.items()))
        super().__init__(f"{first[0]}: {first[1][0]}")


@functools.lru_cache(maxsize=2048)
def parse_ref(text):
    """``inputs.NAME[.path]`` or ``steps.ID.output[.path]`` -> ("inputs", NAME, path) / ("steps", ID, path).

    None when the reference is malformed (wrong root, missing name, ``output`` missing, empty path part).
    """
    parts = text.strip().split(".")
    if len(parts) >= 2 and parts[0] == "inputs":
        kind, name, path = "inputs", parts[1], tuple(parts[2:])
    elif len(parts) >= 3 and parts[0] == "steps" and parts[2] == "output":
        kind, name, path = "steps", parts[1], tuple(parts[3:])
    else:
        return None
    if not name or any(not part for part in path):
        return None
    return kind, name, path


def placeholders(value):
    """Every placeholder reference inside a JSON value (strings, lists, dicts)."""
    if isinstance(value, str):
        return [m.group(1) for m in PLACEHOLDER_RE.finditer(value)]
    if isinstance(value, list):
        return [ref for item in value for ref in placeholders(item)]
    if isinstance(value, dict):
        return [ref for item in value.values() for ref in placeholders(item)]
    return []


def validate(plan, *, tools=None, input_names=None):
    """Return a normalised copy of ``plan`` (ids filled, dependsOn as indexes) or raise PlanError.

    ``tools`` is a catalog (``get(name)``) to check tool names and the literal
    parts of the arguments against each tool's schema; ``input_names`` the
    declared inputs (None: any input is accepted, as in an ad-hoc agent run).
    Error locations name the step: ``steps.<index>.<field>``.
    """
    errors = {}

    def err(where, message):
        errors.setdefault(where, []).append(message)

    if not isinstance(plan, dict):
        raise PlanError({"plan": ["Must be an object with a steps list."]})
    try:
        size = len(json.dumps(plan, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError):
        raise PlanError({"plan": ["Must be JSON."]}) from None
    if size > MAX_PLAN_BYTES:
        raise PlanError({"plan": [f"Larger than {MAX_PLAN_BYTES // 1024} KiB."]})
    unknown = set(plan) - {"goal", "steps"}
    if unknown:
        err("plan", f"Unknown fields: {', '.join(sorted(unknown))}.")
    if "goal" in plan and not isinstance(plan["goal"], str):
        err("goal", "Must be a string.")
    steps = plan.get("steps")
    if not isinstance(steps, list) or not steps:
        raise PlanError({**errors, "steps": ["Must be a non-empty list."]})
    if len(steps) > MAX_STEPS:
        raise PlanError({"steps": [f"At most {MAX_STEPS} steps."]})

    out = {"goal": plan.get("goal", "") if isinstance(plan.get("goal"), str) else "", "steps": []}
    ids = {}
    for index, step in enumerate(steps):
        where = f"steps.{index}"
        if not isinstance(step, dict):
            err(where, "Must be an object.")
            continue
        for key in sorted(set(step) - _STEP_KEYS):
            err(f"{where}.{key}", "Unknown field.")
        step_id = step.get("id", f"s{index}")
        if not isinstance(step_id, str) or not STEP_ID_RE.match(step_id):
            err(f"{where}.id", "Must match [A-Za-z_][A-Za-z0-9_-]{0,63}.")
        elif step_id in ids:
            err(f"{where}.id", f"Duplicate step id {step_id!r}.")
        else:
            ids[step_id] = index
        for text in ("title", "description"):
            if step.get(text) is not None and not isinstance(step[text], str):
                err(f"{where}.{text}", "Must be a string.")
        tool = step.get("tool")
        if not isinstance(tool, str) or not tool:
            err(f"{where}.tool", "Missing tool name.")
        elif tools is not None and tools.get(tool) is None:
            err(f"{where}.tool", f"Unknown tool {tool!r}.")
        args = step.get("arguments", {})
        if not isinstance(args, dict):
            err(f"{where}.arguments", "Must be an object.")
        retry = step.get("retry")
        if retry is None:
            retry = {}
        elif not isinstance(retry, dict) or set(retry) - {"maxAttempts", "delayMs"}:
            err(f"{where}.retry", "Must be {maxAttempts, delayMs}.")
            retry = {}
        attempts, delay = retry.get("maxAttempts", 1), retry.get("delayMs", 0)
        if not _int_in(attempts, 1, MAX_RETRY_ATTEMPTS):
            err(f"{where}.retry.maxAttempts", f"Must be an integer from 1 to {MAX_RETRY_ATTEMPTS}.")
        if not _int_in(delay, 0, MAX_RETRY_DELAY_MS):
            err(f"{where}.retry.delayMs", f"Must be an integer from 0 to {MAX_RETRY_DELAY_MS}.")
        for flag in ("approval", "retrySafe"):
            if step.get(flag) is not None and not isinstance(step[flag], bool):
                err(f"{where}.{flag}", "Must be a boolean.")
        run_when = step.get("runWhen")
        if run_when is not None:
            if not isinstance(run_when, dict) or set(run_when) - {"ref", "op", "value"} \
                    or not isinstance(run_when.get("ref"), str) or run_when.get("op") not in RUN_WHEN_OPS:
                err(f"{where}.runWhen", f"Must be {{ref, op, value?}} with op one of {', '.join(RUN_WHEN_OPS)}.")
                run_when = None
            elif run_when["op"] in VALUE_OPS and "value" not in run_when:
                err(f"{where}.runWhen.value", "Required for this op.")
            elif run_when["op"] == "in" and not isinstance(run_when.get("value"), list):
                err(f"{where}.runWhen.value", "Must be a list for op in.")
        depends = step.get("dependsOn")
        if depends is None:
            depends = []
        elif not isinstance(depends, list):
            err(f"{where}.dependsOn", "Must be a list of step ids or indexes.")
            depends = []
        out["steps"].append({
            "id": step_id, "index": index,
            "title": step.get("title") if isinstance(step.get("title"), str) and step["title"] else step_id,
            "tool": tool, "arguments": copy.deepcopy(args) if isinstance(args, dict) else {},
            "dependsOn": depends, "runWhen": run_when,
            "retry": {"maxAttempts": attempts, "delayMs": delay},
            "approval": step.get("approval") is True, "retrySafe": step.get("retrySafe"),
        })
    if errors:
        raise PlanError(errors)

    # Dependencies: explicit ones, plus every step a placeholder or runWhen reads from.
    for step in out["steps"]:
        where = f"steps.{step['index']}"
        deps = set()
        for dep in step["dependsOn"]:
            if isinstance(dep, int) and not isinstance(dep, bool):
                target = dep if 0 <= dep < len(out["steps"]) else None
            elif isinstance(dep, str):
                target = ids.get(dep)
            else:
                target = None
            if target is None:
                err(f"{where}.dependsOn", f"Unknown step {_short(dep)}.")
            elif target == step["index"]:
                err(f"{where}.dependsOn", "A step cannot depend on itself.")
            else:
                deps.add(target)
        refs = [(f"{where}.arguments", ref) for ref in placeholders(step["arguments"])]
        if step["runWhen"]:
            refs.append((f"{where}.runWhen.ref", _bare_ref(step["runWhen"]["ref"])))
        for location, ref in refs:
            parsed = parse_ref(ref)
            if parsed is None:
                err(location, f"Malformed placeholder {{{{{ref}}}}}: use inputs.NAME or steps.ID.output[.path].")
            elif parsed[0] == "inputs":
                if input_names is not None and parsed[1] not in input_names:
                    err(location, f"{{{{{ref}}}}} names an undeclared input.")
            elif parsed[1] not in ids:
                err(location, f"{{{{{ref}}}}} names an unknown step.")
            elif ids[parsed[1]] == step["index"]:
                err(location, f"{{{{{ref}}}}} reads the step's own output.")
            else:
                deps.add(ids[parsed[1]])
        step["dependsOn"] = sorted(deps)
        if step["runWhen"]:
            step["runWhen"] = {**step["runWhen"], "ref": _bare_ref(step["runWhen"]["ref"])}
    if errors:
        raise PlanError(errors)
    cycle = find_cycle(out["steps"])
    if cycle:
        path = " -> ".join(out["steps"][i]["id"] for i in cycle)
        raise PlanError({f"steps.{cycle[0]}.dependsOn": [f"Dependency cycle: {path}."]})
    if tools is not None:
        for step in out["steps"]:
            tool = tools.get(step["tool"])
            if tool is not None:
                message = literal_argument_error(tool.parameters, step["arguments"])
                if message:
                    err(f"steps.{step['index']}.arguments", f"Invalid arguments for {tool.name}: {message}")
        if errors:
            raise PlanError(errors)
    return out


def literal_argument_error(schema, arguments):
    """The first schema error of the literal parts of ``arguments``, or None.

    A value that is exactly one placeholder is unknown until run time, so every
    error about it is left for the run; a string with an embedded placeholder
    is still a string (only its content is unknown); an object or array holding
    placeholders keeps the errors about its shape (required keys, unknown keys,
    sizes, type).
    """
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        found = sorted(validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.absolute_path])
    except jsonschema.exceptions.SchemaError:
        return None  # a broken tool schema is the tool's problem, reported when it runs
    except Exception:  # an unresolvable $ref inside the tool's schema: the run reports it
        return None
    for error in found:
        instance = error.instance
        if placeholders(instance):
            if isinstance(instance, str):
                if PLACEHOLDER_RE.fullmatch(instance) or error.validator != "type":
                    continue
            elif error.validator not in _STRUCTURAL_KEYWORDS:
                continue
        where = "/".join(str(p) for p in error.absolute_path) or "arguments"
        return f"{where}: {error.message[:300]}"
    return None


def find_cycle(steps):
    """A list of indexes forming a cycle (first == last), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = [WHITE] * len(steps)

    # Iterative depth-first search: a 256-step chain must not depend on the recursion limit.
    for root in range(len(steps)):
        if colour[root] != WHITE:
            continue
        stack = [(root, iter(steps[root]["dependsOn"]))]
        path = [root]
        colour[root] = GREY
        while stack:
            node, deps = stack[-1]
            dep = next(deps, None)
            if dep is None:
                stack.pop()
                path.pop()
                colour[node] = BLACK
            elif colour[dep] == GREY:
                return path[path.index(dep):] + [dep]
            elif colour[dep] == WHITE:
                colour[dep] = GREY
                stack.append((dep, iter(steps[dep]["dependsOn"])))
                path.append(dep)
    return None


def lookup(value, path):
    """Follow ``path`` (keys or list indexes) into a JSON value; raises KeyError when absent."""
    for part in path:
        if isinstance(value, list) and INDEX_RE.match(part):
            index = int(part)
            if not -len(value) <= index < len(value):
                raise KeyError(part)
            value = value[index]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise KeyError(part)
    return value


def resolve(value, inputs, outputs):
    """Substitute placeholders (KeyError when one has no value).

    A string that is exactly one placeholder takes the referenced value's JSON
    type; a placeholder inside longer text is replaced by the value itself when
    it is a string, else by its JSON text.
    """
    if isinstance(value, dict):
        return {k: resolve(v, inputs, outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, inputs, outputs) for v in value]
    if not isinstance(value, str):
        return value
    whole = PLACEHOLDER_RE.fullmatch(value)
    if whole:
        return copy.deepcopy(_ref_value(whole.group(1), inputs, outputs))

    def text(match):
        found = _ref_value(match.group(1), inputs, outputs)
        return found if isinstance(found, str) else json.dumps(found)

    return PLACEHOLDER_RE.sub(text, value)


def _ref_value(ref, inputs, outputs):
    parsed = parse_ref(ref)
    if parsed is None:
        raise KeyError(f"{{{{{ref}}}}} is not a placeholder")
    kind, name, path = parsed
    source = inputs if kind == "inputs" else outputs
    try:
        return lookup(source[name], path)
    except (KeyError, IndexError, TypeError):
        raise KeyError(f"{{{{{ref}}}}} has no value") from None


def condition_holds(run_when, inputs, outputs):
    """Whether a step's ``runWhen`` fires. A reference without a value counts as null.

    Comparisons follow JSON, not Python: ``true`` never equals ``1``, and
    ``gt``/``lt`` only compare two numbers or two strings (anything else is false).
    """
    if not run_when:
        return True
    try:
        actual = _ref_value(_bare_ref(run_when["ref"]), inputs, outputs)
    except KeyError:
        actual = None
    op, expected = run_when["op"], run_when.get("value")
    if op == "eq":
        return json_equal(actual, expected)
    if op == "ne":
        return not json_equal(actual, expected)
    if op in ("gt", "lt"):
        if not (_is_number(actual) and _is_number(expected)
                or isinstance(actual, str) and isinstance(expected, str)):
            return False
        return actual > expected if op == "gt" else actual < expected
    if op == "in":
        return isinstance(expected, list) and any(json_equal(actual, item) for item in expected)
    if op == "truthy":
        return bool(actual)
    return not actual


def json_equal(a, b):
    """Equality of JSON values: numbers by value (1 == 1.0), booleans never equal to numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return a == b


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bare_ref(ref):
    """``runWhen.ref`` may be written with or without the ``{{ }}`` of a placeholder."""
    whole = PLACEHOLDER_RE.fullmatch(ref.strip())
    return whole.group(1) if whole else ref.strip()


def _short(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int_in(value, low, high):
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
