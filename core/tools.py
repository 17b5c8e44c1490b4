"""The live tool catalog: builtin tools, extensions, runtime plugins, MCP servers and workflows."""
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import jsonschema

# Names must also be valid function names for the AI chat's model APIs.
NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ToolError(Exception):
    """A tool failed in a way the caller should see (message is shown to the user)."""


@dataclass
class ToolContext:
    """What a tool handler may know about its call."""

    host: Any = None
    owner: str = "local"
    run_id: str | None = None
    step_id: str | None = None
    cancelled: Any = None  # an object with is_set(); gevent.event.Event in practice
    file_refs: list = field(default_factory=list)


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict
    handler: Callable[[dict, ToolContext], Any]
    retry_safe: bool = False
    source: str = "builtin"

    def __post_init__(self):
        if not isinstance(self.name, str) or not NAME_RE.fullmatch(self.name):
            raise ValueError(f"invalid tool name {self.name!r}: use 1-64 of A-Z a-z 0-9 _ -")
        if not isinstance(self.description, str):
            raise ValueError(f"tool {self.name}: description must be a string")
        if not callable(self.handler):
            raise ValueError(f"tool {self.name}: handler must be callable")
        if not isinstance(self.parameters, dict):
            raise ValueError(f"tool {self.name}: parameters must be a JSON Schema object (a dict)")
        kind = self.parameters.get("type")
        if kind is None:
            # Arguments are always an object; saying so keeps model APIs and validation in step.
            self.parameters = {"type": "object", **self.parameters}
        elif kind != "object":
            raise ValueError(f"tool {self.name}: parameters must be a JSON Schema of type object, "
                             f"not {kind!r}")
        cls = jsonschema.validators.validator_for(self.parameters)
        try:
            cls.check_schema(self.parameters)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"tool {self.name}: parameters is not a valid JSON Schema: "
                             f"{exc.message}") from None
        self._validator = cls(self.parameters)

    def describe(self):
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "source": self.source,
            "retrySafe": bool(self.retry_safe),
        }

    def validate(self, arguments):
        """Raise ToolError when the arguments fail the tool's schema."""
        if self._validator.schema is not self.parameters:  # parameters were replaced after creation
            self._validator = jsonschema.validators.validator_for(self.parameters)(self.parameters)
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.path])
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.path) or "arguments"
            raise ToolError(f"invalid arguments for {self.name}: {where}: {first.message}")


class ToolCatalog:
    """Name -> Tool, changed at runtime by whoever owns the tools."""

    def __init__(self):
        self._tools = {}
        self._lock = threading.Lock()
        self.listeners = []  # callables(event, name): "added" / "removed"
        # Counts changes: what was checked against the catalog at one generation (a plan)
        # still holds while the generation is the same.
        self.generation = 0

    def add(self, tool):
        with self._lock:
            if tool.name in self._tools:
                raise ValueError(f"tool name {tool.name!r} is already registered")
            self._tools[tool.name] = tool
            self.generation += 1
        self._notify("added", tool.name)

    def remove(self, name):
        with self._lock:
            removed = self._tools.pop(name, None)
            if removed is not None:
                self.generation += 1
        if removed is not None:
            self._notify("removed", name)
        return removed is not None

    def remove_source(self, source):
        """Remove every tool of one source (a plugin, a server); returns their names."""
        with self._lock:
            names = [n for n, t in self._tools.items() if t.source == source]
        for name in names:
            self.remove(name)
        return names

    def get(self, name):
        with self._lock:
            return self._tools.get(name)

    def list(self):
        with self._lock:
            return sorted(self._tools.values(), key=lambda t: t.name)

    def call(self, name, arguments, ctx=None):
        tool = self.get(name)
        if tool is None:
            raise ToolError(f"unknown tool {name!r}")
        tool.validate(arguments)
        return tool.handler(arguments, ctx or ToolContext())

    def _notify(self, event, name):
        for listener in list(self.listeners):
            listener(event, name)
