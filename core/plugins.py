"""The plugin manager: builtin plugins, entry-point extensions, and which are disabled."""
import importlib
import json
import logging
import os
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

import pluggy

import hookspecs

log = logging.getLogger("agenthost.plugins")

ENTRY_POINT_GROUP = "agenthost"
STATE_FILE = "plugins.json"

# Every feature area, in mount order. Each is builtin_plugins.<name>.plugin.
BUILTIN_PLUGINS = (
    "setup",
    "settings",
    "plugin_categories",
    "notifications",
    "tools",
)

# Disabling these would leave no way back into a working host.
REQUIRED_PLUGINS = ("setup",)


@dataclass
class PluginRecord:
    name: str
    kind: str  # "builtin" | "extension"
    version: str | None = None
    enabled: bool = True
    hooks: list = field(default_factory=list)
    error: str | None = None

    def as_dict(self):
        return {"name": self.name, "kind": self.kind, "version": self.version,
                "enabled": self.enabled, "hooks": self.hooks, "error": self.error}


def read_disabled(data_dir):
    path = Path(data_dir) / STATE_FILE
    try:
        return set(json.loads(path.read_text(encoding="utf-8")).get("disabled", []))
    except (OSError, ValueError, AttributeError):
        return set()


def write_disabled(data_dir, disabled):
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = data_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps({"disabled": sorted(disabled)}, indent=2), encoding="utf-8")
    os.replace(tmp, data_dir / STATE_FILE)


def _version():
    try:
        from importlib.metadata import version
        return version("agenthost")
    except Exception:  # running from a source tree without metadata
        return None


def _hooks_of(module_or_obj):
    names = []
    for attr in dir(module_or_obj):
        fn = getattr(module_or_obj, attr, None)
        if callable(fn) and hasattr(fn, "agenthost_impl"):
            names.append(attr)
    return sorted(names)


class PluginSet:
    """A pluggy manager plus the record of every plugin it was asked to load."""

    def __init__(self, data_dir, plugins=(), *, load_entry_points=True, builtins=BUILTIN_PLUGINS):
        self.pm = pluggy.PluginManager("agenthost")
        self.pm.add_hookspecs(hookspecs)
        self.records = {}
        self.builtin_names = set()
        disabled = read_disabled(data_dir)
        builtin_version = _version()

        for name in builtins:
            record = PluginRecord(name, "builtin", builtin_version, name not in disabled)
            self.records[name] = record
            try:
                module = importlib.import_module(f"builtin_plugins.{name}.plugin")
                record.hooks = _hooks_of(module)
                if record.enabled:
                    self.pm.register(module, name=name)
                    self.builtin_names.add(name)
            except Exception as exc:
                self._fail(record, exc)

        if load_entry_points:
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                version = ep.dist.version if ep.dist else None
                record = PluginRecord(ep.name, "extension", version, ep.name not in disabled)
                if ep.name in self.records:
                    record.error = "name clashes with an already loaded plugin"
                    self.records[f"{ep.name} ({ep.value})"] = record
                    continue
                self.records[ep.name] = record
                try:
                    module = ep.load()
                    record.hooks = _hooks_of(module)
                    if record.enabled:
                        self.pm.register(module, name=ep.name)
                except Exception as exc:
                    self._fail(record, exc)

        for plugin in plugins:
            name = getattr(plugin, "__name__", None) or type(plugin).__name__
            record = PluginRecord(name, "extension", None, name not in disabled)
            self.records[name] = record
            try:
                record.hooks = _hooks_of(plugin)
                if record.enabled:
                    self.pm.register(plugin, name=name)
            except Exception as exc:
                self._fail(record, exc)

        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            # A hook implementation without a spec: drop that plugin, keep the rest.
            name = self.pm.get_name(exc.plugin) if exc.plugin else None
            if name:
                self.pm.unregister(name=name)
                self._fail(self.records[name], exc)

    def _fail(self, record, exc):
        record.error = f"{type(exc).__name__}: {exc}"
        log.error("plugin %s failed to load: %s", record.name, record.error)
        if self.pm.has_plugin(record.name):
            self.pm.unregister(name=record.name)

    def fail(self, name, exc):
        """Record a failure found later (a bad registration) and drop the plugin."""
        if name in self.records:
            self._fail(self.records[name], exc)

    def is_builtin(self, name):
        return name in self.builtin_names

    def call_each(self, hook_name, *, registry=False, **kwargs):
        """Call a hook implementation by implementation, isolating failures.

        Yields ``(plugin_name, result)``; an implementation that raises is logged
        (and yields nothing) while the others still run. For a ``registry`` hook
        (``register_*``) the failing plugin is also recorded as failed and dropped.
        """
        caller = getattr(self.pm.hook, hook_name)
        for impl in reversed(caller.get_hookimpls()):  # registration order
            name = impl.plugin_name
            if not self.pm.has_plugin(name):
                continue  # dropped by an earlier failure in this pass
            try:
                result = impl.function(*[kwargs[arg] for arg in impl.argnames])
            except Exception as exc:
                log.exception("plugin %s failed in hook %s", name, hook_name)
                if registry:
                    self.fail(name, exc)
                continue
            yield name, result

    def notify(self, hook_name, **kwargs):
        """Fire an event hook; failures are logged and do not stop the others."""
        for _ in self.call_each(hook_name, **kwargs):
            pass

    def list(self):
        return [r.as_dict() for r in self.records.values()]
