"""Every plugin-files endpoint is gated by the token and by a permission its manifest declares."""
import pytest

from tests.core.problems import assert_problem

from .conftest import BOTH, NONE, READER, WRITER, base, export, native, output, state, upload, upload_directory


def refused(resp, permission):
    body = assert_problem(resp, 403, "permission_denied")
    assert body["permission"] == permission
    assert permission in body["detail"]


def test_upload_needs_files_read(api, host):
    """A plugin without files.read gets 403 naming the permission, and nothing is stored."""
    before = state(host)
    refused(upload(api, WRITER), "files.read")
    assert state(host) == before


def test_upload_directory_needs_files_read(api, host):
    before = state(host)
    refused(upload_directory(api, WRITER, {"a.txt": b"a"}), "files.read")
    assert state(host) == before


def test_read_write_directory_upload_also_needs_files_write(api, host):
    before = state(host)
    refused(upload_directory(api, READER, {"a.txt": b"a"}, access="read-write"), "files.write")
    assert state(host) == before
    assert upload_directory(api, READER, {"a.txt": b"a"}, access="read").status_code == 201


def test_native_read_needs_files_read(api, host, tmp_path):
    (tmp_path / "doc.txt").write_text("x")
    before = state(host)
    refused(native(api, WRITER, {"path": str(tmp_path / "doc.txt"), "kind": "file", "access": "read"}),
            "files.read")
    assert state(host) == before


def test_native_read_write_needs_files_write(api, host, tmp_path):
    before = state(host)
    refused(native(api, READER, {"path": str(tmp_path), "kind": "directory", "access": "read-write"}),
            "files.write")
    assert state(host) == before


def test_output_needs_files_write(api, host):
    before = state(host)
    refused(output(api, READER), "files.write")
    assert state(host) == before


def test_export_needs_files_write(api):
    """A reader may not export even its own directory ref."""
    ref = upload_directory(api, READER, {"a.txt": b"a"}).get_json()["ref"]
    refused(export(api, READER, ref), "files.write")


def test_each_permission_opens_its_own_endpoints(api, tmp_path):
    """files.read alone: upload, read directory, read native; files.write alone: output and export."""
    assert upload(api, READER).status_code == 201
    assert native(api, READER, {"path": str(tmp_path), "kind": "directory"}).status_code == 201
    out = output(api, WRITER)
    assert out.status_code == 201
    assert export(api, WRITER, out.get_json()["ref"]).status_code == 200


def test_a_plugin_without_file_permissions_is_refused_everywhere(api, host, tmp_path):
    before = state(host)
    answers = [upload(api, NONE), upload_directory(api, NONE, {"a.txt": b"a"}),
               native(api, NONE, {"path": str(tmp_path), "kind": "directory"}), output(api, NONE),
               export(api, NONE, "x" * 32)]
    for resp, permission in zip(answers, ["files.read", "files.read", "files.read", "files.write",
                                          "files.write"]):
        refused(resp, permission)
    assert state(host) == before


def test_the_permission_is_checked_before_the_body(api, host):
    """A malformed body from a plugin that lacks the permission still answers 403."""
    refused(api.post(f"{base(WRITER)}/native", data="{nope", content_type="application/json"), "files.read")
    refused(api.post(f"{base(READER)}/output", data="{nope", content_type="application/json"), "files.write")


@pytest.mark.parametrize("call", ["upload", "upload-directory", "native", "output", "export"])
def test_unknown_plugin_is_404(api, host, call, tmp_path):
    pid = "no.such-plugin"
    before = state(host)
    resp = {"upload": lambda: upload(api, pid), "upload-directory": lambda: upload_directory(api, pid, {"a": b""}),
            "native": lambda: native(api, pid, {"path": str(tmp_path), "kind": "directory"}),
            "output": lambda: output(api, pid), "export": lambda: export(api, pid, "x" * 32)}[call]()
    assert_problem(resp, 404, "not_found")
    assert state(host) == before


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_every_endpoint_needs_the_token(files_app, host, tmp_path, token):
    """Without the launch token each endpoint answers 401 before looking at the plugin or the body."""
    anonymous = files_app.test_client()
    headers = {"X-Service-Token": token} if token else {}
    before = state(host)
    answers = [upload(anonymous, BOTH, headers=headers),
               upload_directory(anonymous, BOTH, {"a.txt": b"a"}, headers=headers),
               native(anonymous, BOTH, {"path": str(tmp_path), "kind": "directory"}, headers=headers),
               output(anonymous, BOTH, headers=headers),
               export(anonymous, BOTH, "x" * 32, headers=headers)]
    for resp in answers:
        assert_problem(resp, 401, "invalid_token")
    assert state(host) == before


def test_routes_are_in_the_openapi_document(api):
    paths = api.get("/api/openapi.json").get_json()["paths"]
    prefix = base("{plugin_id}")
    for suffix, method in [("/upload", "post"), ("/upload-directory", "post"), ("/native", "post"),
                           ("/output", "post"), ("/export/{ref}", "get")]:
        op = paths[prefix + suffix][method]
        assert {"401", "403", "404"} <= set(op["responses"]), (suffix, op["responses"])
