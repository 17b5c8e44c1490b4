"""AgentPlan: validation, placeholders, and the dependency graph shared by workflows and the agent."""
import copy
import json
import re

MAX_STEPS = 256
MAX_PLAN_BYTES = 512 * 1024
MAX_RETRY_ATTEMPTS = 10
MAX_RETRY_DELAY_MS = 600_000
RUN_WHEN_OPS = ("eq", "ne", "gt", "lt", "in", "truthy", "falsy")
STEP_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}\Z")
PLACEHOLDER_RE = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
_STEP_KEYS = {"id", "title", "tool", "arguments", "dependsOn", "runWhen", "retry", "approval", "retrySafe",
              "description"}


class PlanError(ValueError):
    """The plan is invalid; ``errors`` maps a location (``steps.2.tool``) to messages."""

    def __init__(self, errors):
        self.errors = errors
        first = next(iter(errors.items()))
        super().__init__(f"{first[0]}: {first[1][0]}")


def parse_ref(text):
    """``inputs.NAME`` or ``steps.ID.output[.path...]`` -> ("inputs", NAME, []) / ("steps", ID, path)."""
    parts = text.strip().split(".")
    if len(parts) >= 2 and parts[0] == "inputs" and parts[1]:
        return "inputs", parts[1], parts[2:]
    if len(parts) >= 3 and parts[0] == "steps" and parts[2] == "output":
        return "steps", parts[1], parts[3:]
    return None


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

    ``tools`` is a catalog (``get(name)``) to check tool names and argument types
    where arguments hold no placeholders; ``input_names`` the declared inputs
    (None: any input is accepted, as in an ad-hoc agent run).
    """
    errors = {}

    def err(where, message):
        errors.setdefault(where, []).append(message)

    if not isinstance(plan, dict):
        raise PlanError({"plan": ["Must be an object with a steps list."]})
    try:
        size = len(json.dumps(plan))
    except (TypeError, ValueError):
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

    out = {"goal": plan.get("goal", ""), "steps": []}
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
        tool = step.get("tool")
        if not isinstance(tool, str) or not tool:
            err(f"{where}.tool", "Missing tool name.")
        elif tools is not None and tools.get(tool) is None:
            err(f"{where}.tool", f"Unknown tool {tool!r}.")
        args = step.get("arguments", {})
        if not isinstance(args, dict):
            err(f"{where}.arguments", "Must be an object.")
        retry = step.get("retry") or {}
        if not isinstance(retry, dict) or set(retry) - {"maxAttempts", "delayMs"}:
            err(f"{where}.retry", "Must be {maxAttempts, delayMs}.")
            retry = {}
        attempts, delay = retry.get("maxAttempts", 1), retry.get("delayMs", 0)
        if not _int_in(attempts, 1, MAX_RETRY_ATTEMPTS):
            err(f"{where}.retry.maxAttempts", f"Must be an integer from 1 to {MAX_RETRY_ATTEMPTS}.")
        if not _int_in(delay, 0, MAX_RETRY_DELAY_MS):
            err(f"{where}.retry.delayMs", f"Must be an integer from 0 to {MAX_RETRY_DELAY_MS}.")
        for flag in ("approval", "retrySafe"):
            if flag in step and not isinstance(step[flag], bool):
                err(f"{where}.{flag}", "Must be a boolean.")
        run_when = step.get("runWhen")
        if run_when is not None:
            if not isinstance(run_when, dict) or set(run_when) - {"ref", "op", "value"} \
                    or not isinstance(run_when.get("ref"), str) or run_when.get("op") not in RUN_WHEN_OPS:
                err(f"{where}.runWhen", f"Must be {{ref, op, value?}} with op one of {', '.join(RUN_WHEN_OPS)}.")
                run_when = None
            elif run_when["op"] in ("eq", "ne", "gt", "lt", "in") and "value" not in run_when:
                err(f"{where}.runWhen.value", "Required for this op.")
            elif run_when["op"] == "in" and not isinstance(run_when.get("value"), list):
                err(f"{where}.runWhen.value", "Must be a list for op in.")
        depends = step.get("dependsOn", [])
        if not isinstance(depends, list):
            err(f"{where}.dependsOn", "Must be a list of step ids or indexes.")
            depends = []
        out["steps"].append({
            "id": step_id, "index": index, "title": step.get("title") or step_id,
            "tool": tool, "arguments": copy.deepcopy(args) if isinstance(args, dict) else {},
            "dependsOn": depends, "runWhen": run_when,
            "retry": {"maxAttempts": attempts, "delayMs": delay},
            "approval": bool(step.get("approval", False)), "retrySafe": step.get("retrySafe"),
        })
    if errors:
        raise PlanError(errors)

    # Dependencies: explicit ones, plus every step a placeholder or runWhen reads from.
    for step in out["steps"]:
        where = f"steps.{step['index']}"
        deps = set()
        for dep in step["dependsOn"]:
            if isinstance(dep, bool):
                target = None
            elif isinstance(dep, int):
                target = dep if 0 <= dep < len(out["steps"]) else None
            else:
                target = ids.get(dep)
            if target is None:
                err(f"{where}.dependsOn", f"Unknown step {dep!r}.")
            elif target == step["index"]:
                err(f"{where}.dependsOn", "A step cannot depend on itself.")
            else:
                deps.add(target)
        refs = placeholders(step["arguments"])
        if step["runWhen"]:
            refs.append(step["runWhen"]["ref"])
        for ref in refs:
            parsed = parse_ref(ref)
            if parsed is None:
                err(f"{where}.arguments", f"Unknown placeholder {{{{{ref}}}}}.")
            elif parsed[0] == "inputs":
                if input_names is not None and parsed[1] not in input_names:
                    err(f"{where}.arguments", f"{{{{{ref}}}}} names an undeclared input.")
            elif parsed[1] not in ids:
                err(f"{where}.arguments", f"{{{{{ref}}}}} names an unknown step.")
            elif ids[parsed[1]] == step["index"]:
                err(f"{where}.arguments", f"{{{{{ref}}}}} reads the step's own output.")
            else:
                deps.add(ids[parsed[1]])
        step["dependsOn"] = sorted(deps)
    if errors:
        raise PlanError(errors)
    cycle = find_cycle(out["steps"])
    if cycle:
        raise PlanError({"steps": ["Dependency cycle: " + " -> ".join(out["steps"][i]["id"] for i in cycle)]})
    if tools is not None:
        for step in out["steps"]:
            tool = tools.get(step["tool"])
            if tool is not None and not placeholders(step["arguments"]):
                try:
                    tool.validate(step["arguments"])
                except Exception as exc:  # ToolError: the message says which argument
                    err(f"steps.{step['index']}.arguments", str(exc))
        if errors:
            raise PlanError(errors)
    return out


def find_cycle(steps):
    """A list of indexes forming a cycle, or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = [WHITE] * len(steps)
    stack = []

    def visit(i):
        colour[i] = GREY
        stack.append(i)
        for dep in steps[i]["dependsOn"]:
            if colour[dep] == GREY:
                return stack[stack.index(dep):] + [dep]
            if colour[dep] == WHITE:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        colour[i] = BLACK
        return None

    for i in range(len(steps)):
        if colour[i] == WHITE:
            found = visit(i)
            if found:
                return found
    return None


def lookup(value, path):
    """Follow ``path`` (keys or list indexes) into a JSON value; raises KeyError when absent."""
    for part in path:
        if isinstance(value, list) and part.lstrip("-").isdigit():
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise KeyError(part)
    return value


def resolve(value, inputs, outputs):
    """Substitute placeholders. A string that is exactly one placeholder takes the value's JSON type."""
    if isinstance(value, dict):
        return {k: resolve(v, inputs, outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, inputs, outputs) for v in value]
    if not isinstance(value, str):
        return value
    whole = PLACEHOLDER_RE.fullmatch(value.strip())
    if whole:
        return _ref_value(whole.group(1), inputs, outputs)

    def text(match):
        found = _ref_value(match.group(1), inputs, outputs)
        return found if isinstance(found, str) else json.dumps(found)

    return PLACEHOLDER_RE.sub(text, value)


def _ref_value(ref, inputs, outputs):
    kind, name, path = parse_ref(ref)
    source = inputs if kind == "inputs" else outputs
    try:
        return lookup(source[name], path)
    except (KeyError, IndexError, TypeError):
        raise KeyError(f"{{{{{ref}}}}} has no value") from None


def condition_holds(run_when, inputs, outputs):
    if not run_when:
        return True
    try:
        actual = _ref_value(run_when["ref"], inputs, outputs)
    except KeyError:
        actual = None
    op, expected = run_when["op"], run_when.get("value")
    try:
        if op == "eq":
            return actual == expected
        if op == "ne":
            return actual != expected
        if op == "gt":
            return actual > expected
        if op == "lt":
            return actual < expected
        if op == "in":
            return actual in expected
        if op == "truthy":
            return bool(actual)
        return not actual
    except TypeError:
        return False


def _int_in(value, low, high):
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
