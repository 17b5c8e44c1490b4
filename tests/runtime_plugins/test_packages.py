"""Plugin packages: inspect, upload with checks, hostile packages, health-gated updates, uninstall, aliases."""
import io
import json
import zipfile
from pathlib import Path

import gevent
import pytest

from tests.conftest import TOKEN
from tests.core.problems import assert_problem
from tests.runtime_plugins.support import (FAST, HELLO_DIR, HELLO_ID, assert_gone, authed, hello_copy, install,
                                           installed_ids, invoke, manifest, set_enabled, sha256_of, status,
                                           symlink_entry, upload, wait_until, worker_plugin, zip_entries,
                                           zip_folder)

ECHO = "test.echo"
WIRE = (Path(__file__).parent / "workers" / "wire.py").read_text()
GOOD_MAIN = "import wire\nwire.serve()\n"


def package(manifest_fields=None, **entries):
    """A small valid package (a wire worker) with manifest fields and entries changed."""
    files = {"plugin.json": json.dumps(manifest("test.pkg", **(manifest_fields or {}))),
             "main.py": GOOD_MAIN, "wire.py": WIRE}
    files.update(entries)
    return zip_entries({k: v for k, v in files.items() if v is not None})


def inspect(rt, data, **kwargs):
    return upload(rt, data, path="/api/plugin-packages/inspect", **kwargs)


def assert_nothing_installed(rt, data_dir):
    assert installed_ids(rt) == []
    assert rt.get("/api/plugin-runtime/status").json == []
    plugins = Path(data_dir) / "plugins"
    assert list((plugins / "installed").iterdir()) == []
    assert list((plugins / "staging").iterdir()) == []


# -- inspect -------------------------------------------------------------------------------

def test_inspect_reads_the_manifest_without_installing(rt, hello_zip, data_dir):
    resp = inspect(rt, hello_zip)
    assert resp.status_code == 200
    body = resp.json
    assert body["id"] == HELLO_ID and body["name"] == "Hello" and body["version"] == "1.0.0"
    assert body["permissions"] == ["notify"] and body["runtime"] == "python"
    assert body["action"] == "install" and body["versionStep"] is None and body["installedVersion"] is None
    assert body["sha256"] == sha256_of(hello_zip)
    assert_nothing_installed(rt, data_dir)


VERSION_STEPS = [("1.0.0", "same"), ("1.0.1", "patch"), ("1.2.0", "minor"), ("2.0.0", "major"),
                 ("0.9.9", "downgrade"), ("1.0.0-rc.1", "downgrade"), ("1.0.1-beta", "patch")]


def test_inspect_of_an_installed_id_is_an_update_with_its_semver_step(rt, hello_zip, tmp_path):
    install(rt, hello_zip)
    for version, step in VERSION_STEPS:
        body = inspect(rt, zip_folder(hello_copy(tmp_path, version=version))).json
        assert body["action"] == "update" and body["installedVersion"] == "1.0.0"
        assert body["versionStep"] == step, version
    assert rt.get("/api/plugin-runtime").json[0]["version"] == "1.0.0"  # inspect changed nothing


def test_inspect_names_permissions_an_update_adds(rt, tmp_path):
    install(rt, hello_copy(tmp_path, permissions=[]), confirm=None)
    body = inspect(rt, zip_folder(hello_copy(tmp_path, version="1.1.0", permissions=["notify", "files.read"]))).json
    assert sorted(body["addedPermissions"]) == ["files.read", "notify"]


# -- upload checks -------------------------------------------------------------------------

@pytest.mark.parametrize("confirm", [None, False])
def test_a_package_asking_for_permissions_needs_confirmation(rt, hello_zip, data_dir, confirm):
    body = assert_problem(upload(rt, hello_zip, confirm=confirm), 400, "permissions_not_confirmed")
    assert body["permissions"] == ["notify"] and "confirmPermissions" in body["errors"]
    assert_nothing_installed(rt, data_dir)


def test_a_package_without_permissions_needs_no_confirmation(rt, tmp_path):
    resp = upload(rt, zip_folder(hello_copy(tmp_path, permissions=[])), confirm=None)
    assert resp.status_code == 201
    assert resp.json["installed"] is True and resp.json["enabled"] is True and resp.json["action"] == "install"
    assert installed_ids(rt) == [HELLO_ID]


def test_a_matching_sha256_installs(rt, hello_zip):
    assert upload(rt, hello_zip, sha256=sha256_of(hello_zip).upper()).status_code == 201
    assert installed_ids(rt) == [HELLO_ID]


def test_a_matching_sha256_sidecar_file_installs(rt, hello_zip):
    sidecar = f"{sha256_of(hello_zip)}  hello-worker.zip\n"
    assert upload(rt, hello_zip, sidecar=sidecar).status_code == 201


@pytest.mark.parametrize("kwargs", [
    {"sha256": "0" * 64},
    {"sidecar": "f" * 64 + "  hello-worker.zip\n"},
])
def test_a_mismatching_checksum_is_400_and_installs_nothing(rt, hello_zip, data_dir, kwargs):
    body = assert_problem(upload(rt, hello_zip, **kwargs), 400, "invalid_package")
    assert "sha256" in body["errors"]
    assert_nothing_installed(rt, data_dir)


def test_a_malformed_checksum_is_400(rt, hello_zip, data_dir):
    for kwargs in ({"sha256": "abc"}, {"sha256": "z" * 64}, {"sidecar": ""}, {"sidecar": "not a checksum"}):
        body = assert_problem(upload(rt, hello_zip, **kwargs), 400)
        assert "sha256" in body["errors"], kwargs
        assert_nothing_installed(rt, data_dir)


def test_upload_without_a_file_part_is_400(rt, data_dir):
    body = assert_problem(rt.post("/api/plugin-packages/upload", data={"confirmPermissions": "true"},
                                  content_type="multipart/form-data"), 400)
    assert "file" in body["errors"]
    assert_nothing_installed(rt, data_dir)


def test_upload_that_is_not_multipart_is_415(rt, hello_zip, data_dir):
    assert_problem(rt.post("/api/plugin-packages/upload", data=hello_zip, content_type="application/zip"), 415)
    assert_nothing_installed(rt, data_dir)


def test_a_bad_confirm_permissions_value_is_400(rt, hello_zip, data_dir):
    resp = rt.post("/api/plugin-packages/upload", content_type="multipart/form-data",
                   data={"file": (io.BytesIO(hello_zip), "p.zip"), "confirmPermissions": "yes please"})
    assert "confirmPermissions" in assert_problem(resp, 400)["errors"]
    assert_nothing_installed(rt, data_dir)


# -- malformed and hostile packages --------------------------------------------------------

def corrupt_entry(data, name):
    """Flip bytes inside one entry's compressed data: the archive still opens, the entry does not read."""
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(name)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    raw = bytearray(data)
    for i in range(start, start + min(info.compress_size, 16)):
        raw[i] ^= 0x5A
    return bytes(raw)


def encrypted_flag(data, name):
    """Set the 'encrypted' bit of one entry in its local and central directory headers."""
    raw = bytearray(data)
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(name)
    raw[info.header_offset + 6] |= 0x1
    central = raw.find(b"PK\x01\x02")
    while raw[central + 46:central + 46 + len(name)] != name.encode():
        central = raw.find(b"PK\x01\x02", central + 4)
    raw[central + 8] |= 0x1
    return bytes(raw)


HOSTILE = {
    "not a zip": lambda: b"this is not a zip file at all",
    "empty upload": lambda: b"",
    "zip slip": lambda: package(**{"../evil.py": "print('escaped')"}),
    "zip slip inside": lambda: package(**{"ui/../../evil.py": "x"}),
    "absolute path": lambda: package(**{"/tmp/evil.py": "x"}),
    "backslash path": lambda: package(**{"..\\evil.py": "x"}),
    "symlink entry": lambda: zip_entries({"plugin.json": json.dumps(manifest("test.pkg")), "main.py": GOOD_MAIN,
                                          symlink_entry("link", "/etc/passwd")[0]: "/etc/passwd"}),
    "huge entry": lambda: package(**{"big.bin": b"\0" * (33 * 1024 * 1024)}),
    "zip bomb ratio": lambda: package(**{"bomb.bin": b"\0" * (2 * 1024 * 1024)}),
    "too many entries": lambda: package(**{f"f/{i}.txt": "x" for i in range(2001)}),
    "file and folder clash": lambda: package(**{"ui": "x", "ui/index.html": "y"}),
    "duplicate after normalising": lambda: package(**{"./main.py": GOOD_MAIN}),
    "missing plugin.json": lambda: package(**{"plugin.json": None}),
    "plugin.json in a folder": lambda: zip_entries({"inner/plugin.json": json.dumps(manifest("test.pkg")),
                                                     "main.py": GOOD_MAIN}),
    "invalid JSON": lambda: package(**{"plugin.json": "{\"id\": \"test.pkg\","}),
    "manifest not an object": lambda: package(**{"plugin.json": "[1, 2]"}),
    "damaged manifest": lambda: corrupt_entry(package(), "plugin.json"),
    "damaged entry": lambda: corrupt_entry(package(**{"main.py": GOOD_MAIN * 50}), "main.py"),
    "encrypted entry": lambda: encrypted_flag(package(), "main.py"),
}

BAD_MANIFESTS = {
    "bad id": ({"id": "Bad ID!"}, "id"),
    "id too short": ({"id": "a"}, "id"),
    "bad semver": ({"version": "1.0"}, "version"),
    "semver with a v": ({"version": "v1.0.0"}, "version"),
    "main missing from zip": ({"main": "server.py"}, "main"),
    "main escaping": ({"main": "../main.py"}, "main"),
    "unknown runtime": ({"runtime": "ruby"}, "runtime"),
    "unknown permission": ({"permissions": ["root"]}, "permissions.0"),
    "ui entry missing": ({"ui": {"entry": "ui/index.html"}}, "ui.entry"),
    "command without argv": ({"runtime": "command", "main": None}, "manifest"),
    "name missing": ({"name": None}, "manifest"),
}


def test_hostile_and_malformed_packages_are_400_and_install_nothing(rt, data_dir):
    # One app for every case keeps this fast; the case name is in each failure message.
    for case, build in HOSTILE.items():
        data = build()
        body = assert_problem(upload(rt, data), 400, "invalid_package")
        assert body["errors"], case
        assert_nothing_installed(rt, data_dir)
        assert_problem(inspect(rt, data), 400, "invalid_package")


def test_invalid_manifests_are_400_naming_the_field(rt, data_dir):
    for case, (fields, key) in BAD_MANIFESTS.items():
        data = zip_entries({"plugin.json": json.dumps({k: v for k, v in manifest("test.pkg", **fields).items()
                                                       if v is not None}),
                            "main.py": GOOD_MAIN, "wire.py": WIRE})
        body = assert_problem(upload(rt, data), 400, "invalid_package")
        assert key in body["errors"], (case, body["errors"])
        assert_nothing_installed(rt, data_dir)


def test_a_valid_package_built_the_same_way_installs(rt):
    """The control for the two tests above: their packages differ from this one only in the flaw."""
    assert upload(rt, package()).status_code == 201
    assert installed_ids(rt) == ["test.pkg"]


def test_a_package_over_the_size_limit_is_refused(rt, data_dir):
    from builtin_plugins.runtime_plugins import package as pkg
    oversize = b"PK" + b"\0" * pkg.MAX_PACKAGE_BYTES
    assert_problem(upload(rt, oversize), 400, "invalid_package")
    assert_nothing_installed(rt, data_dir)


# -- health-gated updates ------------------------------------------------------------------

def broken_version(tmp_path, plugin_id, version):
    folder = tmp_path / f"broken-{version}"
    folder.mkdir()
    (folder / "plugin.json").write_text(json.dumps(manifest(plugin_id, version=version)))
    (folder / "main.py").write_text("import sys\nsys.stderr.write('cannot start\\n')\nsys.exit(3)\n")
    return folder


def test_a_fresh_install_that_fails_its_health_check_is_422_and_installs_nothing(rt, tmp_path, data_dir):
    body = assert_problem(upload(rt, zip_folder(broken_version(tmp_path, "test.pkg", "1.0.0"))), 422,
                          "health_check_failed")
    assert body["faultCategory"] == "handshake"
    assert_nothing_installed(rt, data_dir)


def test_a_failing_update_rolls_back_and_the_old_version_keeps_answering(rt, tmp_path, data_dir):
    install(rt, worker_plugin(tmp_path, "echo", ECHO))
    old_pid = invoke(rt, ECHO, "pid").json["pid"]

    body = assert_problem(upload(rt, zip_folder(broken_version(tmp_path, ECHO, "2.0.0"))), 422,
                          "health_check_failed")

    assert "exited during initialize" in body["detail"]
    assert rt.get("/api/plugin-runtime").json[0]["version"] == "1.0.0"
    assert invoke(rt, ECHO, "echo", {"still": "here"}).json == {"echo": {"still": "here"}}
    installed = Path(data_dir) / "plugins" / "installed" / ECHO
    assert "wire.serve(handle" in (installed / "main.py").read_text()  # the old files are in place
    assert list((Path(data_dir) / "plugins" / "staging").iterdir()) == []
    assert_gone(old_pid)  # the update gate stopped the old worker; a fresh one answered
    assert status(rt, ECHO)["fault"] is None


def test_a_good_update_swaps_versions(rt, hello_zip, tmp_path, data_dir):
    install(rt, hello_zip)
    assert invoke(rt, HELLO_ID, "ping").status_code == 200
    old_pid = status(rt, HELLO_ID)["pid"]
    newer = hello_copy(tmp_path, version="1.1.0", description="Now with more hello.")

    result = install(rt, newer)

    assert result["action"] == "update" and result["versionStep"] == "minor"
    assert result["installedVersion"] == "1.0.0" and result["version"] == "1.1.0"
    assert_gone(old_pid)
    descriptor = rt.get("/api/plugin-runtime").json[0]
    assert descriptor["version"] == "1.1.0" and descriptor["description"] == "Now with more hello."
    assert invoke(rt, HELLO_ID, "hello/echo", {"v": 2}).json == {"echo": {"v": 2}}
    leftovers = [p.name for p in (Path(data_dir) / "plugins" / "installed").iterdir()]
    assert leftovers == [HELLO_ID]  # no .old folder left behind


def test_invokes_during_an_update_answer_503_and_the_old_version_answers_after(make_app, tmp_path):
    rt = authed(make_app(config={**FAST, "plugins.health-timeout-seconds": 1}))
    install(rt, worker_plugin(tmp_path, "echo", ECHO))
    hanging = tmp_path / "hanging"
    hanging.mkdir()
    (hanging / "plugin.json").write_text(json.dumps(manifest(ECHO, version="1.1.0")))
    (hanging / "main.py").write_text("import sys, time\nsys.stdin.readline()\ntime.sleep(30)\n")
    update = gevent.spawn(upload, rt, zip_folder(hanging))
    runtime = rt.application.extensions["agenthost"].service("runtime_plugins")
    assert wait_until(lambda: ECHO in runtime.updating)

    during = invoke(rt, ECHO, "echo", {})

    assert_problem(during, 503, "plugin_updating")
    assert during.headers["Retry-After"] == "1"
    assert_problem(update.get(timeout=10), 422, "health_check_failed")
    assert invoke(rt, ECHO, "echo", {"after": 1}).json == {"echo": {"after": 1}}


def test_updating_a_disabled_plugin_keeps_it_disabled(rt, hello_zip, tmp_path):
    install(rt, hello_zip)
    set_enabled(rt, HELLO_ID, False)
    result = install(rt, hello_copy(tmp_path, version="1.0.1"))
    assert result["enabled"] is False
    snapshot = status(rt, HELLO_ID)
    assert snapshot["state"] == "disabled" and snapshot["pid"] is None


# -- enable, disable, uninstall ------------------------------------------------------------

def test_enable_and_disable_answer_the_descriptor(rt, hello_zip):
    install(rt, hello_zip)
    body = set_enabled(rt, HELLO_ID, False)
    assert body["id"] == HELLO_ID and body["enabled"] is False
    assert body["ui"] == {"entry": "ui/index.html", "url": f"/plugin-runtime/{HELLO_ID}/ui/index.html"}
    assert set_enabled(rt, HELLO_ID, True)["enabled"] is True


def test_a_bad_enabled_body_is_400_and_changes_nothing(rt, hello_zip):
    install(rt, hello_zip)
    for body in ({}, {"enabled": "true"}, {"enabled": 1}, {"enabled": None}, {"enabled": True, "extra": 1}):
        resp = rt.patch(f"/api/plugin-packages/{HELLO_ID}/enabled", json=body)
        assert "errors" in assert_problem(resp, 400), body
        assert installed_ids(rt) == [HELLO_ID]


def test_enable_and_uninstall_of_an_unknown_plugin_are_404(rt):
    assert_problem(rt.patch("/api/plugin-packages/no.such/enabled", json={"enabled": True}), 404)
    assert_problem(rt.delete("/api/plugin-packages/no.such"), 404)


@pytest.mark.parametrize("delete_data", [False, True])
def test_uninstall_retains_or_deletes_the_plugins_data(rt, hello_zip, data_dir, delete_data):
    install(rt, hello_zip)
    assert invoke(rt, HELLO_ID, "ping").status_code == 200
    pid = status(rt, HELLO_ID)["pid"]
    data = Path(data_dir) / "plugin-data" / HELLO_ID
    (data / "notes.txt").write_text("keep me?")

    resp = rt.delete(f"/api/plugin-packages/{HELLO_ID}", query_string={"deleteData": str(delete_data).lower()})

    assert resp.status_code == 200
    assert resp.json == {"ok": True, "id": HELLO_ID, "dataDeleted": delete_data}
    assert_gone(pid)
    assert (data / "notes.txt").exists() is (not delete_data)
    assert_nothing_installed(rt, data_dir)
    assert_problem(rt.get(f"/api/plugin-runtime/{HELLO_ID}/status"), 404)


def test_a_bad_delete_data_value_is_400_and_uninstalls_nothing(rt, hello_zip):
    install(rt, hello_zip)
    assert "deleteData" in assert_problem(rt.delete(f"/api/plugin-packages/{HELLO_ID}?deleteData=perhaps"),
                                          400)["errors"]
    assert installed_ids(rt) == [HELLO_ID]


def test_a_reinstall_after_uninstall_with_retained_data_sees_the_old_data(rt, hello_zip, data_dir):
    install(rt, hello_zip)
    data = Path(data_dir) / "plugin-data" / HELLO_ID
    (data / "notes.txt").write_text("still here")
    rt.delete(f"/api/plugin-packages/{HELLO_ID}")
    install(rt, hello_zip)
    assert (data / "notes.txt").read_text() == "still here"


# -- native paths --------------------------------------------------------------------------

def test_inspect_native_and_upload_native_read_a_local_file(rt, hello_zip, tmp_path):
    path = tmp_path / "hello.zip"
    path.write_bytes(hello_zip)

    inspected = rt.post("/api/plugin-packages/inspect-native", json={"path": str(path)})
    assert inspected.status_code == 200 and inspected.json["action"] == "install"
    assert installed_ids(rt) == []

    assert_problem(rt.post("/api/plugin-packages/upload-native", json={"path": str(path)}), 400,
                   "permissions_not_confirmed")
    resp = rt.post("/api/plugin-packages/upload-native",
                   json={"path": str(path), "confirmPermissions": True, "sha256": sha256_of(hello_zip)})
    assert resp.status_code == 201 and resp.json["id"] == HELLO_ID
    assert installed_ids(rt) == [HELLO_ID]


def test_native_paths_must_be_existing_absolute_files(rt, tmp_path, data_dir):
    for endpoint in ("inspect-native", "upload-native"):
        for path in ("relative/hello.zip", "/no/such/file.zip", str(tmp_path), ""):
            body = {"path": path, **({"confirmPermissions": True} if endpoint == "upload-native" else {})}
            resp = rt.post(f"/api/plugin-packages/{endpoint}", json=body)
            assert "path" in assert_problem(resp, 400)["errors"], (endpoint, path)
            assert_nothing_installed(rt, data_dir)


def test_upload_native_with_a_wrong_sha256_installs_nothing(rt, hello_zip, tmp_path, data_dir):
    path = tmp_path / "hello.zip"
    path.write_bytes(hello_zip)
    assert_problem(rt.post("/api/plugin-packages/upload-native",
                           json={"path": str(path), "confirmPermissions": True, "sha256": "1" * 64}), 400)
    assert_nothing_installed(rt, data_dir)


# -- deprecated plugin-market aliases ------------------------------------------------------

def test_market_aliases_forward_with_a_deprecation_header(rt, hello_zip, tmp_path):
    inspected = upload(rt, hello_zip, path="/api/plugin-market/inspect")
    assert inspected.status_code == 200 and inspected.json["id"] == HELLO_ID
    assert inspected.headers["Deprecation"] == "true"

    uploaded = upload(rt, hello_zip, path="/api/plugin-market/upload")
    assert uploaded.status_code == 201 and uploaded.headers["Deprecation"] == "true"
    assert installed_ids(rt) == [HELLO_ID]

    path = tmp_path / "hello.zip"
    path.write_bytes(hello_zip)
    native = rt.post("/api/plugin-market/inspect-native", json={"path": str(path)})
    assert native.status_code == 200 and native.json["action"] == "update"
    assert native.headers["Deprecation"] == "true"
    again = rt.post("/api/plugin-market/upload-native", json={"path": str(path), "confirmPermissions": True})
    assert again.status_code == 201 and again.headers["Deprecation"] == "true"

    disabled = rt.patch(f"/api/plugin-market/{HELLO_ID}/enabled", json={"enabled": False})
    assert disabled.status_code == 200 and disabled.json["enabled"] is False
    assert disabled.headers["Deprecation"] == "true"

    removed = rt.delete(f"/api/plugin-market/{HELLO_ID}", query_string={"deleteData": "true"})
    assert removed.status_code == 200 and removed.json["dataDeleted"] is True
    assert removed.headers["Deprecation"] == "true"
    assert_problem(rt.get(f"/api/plugin-runtime/{HELLO_ID}/status"), 404)


def test_market_alias_errors_carry_the_deprecation_header_too(rt):
    resp = rt.patch("/api/plugin-market/no.such/enabled", json={"enabled": True})
    assert_problem(resp, 404)
    assert resp.headers["Deprecation"] == "true"
    bad = upload(rt, b"not a zip", path="/api/plugin-market/upload")
    assert_problem(bad, 400, "invalid_package")
    assert bad.headers["Deprecation"] == "true"


@pytest.mark.parametrize("method, path, replacement", [
    ("get", "/api/plugin-market", "/api/plugin-store/catalog"),
    ("post", f"/api/plugin-market/{HELLO_ID}/install", "/api/plugin-store/{uid}/install"),
    ("post", f"/api/plugin-market/{HELLO_ID}/update", "/api/plugin-store/{uid}/update"),
])
def test_market_catalog_endpoints_are_gone_naming_the_replacement(rt, method, path, replacement):
    resp = getattr(rt, method)(path)
    body = assert_problem(resp, 410, "gone")
    assert body["replacement"] == replacement and replacement in body["detail"]
    assert resp.headers["Deprecation"] == "true"
    assert installed_ids(rt) == []


def test_package_endpoints_need_the_token(rt_app, hello_zip, data_dir, rt):
    anonymous = rt_app.test_client()
    assert_problem(upload(anonymous, hello_zip), 401)
    assert_problem(upload(anonymous, hello_zip, path="/api/plugin-packages/inspect"), 401)
    assert_problem(anonymous.post("/api/plugin-packages/upload-native", json={"path": "/x"},
                                  headers={"X-Service-Token": TOKEN[:-1]}), 401)
    assert_problem(anonymous.delete(f"/api/plugin-packages/{HELLO_ID}"), 401)
    assert_problem(upload(anonymous, hello_zip, path="/api/plugin-market/upload"), 401)
    assert_nothing_installed(rt, data_dir)


def test_the_hello_example_folder_is_a_valid_package(hello_zip):
    names = set(zipfile.ZipFile(io.BytesIO(hello_zip)).namelist())
    assert {"plugin.json", "main.py", "ui/index.html", "ui/app.js"} <= names
    assert json.loads((HELLO_DIR / "plugin.json").read_text())["id"] == HELLO_ID
