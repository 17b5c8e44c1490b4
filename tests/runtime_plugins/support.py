"""Helpers for the runtime-plugin tests: package builders, API shortcuts, process checks, polling."""
import hashlib
import io
import json
import os
import shutil
import stat
import zipfile
from pathlib import Path

import gevent

from tests.conftest import HEADERS

REPO = Path(__file__).resolve().parents[2]
HELLO_DIR = REPO / "examples" / "plugins" / "hello-worker"
HELLO_ID = "com.example.hello"
WORKERS = Path(__file__).resolve().parent / "workers"

# Small limits so faults, timeouts and backoff show up in a fraction of a second.
FAST = {
    "plugins.handshake-timeout-seconds": 1,
    "plugins.call-timeout-seconds": 1,
    "plugins.health-timeout-seconds": 2,
    "plugins.backoff-base-seconds": 0.05,
    "plugins.backoff-cap-seconds": 0.2,
    "notifications.heartbeat-seconds": 0.2,
}


def authed(app):
    c = app.test_client()
    c.environ_base["HTTP_X_SERVICE_TOKEN"] = HEADERS["X-Service-Token"]
    return c


# -- packages ------------------------------------------------------------------------------

def zip_folder(folder):
    """The bytes of a zip of ``folder``'s files, with paths relative to it."""
    buf = io.BytesIO()
    folder = Path(folder)
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, path.relative_to(folder).as_posix())
    return buf.getvalue()


def zip_entries(entries):
    """A zip of ``{name: bytes | str}``; a ZipInfo key writes that exact entry header."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in entries.items():
            zf.writestr(name, content)
    return buf.getvalue()


def symlink_entry(name, target):
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target


def manifest(plugin_id, **fields):
    base = {"id": plugin_id, "name": fields.pop("name", plugin_id.split(".")[-1].title()),
            "version": "1.0.0", "runtime": "python", "main": "main.py"}
    base.update(fields)
    return base


def worker_plugin(root, script, plugin_id, **fields):
    """A plugin folder under ``root`` whose main.py is ``workers/<script>.py`` (with wire.py beside it)."""
    folder = Path(root) / f"{plugin_id}-{fields.get('version', '1.0.0')}"
    folder.mkdir(parents=True)
    shutil.copy(WORKERS / f"{script}.py", folder / "main.py")
    shutil.copy(WORKERS / "wire.py", folder / "wire.py")
    (folder / "plugin.json").write_text(json.dumps(manifest(plugin_id, **fields)), encoding="utf-8")
    return folder


def hello_copy(root, **changes):
    """A copy of the hello example with manifest fields changed (version, permissions...; None drops one)."""
    folder = Path(root) / f"hello-{changes.get('version', 'copy')}"
    shutil.copytree(HELLO_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    data = json.loads((folder / "plugin.json").read_text(encoding="utf-8"))
    data.update(changes)
    data = {k: v for k, v in data.items() if v is not None}  # None removes a field
    (folder / "plugin.json").write_text(json.dumps(data), encoding="utf-8")
    return folder


def sha256_of(data):
    return hashlib.sha256(data).hexdigest()


# -- API shortcuts -------------------------------------------------------------------------

def upload(client, data, *, confirm=True, sha256=None, sidecar=None, path="/api/plugin-packages/upload"):
    form = {"file": (io.BytesIO(data), "plugin.zip")}
    if confirm is not None:
        form["confirmPermissions"] = "true" if confirm else "false"
    if sha256 is not None:
        form["sha256"] = sha256
    if sidecar is not None:
        form["sha256"] = (io.BytesIO(sidecar.encode()), "plugin.zip.sha256")
    return client.post(path, data=form, content_type="multipart/form-data")


def install(client, folder_or_bytes, **kwargs):
    data = folder_or_bytes if isinstance(folder_or_bytes, bytes) else zip_folder(folder_or_bytes)
    resp = upload(client, data, **kwargs)
    assert resp.status_code == 201, resp.get_data(as_text=True)
    return resp.json


def invoke(client, plugin_id, method, params=None, call_id=None):
    body = {"method": method}
    if params is not None:
        body["params"] = params
    if call_id is not None:
        body["callId"] = call_id
    return client.post(f"/api/plugin-runtime/{plugin_id}/invoke", json=body)


def status(client, plugin_id):
    resp = client.get(f"/api/plugin-runtime/{plugin_id}/status")
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.json


def set_enabled(client, plugin_id, enabled):
    resp = client.patch(f"/api/plugin-packages/{plugin_id}/enabled", json={"enabled": enabled})
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.json


def installed_ids(client):
    resp = client.get("/api/plugin-runtime")
    assert resp.status_code == 200
    return sorted(d["id"] for d in resp.json)


def arm(data_dir, plugin_id):
    """Tell a test worker to misbehave from its next start on (see workers/wire.py)."""
    folder = Path(data_dir) / "plugin-data" / plugin_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "armed").write_text("1")


# -- processes and polling -----------------------------------------------------------------

def process_gone(pid):
    """True once the process has exited and been reaped (a zombie still counts as present)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_until(predicate, timeout=5, step=0.02):
    """Poll ``predicate`` until true or ``timeout`` seconds pass; returns its last value."""
    with gevent.Timeout(timeout, False):
        while not predicate():
            gevent.sleep(step)
    return predicate()


def assert_gone(*pids):
    assert pids and all(isinstance(p, int) and p > 0 for p in pids), pids
    assert wait_until(lambda: all(process_gone(p) for p in pids)), \
        f"worker processes left behind: {[p for p in pids if not process_gone(p)]}"
