"""POST .../files/upload-directory: a folder snapshot that keeps relative paths and refuses traversal."""
import io
import os
import stat
from pathlib import Path

import pytest

from tests.core.problems import assert_problem

from .conftest import BOTH, MAX_FILES, MAX_UPLOAD, READER, base, invoke, ref_row, state, upload_directory

TREE = {"project/README.md": b"# hi\n", "project/src/main.py": b"print('x')\n",
        "project/src/pkg/__init__.py": b"", "project/docs/a b.txt": "ünï".encode()}


def tree_of(root):
    root = Path(root)
    return {str(p.relative_to(root)).replace(os.sep, "/"): p.read_bytes()
            for p in root.rglob("*") if p.is_file()}


def test_directory_upload_keeps_relative_paths(api, host):
    resp = upload_directory(api, READER, TREE)
    assert resp.status_code == 201, resp.get_json()
    ref = resp.get_json()
    assert (ref["kind"], ref["access"], ref["source"], ref["name"]) == ("directory", "read", "directory", "project")
    assert ref["size"] == sum(len(v) for v in TREE.values())
    assert "path" not in ref
    path = ref_row(host, ref["ref"])["path"]
    assert tree_of(path) == TREE
    assert Path(path).is_relative_to(host.data_dir / "plugin-files" / READER)


def test_read_directory_files_are_read_only(api, host):
    ref = upload_directory(api, READER, {"a.txt": b"a"}).get_json()["ref"]
    path = Path(ref_row(host, ref)["path"]) / "a.txt"
    assert not os.stat(path).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def test_read_write_directory_is_writable_by_the_worker(api, host):
    ref = upload_directory(api, BOTH, {"in/a.txt": b"a"}, access="read-write").get_json()
    assert ref["access"] == "read-write"
    invoke(api, BOTH, "files/write", {"ref": ref["ref"], "path": "in/a.txt", "text": "changed"})
    invoke(api, BOTH, "files/write", {"ref": ref["ref"], "path": "out/new.txt", "text": "new"})
    assert tree_of(ref_row(host, ref["ref"])["path"]) == {"in/a.txt": b"changed", "out/new.txt": b"new"}


def test_name_falls_back_when_there_is_no_common_folder(api):
    assert upload_directory(api, READER, {"a.txt": b"a", "b/c.txt": b"c"}).get_json()["name"] == "upload"


def test_the_worker_reads_the_uploaded_tree(api):
    ref = upload_directory(api, READER, TREE).get_json()["ref"]
    assert invoke(api, READER, "files/read", {"ref": ref}) == {"tree": {k: v.decode() for k, v in TREE.items()}}


@pytest.mark.parametrize("bad", [
    "../escape.txt", "a/../../escape.txt", "a/..", "/etc/passwd", "a\\..\\b.txt", "a//b.txt", "a/./b.txt",
    "./a.txt", "a/", "", "C:/x.txt", "tab\there.txt", "x" * 1025,
])
def test_traversal_and_malformed_paths_are_refused_with_nothing_written(api, host, bad):
    before = state(host)
    resp = upload_directory(api, READER, {"ok.txt": b"ok", "bad": b"bad"}, paths=["ok.txt", bad])
    body = assert_problem(resp, 400, "validation_failed")
    assert list(body["errors"]["paths[]"]) == ["1"], body["errors"]
    assert state(host) == before


@pytest.mark.parametrize("paths, index", [
    (["a.txt", "a.txt"], "1"),
    (["d/x.txt", "d"], "1"),        # d is a file and a folder
    (["d", "d/x.txt"], "0"),
])
def test_duplicate_and_clashing_paths_are_refused(api, host, paths, index):
    before = state(host)
    tree = {str(i): b"x" for i in range(len(paths))}
    body = assert_problem(upload_directory(api, READER, tree, paths=paths), 400, "validation_failed")
    assert list(body["errors"]["paths[]"]) == [index], body["errors"]
    assert state(host) == before


def test_one_path_per_file(api, host):
    before = state(host)
    body = assert_problem(upload_directory(api, READER, {"a": b"a", "b": b"b"}, paths=["a.txt"]),
                          400, "validation_failed")
    assert "files" in body["errors"]
    assert state(host) == before


def test_paths_are_required(api, host):
    before = state(host)
    body = assert_problem(upload_directory(api, READER, {"a": b"a"}, paths=[]), 400, "validation_failed")
    assert "paths[]" in body["errors"]
    assert state(host) == before


def test_files_are_required(api, host):
    before = state(host)
    resp = api.post(f"{base(READER)}/upload-directory", data={"paths[]": ["a.txt"]},
                    content_type="multipart/form-data")
    body = assert_problem(resp, 400, "validation_failed")
    assert "files" in body["errors"]
    assert state(host) == before


@pytest.mark.parametrize("access", ["write", "READ", ""])
def test_unknown_access_is_400(api, host, access):
    before = state(host)
    body = assert_problem(upload_directory(api, BOTH, {"a.txt": b"a"}, access=access), 400, "validation_failed")
    assert "access" in body["errors"]
    assert state(host) == before


def test_directory_upload_over_the_limit_is_413(api, host):
    before = state(host)
    tree = {"a.bin": b"a" * (MAX_UPLOAD // 2), "b.bin": b"b" * (MAX_UPLOAD // 2)}
    assert_problem(upload_directory(api, READER, tree), 413, "payload_too_large")
    assert state(host) == before


def test_a_json_body_is_415(api, host):
    before = state(host)
    resp = api.post(f"{base(READER)}/upload-directory", json={"paths[]": ["a"]})
    assert_problem(resp, 415, "unsupported_media_type")
    assert state(host) == before


def test_too_many_files_is_400(api, host):
    before = state(host)
    tree = {f"f{i}.txt": b"x" for i in range(MAX_FILES + 1)}
    body = assert_problem(upload_directory(api, READER, tree), 400, "validation_failed")
    assert "files" in body["errors"]
    assert state(host) == before
    assert upload_directory(api, READER, dict(list(tree.items())[:MAX_FILES])).status_code == 201


def test_paths_without_brackets_are_accepted(api, host):
    resp = api.post(f"{base(READER)}/upload-directory", content_type="multipart/form-data",
                    data={"files": [(io.BytesIO(b"1"), "a"), (io.BytesIO(b"2"), "b")], "paths": ["x/a", "x/b"]})
    assert resp.status_code == 201, resp.get_json()
    assert tree_of(ref_row(host, resp.get_json()["ref"])["path"]) == {"x/a": b"1", "x/b": b"2"}
