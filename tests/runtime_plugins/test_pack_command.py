"""``core plugins pack DIR`` builds an installable zip and its sha256 sidecar, refusing invalid plugins."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HEADERS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plugins"


def pack(directory, cwd):
    return subprocess.run([sys.executable, "-m", "core", "plugins", "pack", str(directory)], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("example", ["hello-worker", "mcp-clock"])
def test_pack_writes_a_zip_and_sidecar_that_install_through_the_api(example, tmp_path, make_app):
    result = pack(EXAMPLES / example, tmp_path)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((EXAMPLES / example / "plugin.json").read_text())
    zip_path = tmp_path / f"{manifest['id']}-{manifest['version']}.zip"
    data = zip_path.read_bytes()
    digest = (tmp_path / (zip_path.name + ".sha256")).read_text().split()[0]
    assert digest == hashlib.sha256(data).hexdigest()

    client = make_app().test_client()
    resp = client.post("/api/plugin-packages/upload", headers=HEADERS, data={
        "file": (zip_path.open("rb"), zip_path.name), "sha256": digest, "confirmPermissions": "true"})
    assert resp.status_code == 201, resp.json
    assert resp.json["id"] == manifest["id"]
    ping = client.post(f"/api/plugin-runtime/{manifest['id']}/invoke", json={"method": "ping"}, headers=HEADERS)
    assert ping.status_code == 200 and ping.json == {}


def test_pack_refuses_an_invalid_plugin_and_writes_nothing(tmp_path):
    source = tmp_path / "bad"
    source.mkdir()
    (source / "plugin.json").write_text(json.dumps({"id": "Bad Id", "name": "x", "version": "1"}))
    out = tmp_path / "out"
    out.mkdir()
    result = pack(source, out)
    assert result.returncode == 1
    assert "plugin.json is invalid" in result.stderr
    assert list(out.iterdir()) == []


def test_a_ui_entry_at_the_package_root_is_refused(tmp_path):
    source = tmp_path / "rootui"
    source.mkdir()
    (source / "main.py").write_text("print('x')\n")
    (source / "index.html").write_text("<p>hi</p>")
    (source / "plugin.json").write_text(json.dumps({"id": "com.example.rootui", "name": "Root UI",
                                                    "version": "1.0.0", "runtime": "python", "main": "main.py",
                                                    "ui": {"entry": "index.html"}}))
    result = pack(source, tmp_path)
    assert result.returncode == 1
    assert "ui.entry" in result.stderr


def test_the_mcp_sdk_example_serves_its_tools_through_the_catalog(tmp_path, make_app):
    result = pack(EXAMPLES / "mcp-clock", tmp_path)
    assert result.returncode == 0, result.stderr
    zip_path = next(tmp_path.glob("*.zip"))
    app = make_app()
    client = app.test_client()
    resp = client.post("/api/plugin-packages/upload", headers=HEADERS,
                       data={"file": (zip_path.open("rb"), zip_path.name)})
    assert resp.status_code == 201, resp.json
    tools = {t["name"]: t for t in client.get("/api/agent/tools", headers=HEADERS).json}
    add = next(t for name, t in tools.items() if name.endswith("__add"))
    assert add["source"] == "plugin:com.example.mcp-clock"
    assert set(add["parameters"]["properties"]) == {"a", "b"}
    result = app.extensions["agenthost"].tools.call(add["name"], {"a": 2, "b": 3.5})
    assert result["structuredContent"] == {"result": 5.5}
