"""Fixtures for the plugin-files tests: an app, test plugins installed through the package API, helpers."""
import io
import json
import zipfile
from pathlib import Path

import pytest
from sqlalchemy import select

from builtin_plugins.runtime_plugins.models import FileRef
from core import datasource as ds_file
from core.app import create_app
from core.config import Config
from tests.conftest import TOKEN

WORKER = Path(__file__).with_name("files_worker.py")
MAX_UPLOAD = 512 * 1024  # small, so the size limit can be shown without pushing 256 MiB through a test

# Test plugins by the permissions they declare.
READER, WRITER, BOTH, NONE = "test.files-reader", "test.files-writer", "test.files-both", "test.files-none"
PERMISSIONS = {READER: ["files.read"], WRITER: ["files.write"], BOTH: ["files.read", "files.write"], NONE: []}


def package(plugin_id, permissions):
    """A plugin zip (manifest + the test worker) built in memory."""
    manifest = {"id": plugin_id, "name": f"Files test {plugin_id}", "version": "1.0.0", "runtime": "python",
                "main": "main.py", "permissions": permissions}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("plugin.json", json.dumps(manifest))
        zf.writestr("main.py", WORKER.read_text(encoding="utf-8"))
    return buf.getvalue()


MAX_FILES = 8
CONFIG = {"plugins.files.max-upload-bytes": MAX_UPLOAD, "plugins.files.max-directory-files": MAX_FILES,
          "plugins.call-timeout-seconds": 10}


def install(client, plugin_id, permissions=None):
    """Install a test plugin through POST /api/plugin-packages/upload, as the shell would."""
    permissions = PERMISSIONS[plugin_id] if permissions is None else permissions
    form = {"file": (io.BytesIO(package(plugin_id, permissions)), f"{plugin_id}.zip")}
    if permissions:
        form["confirmPermissions"] = "true"
    resp = client.post("/api/plugin-packages/upload", data=form, content_type="multipart/form-data")
    assert resp.status_code == 201, resp.get_data(as_text=True)
    return plugin_id


def token_client(app):
    client = app.test_client()
    client.environ_base["HTTP_X_SERVICE_TOKEN"] = TOKEN
    return client


@pytest.fixture(scope="module")
def files_app(tmp_path_factory):
    """One app per test module with the four test plugins installed (installs are the slow part).

    Tests on it compare the state before and after instead of expecting it empty.
    """
    data_dir = tmp_path_factory.mktemp("files") / "data"
    data_dir.mkdir()
    ds_file.write(data_dir, {"type": "sqlite", "params": {"path": "db.sqlite"}})
    app = create_app(Config({"service.auth.token": TOKEN, "service.data-dir": str(data_dir), **CONFIG}),
                     load_entry_points=False)
    client = token_client(app)
    for plugin_id in PERMISSIONS:
        install(client, plugin_id)
    yield app
    app.extensions["agenthost"].stop()


@pytest.fixture
def api(files_app):
    return token_client(files_app)


@pytest.fixture
def host(files_app):
    return files_app.extensions["agenthost"]


def state(host):
    """What a refused request must not change: every stored ref and every file in the storage."""
    root = Path(host.data_dir) / "plugin-files"
    return ({r["ref"] for r in stored(host)}, sorted(str(p.relative_to(root)) for p in root.rglob("*")))


def ref_row(host, ref):
    """The worker view of one ref (with its host path)."""
    [row] = [r for r in stored(host) if r["ref"] == ref]
    return row


def base(plugin_id):
    return f"/api/plugin-runtime/{plugin_id}/files"


def upload(api, plugin_id, name="notes.txt", data=b"hello", **kwargs):
    return api.post(f"{base(plugin_id)}/upload", data={"file": (io.BytesIO(data), name)},
                    content_type="multipart/form-data", **kwargs)


def upload_directory(api, plugin_id, tree, access=None, paths=None, **kwargs):
    """``tree`` maps relative paths to bytes; ``paths`` overrides the paths[] sent."""
    form = {"files": [(io.BytesIO(body), path.rsplit("/", 1)[-1]) for path, body in tree.items()],
            "paths[]": list(tree) if paths is None else paths}
    if access is not None:
        form["access"] = access
    return api.post(f"{base(plugin_id)}/upload-directory", data=form, content_type="multipart/form-data",
                    **kwargs)


def native(api, plugin_id, body, **kwargs):
    return api.post(f"{base(plugin_id)}/native", json=body, **kwargs)


def output(api, plugin_id, body=None, **kwargs):
    if body is None:
        return api.post(f"{base(plugin_id)}/output", **kwargs)
    return api.post(f"{base(plugin_id)}/output", json=body, **kwargs)


def export(api, plugin_id, ref, **kwargs):
    return api.get(f"{base(plugin_id)}/export/{ref}", **kwargs)


def invoke(api, plugin_id, method, params=None):
    resp = api.post(f"/api/plugin-runtime/{plugin_id}/invoke", json={"method": method, "params": params or {}})
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()


def stored(host, plugin_id=None):
    """Every FileRef the host holds (worker view, with paths), optionally for one plugin."""
    files = host.service("plugin_files")
    with host.db.session() as s:
        query = select(FileRef.plugin_id).distinct()
        owners = [plugin_id] if plugin_id else list(s.execute(query).scalars())
    return [r for owner in owners for r in files.worker_refs(owner)]
