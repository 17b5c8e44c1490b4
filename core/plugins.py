"""The plugin manager: builtin plugins, entry-point extensions, and which are disabled."""
import importlib
import inspect
import json
import logging
import os
import re
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

import pluggy

import hookspecs

log = logging.getLogger("agenthost.plugins")

PROJECT = "agenthost"
ENTRY_POINT_GROUP = "agenthost"
STATE_FILE = "plugins.json"

# Every feature area, in mount order. Each is builtin_plugins.<name>.plugin.
BUILTIN_PLUGINS = (
    "setup",
    "settings",
    "plugin_categories",
    "notifications",
    "tools",
    "runtime_plugins",
    "agent",
    "workflows",
    "tasks",
    "schedules",
    "webhooks",
    "mcp",
)

# Disabling these would leave no way back into a working host.
REQUIRED_PLUGINS = ("setup",)

# Stopping runs backwards: a plugin shuts down before the plugins that started before it.
REVERSED_HOOKS = frozenset({"shutdown"})

# A plugin name becomes a URL segment (/api/ext/<name>/) and part of blueprint names.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")


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
        names = json.loads(path.read_text(encoding="utf-8")).get("disabled", [])
    except (OSError, ValueError, AttributeError):
        return set()
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


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


def _impls_of(plugin):
    """``{hook name: hookimpl options}`` of a module or object, found as pluggy finds them."""
    impls = {}
    for attr in dir(plugin):
        try:
            fn = getattr(plugin, attr)
        except Exception:
            continue
        if not inspect.isroutine(fn):
            continue
        opts = getattr(fn, PROJECT + "_impl", None)
        if isinstance(opts, dict):
            impls[opts.get("specname") or attr] = opts
    return impls


class PluginSet:
    """A pluggy manager plus the record of every plugin it was asked to load.

    One per app (never global). Loading never raises: a plugin that cannot be
    imported, has a bad name, clashes with another plugin's name or implements
    a hook that has no specification is recorded with its error and left out.
    """

    def __init__(self, data_dir, plugins=(), *, load_entry_points=True, builtins=BUILTIN_PLUGINS):
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.records = {}
        self.builtin_names = set()
        # A required plugin listed in a hand-edited state file stays enabled.
        disabled = read_disabled(data_dir) - set(REQUIRED_PLUGINS)
        builtin_version = _version()

        for name in builtins:
            record = self._new_record(name, "builtin", builtin_version, name not in disabled)
            if record is None:
                continue
            try:
                module = importlib.import_module(f"builtin_plugins.{name}.plugin")
            except Exception as exc:
                self._fail(record, exc)
                continue
            if self._register(record, module):
                self.builtin_names.add(name)

        if load_entry_points:
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                version = ep.dist.version if ep.dist else None
                record = self._new_record(ep.name, "extension", version, ep.name not in disabled,
                                          origin=ep.value)
                if record is None or not record.enabled:
                    # A disabled extension is not even imported: disabling is the way
                    # out when its import itself is what breaks.
                    continue
                try:
                    module = ep.load()
                except Exception as exc:
                    self._fail(record, exc)
                    continue
                self._register(record, module)

        for plugin in plugins:
            name = getattr(plugin, "__name__", None) or type(plugin).__name__
            origin = plugin.__name__ if inspect.ismodule(plugin) else type(plugin).__name__
            record = self._new_record(name, "extension", getattr(plugin, "__version__", None),
                                      name not in disabled, origin=origin)
            if record is not None:
                self._register(record, plugin)

        # Our own checks refuse unspecified hooks plugin by plugin; this is the
        # backstop pluggy offers, kept so nothing unchecked slips through.
        while True:
            try:
                self.pm.check_pending()
                break
            except pluggy.PluginValidationError as exc:
                name = self.pm.get_name(exc.plugin) if exc.plugin is not None else None
                if not name or name not in self.records:
                    raise
                self._fail(self.records[name], exc)

    def _new_record(self, name, kind, version, enabled, origin=None):
        """A record for ``name``, or None when the name cannot be used (recorded as an error)."""
        record = PluginRecord(name, kind, version, enabled)
        problem = None
        if not isinstance(name, str) or not NAME_RE.match(name):
            problem = ("invalid plugin name: use 1-64 of A-Z a-z 0-9 _ - "
                       "(starting with a letter or digit)")
        elif name in self.records:
            problem = f"name clashes with the {self.records[name].kind} plugin {name!r}; not loaded"
        if problem is None:
            self.records[name] = record
            return record
        # Keep the refused plugin visible without touching the record it clashed with.
        key = base = f"{name} ({origin})" if origin else f"{name} (refused)"
        n = 1
        while key in self.records:
            n += 1
            key = f"{base} #{n}"
        record.name, record.enabled, record.error = key, False, problem
        self.records[key] = record
        log.error("plugin %s refused: %s", key, problem)
        return None

    def _register(self, record, plugin):
        """Check and register one plugin; True when it is registered."""
        impls = _impls_of(plugin)
        record.hooks = sorted(impls)
        if not record.enabled:
            return False
        unknown = sorted(h for h, opts in impls.items()
                         if not opts.get("optionalhook") and not self._has_spec(h))
        wrappers = sorted(h for h, opts in impls.items()
                          if opts.get("hookwrapper") or opts.get("wrapper"))
        if unknown:
            self._fail(record, f"hook implementation without a specification: {', '.join(unknown)}")
            return False
        if wrappers:
            self._fail(record, "hook wrappers are not supported (hooks are called implementation "
                               f"by implementation): {', '.join(wrappers)}")
            return False
        if self.pm.is_registered(plugin):
            other = self.pm.get_name(plugin)
            self._fail(record, f"the same plugin object is already registered as {other!r}")
            return False
        try:
            self.pm.register(plugin, name=record.name)
        except Exception as exc:  # a signature that does not match its spec, for one
            self._fail(record, exc)
            return False
        return True

    def _has_spec(self, hook_name):
        caller = getattr(self.pm.hook, hook_name, None)
        return caller is not None and caller.has_spec()

    def _fail(self, record, exc):
        if not isinstance(exc, str):
            # One line per error: pluggy's validation messages span several.
            text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            exc = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        record.error = exc
        log.error("plugin %s failed to load: %s", record.name, record.error)
        if self.pm.get_plugin(record.name) is not None:
            self.pm.unregister(name=record.name)
        self.builtin_names.discard(record.name)

    def fail(self, name, exc):
        """Record a failure found later (a bad registration) and drop the plugin."""
        if name in self.records:
            self._fail(self.records[name], exc)

    def is_builtin(self, name):
        return name in self.builtin_names

    def is_active(self, name):
        """Registered and not dropped by a failure."""
        return self.pm.get_plugin(name) is not None

    def hookimpls(self, hook_name):
        """Implementations of a hook in call order.

        Registration order (tryfirst ones first, trylast ones last), so builtin
        plugins come before extensions and the first plugin to claim a name
        keeps it; reversed for the hooks in REVERSED_HOOKS.
        """
        impls = [i for i in getattr(self.pm.hook, hook_name).get_hookimpls()
                 if not (i.hookwrapper or i.wrapper)]
        # pluggy keeps trylast impls at the front in reverse order, then the rest in
        # registration order, tryfirst ones at the end; pluggy itself calls them LIFO.
        first = [i for i in impls if i.tryfirst]
        last = [i for i in impls if i.trylast][::-1]
        middle = [i for i in impls if not i.tryfirst and not i.trylast]
        ordered = first + middle + last
        return ordered[::-1] if hook_name in REVERSED_HOOKS else ordered

    def call_each(self, hook_name, *, registry=False, **kwargs):
        """Call a hook implementation by implementation, isolating failures.

        Yields ``(plugin_name, result)`` in the order of ``hookimpls``. An
        implementation that raises is logged (and yields nothing) while the others
        still run. For a ``registry`` hook (``register_*``) the failing plugin is
        also recorded as failed and dropped.
        """
        for impl in self.hookimpls(hook_name):
            name = impl.plugin_name
            if not self.is_active(name):
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
