"""Runtime plugins logic: install lifecycle behind the update gate, and the supervisor's front."""
import json
import logging
import os
import secrets
import shutil
from pathlib import Path

from gevent.lock import RLock
from sqlalchemy import select

from core.db import isoformat, utcnow
from core.errors import ApiError, NotFound
from core.supervisor import PluginUnavailable, WorkerSupervisor
from core.workers import (CallCancelled, CallIdInUse, LogRing, RuntimeSpec, Worker, WorkerCallError,
                          WorkerFault, command_for, worker_env)

from . import package as pkg
from .models import InstalledPlugin

log = logging.getLogger("agenthost.runtime_plugins")


class RuntimePlugins:
    """Installed runtime plugins and their workers. One per host (``host.service("runtime_plugins")``)."""

    def __init__(self, host):
        self.host = host
        cfg = host.config
        root = Path(host.data_dir) / "plugins"
        self.installed_root = root / "installed"
        self.staging_root = root / "staging"
        self.data_root = Path(host.data_dir) / "plugin-data"
        self.cache_root = root / "cache"
        for folder in (self.installed_root, self.staging_root, self.data_root, self.cache_root):
            folder.mkdir(parents=True, exist_ok=True)
        self._recover()
        self.health_timeout = float(cfg.get("plugins.health-timeout-seconds", 10))
        self.supervisor = WorkerSupervisor(
            host,
            handshake_timeout=float(cfg.get("plugins.handshake-timeout-seconds", 10)),
            call_timeout=float(cfg.get("plugins.call-timeout-seconds", 30)),
            backoff_base=float(cfg.get("plugins.backoff-base-seconds", 0.5)),
            backoff_cap=float(cfg.get("plugins.backoff-cap-seconds", 30)),
            crash_limit=int(cfg.get("plugins.crash-limit", 3)),
            crash_window=float(cfg.get("plugins.crash-window-seconds", 300)),
            on_tools=self._cache_tools,
        )
        self.gate = RLock()  # the runtime update gate: one install/uninstall at a time
        self.updating = set()  # plugin ids whose worker is down for an update right now

    def _recover(self):
        """Finish what a host that died inside the update gate left behind.

        A commit renames the live folder to ``.old-<id>-<hex>`` before moving the staged
        one in; when only the ``.old`` folder survived, it is the installed version.
        """
        for leftover in self.staging_root.iterdir():
            shutil.rmtree(leftover, ignore_errors=True)
        for old in sorted(self.installed_root.glob(".old-*")):
            plugin_id = old.name[len(".old-"):].rsplit("-", 1)[0]
            current = self.install_dir(plugin_id)
            if not current.exists():
                os.rename(old, current)
                log.warning("restored %s from an interrupted update", plugin_id)
            else:
                shutil.rmtree(old, ignore_errors=True)

    # -- specs ---------------------------------------------------------------------------

    def install_dir(self, plugin_id):
        return self.installed_root / plugin_id

    def spec_for(self, manifest, install_dir=None):
        return RuntimeSpec(
            id=manifest["id"], name=manifest["name"], version=manifest["version"],
            runtime=manifest["runtime"], main=manifest.get("main"),
            install_dir=str(install_dir or self.install_dir(manifest["id"])),
            data_dir=str(self.data_root / manifest["id"]),
            command=manifest.get("command"), permissions=list(manifest.get("permissions") or []))

    def load_installed(self):
        """At start: every enabled plugin is tracked (workers spawn lazily) with its cached tools."""
        with self.host.db.session() as s:
            rows = s.execute(select(InstalledPlugin)).scalars().all()
        for row in rows:
            if row.enabled and self.install_dir(row.id).is_dir():
                manifest = json.loads(row.manifest)
                self.supervisor.add(self.spec_for(manifest), tools=self._cached_tools(row.id))

    def _cache_tools(self, spec, tools):
        if Path(spec.install_dir) == self.install_dir(spec.id):
            (self.cache_root / f"{spec.id}.tools.json").write_text(json.dumps(tools), encoding="utf-8")

    def _cached_tools(self, plugin_id):
        try:
            return json.loads((self.cache_root / f"{plugin_id}.tools.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    # -- reading -------------------------------------------------------------------------

    def _row(self, session, plugin_id):
        row = session.get(InstalledPlugin, plugin_id)
        if row is None:
            raise NotFound("plugin")
        return row

    def descriptor(self, row):
        manifest = json.loads(row.manifest)
        ui = manifest.get("ui")
        return {
            "id": row.id, "name": row.name, "version": row.version,
            "description": manifest.get("description", ""), "runtime": manifest["runtime"],
            "permissions": manifest.get("permissions", []), "category": manifest.get("category", "other"),
            "enabled": bool(row.enabled),
            "ui": {"entry": ui["entry"], "url": f"/plugin-runtime/{row.id}/{ui['entry']}"} if ui else None,
            "installedAt": isoformat(row.installed_at), "updatedAt": isoformat(row.updated_at),
        }

    def list(self, enabled_only=False):
        with self.host.db.session() as s:
            query = select(InstalledPlugin).order_by(InstalledPlugin.id)
            if enabled_only:
                query = query.where(InstalledPlugin.enabled.is_(True))
            return [self.descriptor(r) for r in s.execute(query).scalars()]

    def get(self, plugin_id):
        with self.host.db.session() as s:
            return self.descriptor(self._row(s, plugin_id))

    def manifest(self, plugin_id):
        with self.host.db.session() as s:
            return json.loads(self._row(s, plugin_id).manifest)

    def status(self, plugin_id):
        descriptor = self.get(plugin_id)
        return self.supervisor.status(plugin_id) or self._idle_status(descriptor)

    def statuses(self):
        return [self.supervisor.status(d["id"]) or self._idle_status(d) for d in self.list()]

    @staticmethod
    def _idle_status(descriptor):
        return {"pluginId": descriptor["id"], "state": "disabled" if not descriptor["enabled"] else "stopped",
                "fault": None, "runtime": descriptor["runtime"], "pid": None, "restarts": 0,
                "backoff": {"active": False, "remainingMs": 0, "lastDelayMs": 0},
                "sandbox": {"isolation": "process", "filesystem": "unrestricted", "network": "unrestricted"},
                "tools": []}

    # -- packages ------------------------------------------------------------------------

    def inspect(self, data, sha256=None):
        package = self._read(data, sha256)
        return self._inspection(package)

    def _read(self, data, sha256):
        try:
            return pkg.read(data, sha256)
        except pkg.PackageError as exc:
            raise _invalid(exc) from None

    def _inspection(self, package):
        m = package.manifest
        with self.host.db.session() as s:
            row = s.get(InstalledPlugin, m["id"])
            installed = row.version if row else None
            old_permissions = json.loads(row.manifest).get("permissions", []) if row else []
        return {
            "id": m["id"], "name": m["name"], "version": m["version"],
            "description": m.get("description", ""), "runtime": m["runtime"],
            "permissions": m.get("permissions", []),
            "addedPermissions": sorted(set(m.get("permissions", [])) - set(old_permissions)),
            "category": m.get("category", "other"),
            "action": "update" if installed else "install",
            "installedVersion": installed,
            "versionStep": pkg.version_step(installed, m["version"]),
            "sha256": package.sha256,
        }

    def install(self, data, sha256=None, confirm_permissions=False):
        """Install or update behind the gate: stop, stage, health-check, then commit or roll back."""
        package = self._read(data, sha256)
        inspection = self._inspection(package)
        if inspection["permissions"] and not confirm_permissions:
            raise ApiError(400, "permissions_not_confirmed",
                           "The package asks for permissions; confirm them with confirmPermissions=true.",
                           permissions=inspection["permissions"],
                           errors={"confirmPermissions": ["Must be true: the package asks for "
                                                          + ", ".join(inspection["permissions"]) + "."]})
        plugin_id = package.id
        with self.gate:
            staging = self.staging_root / f"{plugin_id}-{secrets.token_hex(6)}"
            current = self.install_dir(plugin_id)
            previous = self.supervisor.get(plugin_id)
            was_tracked = previous is not None
            self.updating.add(plugin_id)
            try:
                self.supervisor.remove(plugin_id)  # stop the old worker; its tools leave for now
                try:
                    try:
                        pkg.extract(package, staging)
                    except pkg.PackageError as exc:
                        raise _invalid(exc) from None
                    tools = self._health_check(self.spec_for(package.manifest, staging))
                    self._commit(package, staging, current, tools)
                except Exception:
                    shutil.rmtree(staging, ignore_errors=True)
                    if was_tracked:  # the previous version keeps working
                        self.supervisor.add(previous.spec, tools=self._cached_tools(plugin_id))
                    raise
                enabled = self._enabled(plugin_id)
                if enabled:
                    self.supervisor.add(self.spec_for(package.manifest), tools=tools)
            finally:
                self.updating.discard(plugin_id)
        return {**inspection, "installed": True, "enabled": enabled}

    def _health_check(self, spec):
        """initialize + ping within the time limit, from the staging folder; returns its tools/list."""
        try:
            argv = command_for(spec)
        except WorkerFault as fault:
            raise ApiError(422, "health_check_failed", fault.message, faultCategory=fault.category) from None
        os.makedirs(spec.data_dir, exist_ok=True)
        ring = LogRing(spec.id + ":health", self.host.events, 100)
        worker = Worker(spec, argv, env=worker_env(spec), on_request=lambda w, m, p: {},
                        on_log=ring, on_exit=lambda w, f: None)
        try:
            worker.start(self.health_timeout)
            worker.request("ping", {}, timeout=self.health_timeout)
            if worker.capabilities.get("tools") is None:
                return None
            # The catalog shows an installed plugin's tools before its first spawn.
            try:
                listed = worker.request("tools/list", {}, timeout=self.health_timeout)
            except WorkerCallError:
                return None
            tools = listed.get("tools") if isinstance(listed, dict) else None
            return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else None
        except (WorkerFault, WorkerCallError) as exc:
            category = getattr(exc, "category", "handshake")
            raise ApiError(422, "health_check_failed", f"the new version failed its health check: {exc}",
                           faultCategory=category) from None
        finally:
            worker.stopping = True
            worker.stop()

    def _commit(self, package, staging, current, tools=None):
        m = package.manifest
        old = None
        if current.exists():
            old = self.installed_root / f".old-{m['id']}-{secrets.token_hex(6)}"
            os.rename(current, old)
        os.rename(staging, current)
        try:
            now = utcnow()
            with self.host.db.session() as s:
                row = s.get(InstalledPlugin, m["id"])
                if row is None:
                    s.add(InstalledPlugin(id=m["id"], name=m["name"], version=m["version"], enabled=True,
                                          manifest=json.dumps(m), installed_at=now, updated_at=now))
                else:
                    row.name, row.version, row.manifest, row.updated_at = m["name"], m["version"], json.dumps(m), now
        except Exception:
            shutil.rmtree(current, ignore_errors=True)
            if old is not None:
                os.rename(old, current)
            raise
        cache = self.cache_root / f"{m['id']}.tools.json"
        if tools is None:
            cache.unlink(missing_ok=True)
        else:
            cache.write_text(json.dumps(tools), encoding="utf-8")
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def _enabled(self, plugin_id):
        with self.host.db.session() as s:
            row = s.get(InstalledPlugin, plugin_id)
            return bool(row and row.enabled)

    def set_enabled(self, plugin_id, enabled):
        with self.gate:
            with self.host.db.session() as s:
                row = self._row(s, plugin_id)
                row.enabled = enabled
                manifest = json.loads(row.manifest)
            # Disable stops the worker at once; enable (also after a crash loop) starts fresh, lazily.
            self.supervisor.remove(plugin_id)
            if enabled:
                self.supervisor.add(self.spec_for(manifest), tools=self._cached_tools(plugin_id))
        return self.get(plugin_id)

    def uninstall(self, plugin_id, delete_data=False):
        with self.gate:
            with self.host.db.session() as s:
                s.delete(self._row(s, plugin_id))
            self.supervisor.forget(plugin_id)
            shutil.rmtree(self.install_dir(plugin_id), ignore_errors=True)
            (self.cache_root / f"{plugin_id}.tools.json").unlink(missing_ok=True)
            if delete_data:
                shutil.rmtree(self.data_root / plugin_id, ignore_errors=True)
        return {"ok": True, "id": plugin_id, "dataDeleted": bool(delete_data)}

    # -- calls ---------------------------------------------------------------------------

    def invoke(self, plugin_id, method, params=None, call_id=None):
        if self.supervisor.get(plugin_id) is None:
            self.get(plugin_id)  # 404 for an unknown plugin; a known but disabled one answers 409 below
        if plugin_id in self.updating:
            raise ApiError(503, "plugin_updating", "The plugin is being updated; try again shortly.",
                           headers={"Retry-After": "1"})
        try:
            return self.supervisor.invoke(plugin_id, method, params, call_id=call_id)
        except PluginUnavailable as exc:
            headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
            status = 409 if exc.code == "plugin_not_enabled" else 503
            raise ApiError(status, exc.code, exc.message, headers=headers) from None
        except WorkerCallError as exc:
            raise ApiError(422, "rpc_error", exc.message, rpcCode=exc.code, rpcMessage=exc.message,
                           rpcData=exc.data) from None
        except CallCancelled:
            raise ApiError(409, "call_cancelled", "The call was cancelled.") from None
        except WorkerFault as exc:
            raise ApiError(502, "worker_fault", exc.message, faultCategory=exc.category) from None
        except CallIdInUse:
            raise ApiError(409, "call_id_in_use", "A call with this callId is already in flight.") from None

    def cancel(self, plugin_id, call_id):
        self.get(plugin_id)
        return {"cancelled": self.supervisor.cancel(plugin_id, call_id)}

    def logs(self, plugin_id, limit=None):
        return self.log_ring(plugin_id).recent(limit)

    def log_ring(self, plugin_id):
        self.get(plugin_id)  # 404 for an unknown plugin; a disabled one keeps its recent logs
        return self.supervisor.ring(plugin_id)

    def ui_folder(self, plugin_id):
        """The installed UI folder of an enabled plugin, or None."""
        with self.host.db.session() as s:
            row = s.get(InstalledPlugin, plugin_id)
            if row is None or not row.enabled:
                return None
            ui = json.loads(row.manifest).get("ui")
        if not ui:
            return None
        entry_parts = pkg.safe_name(ui["entry"])
        return self.install_dir(plugin_id).joinpath(*entry_parts[:-1])


def _invalid(exc):
    """A refused package as a 400 problem; a reason that names no field is filed under ``file``."""
    return ApiError(400, "invalid_package", str(exc), errors=exc.errors or {"file": [str(exc)]})
