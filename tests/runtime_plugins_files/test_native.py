"""POST .../files/native: wrap an existing local path (no copy) after checking it exists and is of that kind."""
import os

import pytest

from tests.core.problems import assert_problem

from .conftest import BOTH, READER, base, invoke, native, ref_row, state


def test_native_file_is_wrapped_in_place(api, host, tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text("version 1")
    resp = native(api, READER, {"path": str(doc), "kind": "file", "access": "read"})
    assert resp.status_code == 201, resp.get_json()
    ref = resp.get_json()
    assert (ref["kind"], ref["access"], ref["source"], ref["name"], ref["size"]) == (
        "file", "read", "native", "doc.txt", 9)
    assert "path" not in ref
    assert ref_row(host, ref["ref"])["path"] == os.path.realpath(doc)
    doc.write_text("version 2")  # no snapshot: the worker sees the file as it is now
    assert invoke(api, READER, "files/read", {"ref": ref["ref"]}) == {"text": "version 2"}


def test_access_defaults_to_read(api, tmp_path):
    resp = native(api, READER, {"path": str(tmp_path), "kind": "directory"})
    assert resp.status_code == 201 and resp.get_json()["access"] == "read"


def test_native_read_write_directory_lets_the_worker_write_there(api, tmp_path):
    resp = native(api, BOTH, {"path": str(tmp_path), "kind": "directory", "access": "read-write"})
    assert resp.status_code == 201
    ref = resp.get_json()
    assert (ref["kind"], ref["access"], ref["name"], ref["size"]) == ("directory", "read-write", tmp_path.name, None)
    invoke(api, BOTH, "files/write", {"ref": ref["ref"], "path": "made/by-worker.txt", "text": "hi"})
    assert (tmp_path / "made" / "by-worker.txt").read_text() == "hi"


def test_a_link_is_resolved_to_its_target(api, host, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    ref = native(api, READER, {"path": str(tmp_path / "link"), "kind": "directory"}).get_json()["ref"]
    assert ref_row(host, ref)["path"] == os.path.realpath(tmp_path / "real")


@pytest.mark.parametrize("make, kind, field", [
    (lambda p: p / "missing.txt", "file", "path"),
    (lambda p: p / "missing", "directory", "path"),
    (lambda p: p, "file", "kind"),                        # a directory asked for as a file
    (lambda p: p / "doc.txt", "directory", "kind"),       # a file asked for as a directory
    (lambda p: "relative/doc.txt", "file", "path"),
    (lambda p: str(p / "doc.txt") + "\x00", "file", "path"),
])
def test_missing_paths_and_wrong_kinds_are_400(api, host, tmp_path, make, kind, field):
    (tmp_path / "doc.txt").write_text("x")
    before = state(host)
    body = assert_problem(native(api, READER, {"path": str(make(tmp_path)), "kind": kind}), 400)
    assert field in body["errors"], body
    assert state(host) == before


def test_a_fifo_is_not_a_file(api, host, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    before = state(host)
    body = assert_problem(native(api, READER, {"path": str(fifo), "kind": "file"}), 400, "validation_failed")
    assert "kind" in body["errors"]
    assert state(host) == before


def test_paths_inside_the_data_directory_are_refused(api, host):
    """The data directory holds the datasource settings and other plugins' files."""
    before = state(host)
    for path in (host.data_dir, host.data_dir / "plugin-files", host.data_dir / "datasource.properties"):
        if not path.exists():
            continue
        kind = "directory" if path.is_dir() else "file"
        body = assert_problem(native(api, READER, {"path": str(path), "kind": kind}), 400, "path_not_allowed")
        assert "path" in body["errors"]
    assert state(host) == before


@pytest.mark.parametrize("body, field", [
    ({"kind": "file"}, "path"),
    ({"path": "/tmp"}, "kind"),
    ({"path": "/tmp", "kind": "folder"}, "kind"),
    ({"path": "/tmp", "kind": "directory", "access": "write"}, "access"),
    ({"path": 42, "kind": "directory"}, "path"),
    ({"path": "", "kind": "directory"}, "path"),
    ({"path": "/" + "x" * 4100, "kind": "directory"}, "path"),
    ({"path": "/tmp", "kind": "directory", "extra": 1}, "extra"),
])
def test_bad_bodies_are_400_per_field(api, host, body, field):
    before = state(host)
    problem = assert_problem(native(api, BOTH, body), 400, "validation_failed")
    assert field in problem["errors"], problem
    assert state(host) == before


def test_malformed_json_and_missing_body(api, host):
    before = state(host)
    assert_problem(api.post(f"{base(READER)}/native", data="{nope", content_type="application/json"),
                   400, "malformed_json")
    assert_problem(api.post(f"{base(READER)}/native", data="[1]", content_type="application/json"),
                   400, "malformed_json")
    assert_problem(api.post(f"{base(READER)}/native"), 400, "body_required")
    assert_problem(api.post(f"{base(READER)}/native", data="path=/tmp", content_type="text/plain"),
                   415, "unsupported_media_type")
    assert state(host) == before
