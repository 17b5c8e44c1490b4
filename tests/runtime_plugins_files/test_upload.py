"""POST .../files/upload: a read-only snapshot copy of one file inside the data directory."""
import io
import os
import stat
from pathlib import Path

import pytest

from tests.core.problems import assert_problem

from .conftest import (MAX_UPLOAD, READER, base, install, invoke, ref_row, state, token_client, upload)


def test_upload_is_a_snapshot_in_the_data_directory(api, host):
    resp = upload(api, READER, "report.csv", b"a,b\n1,2\n")
    assert resp.status_code == 201
    ref = resp.get_json()
    assert set(ref) == {"ref", "pluginId", "kind", "access", "source", "name", "size", "createdAt"}
    assert (ref["pluginId"], ref["kind"], ref["access"], ref["source"]) == (READER, "file", "read", "upload")
    assert (ref["name"], ref["size"]) == ("report.csv", 8)
    assert "path" not in ref  # the host path is the worker's business, not the shell's
    path = Path(ref_row(host, ref["ref"])["path"])
    assert path.read_bytes() == b"a,b\n1,2\n"
    assert path.is_relative_to(host.data_dir / "plugin-files" / READER)
    assert not os.stat(path).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)  # read access


def test_ref_ids_are_opaque_and_unguessable(api):
    refs = [upload(api, READER).get_json()["ref"] for _ in range(3)]
    assert len(set(refs)) == 3
    for ref in refs:
        assert len(ref) >= 22 and "/" not in ref  # >= 128 random bits, URL-safe
        assert READER not in ref and "notes" not in ref


def test_every_upload_is_its_own_copy(api, host):
    """Two uploads of one name never overwrite each other."""
    first = upload(api, READER, "same.txt", b"one").get_json()["ref"]
    second = upload(api, READER, "same.txt", b"two").get_json()["ref"]
    assert Path(ref_row(host, first)["path"]).read_bytes() == b"one"
    assert Path(ref_row(host, second)["path"]).read_bytes() == b"two"


@pytest.mark.parametrize("name, kept", [
    ("../../escape.txt", "escape.txt"),
    ("C:\\Users\\me\\secret.txt", "secret.txt"),
    ("/etc/passwd", "passwd"),
    ("..", "file"),
    ("", "file"),
    ("bell\x07.txt", "bell.txt"),
    ("résumé.pdf", "résumé.pdf"),
])
def test_client_file_names_are_sanitised(api, host, name, kept):
    resp = upload(api, READER, name, b"data")
    assert resp.status_code == 201, resp.get_json()
    assert resp.get_json()["name"] == kept
    path = Path(ref_row(host, resp.get_json()["ref"])["path"])
    assert path.name == kept and path.parent.parent == host.data_dir / "plugin-files" / READER


def test_large_upload_within_the_limit_is_copied_whole(api, host):
    data = os.urandom(MAX_UPLOAD - 4096)  # spills to a temporary file while parsing
    ref = upload(api, READER, "blob.bin", data).get_json()["ref"]
    assert Path(ref_row(host, ref)["path"]).read_bytes() == data


def test_upload_over_the_limit_is_413_and_stores_nothing(api, host):
    before = state(host)
    assert_problem(upload(api, READER, "big.bin", b"x" * (MAX_UPLOAD + 1)), 413, "payload_too_large")
    assert state(host) == before


def test_uploads_are_limited_per_request_not_by_the_json_body_limit(make_app):
    """The default 256 MiB upload limit replaces the app-wide body limit on these routes only."""
    app = make_app(config={"service.max-body-bytes": 64 * 1024})
    assert app.extensions["agenthost"].service("plugin_files").max_upload_bytes == 256 * 1024 * 1024
    client = token_client(app)
    install(client, READER)
    assert upload(client, READER, "mid.bin", b"m" * (200 * 1024)).status_code == 201
    assert_problem(client.post(f"/api/plugin-runtime/{READER}/invoke", data="x" * (65 * 1024),
                               content_type="application/json"), 413)


def test_missing_file_part_is_400(api, host):
    before = state(host)
    resp = api.post(f"{base(READER)}/upload", data={"other": (io.BytesIO(b"x"), "x.txt")},
                    content_type="multipart/form-data")
    body = assert_problem(resp, 400, "validation_failed")
    assert "file" in body["errors"]
    assert state(host) == before


def test_a_json_body_is_415(api, host):
    before = state(host)
    assert_problem(api.post(f"{base(READER)}/upload", json={"file": "x"}), 415, "unsupported_media_type")
    assert state(host) == before


def test_the_worker_reads_the_uploaded_copy(api):
    """The worker learns the path from host/files/list and can open it."""
    ref = upload(api, READER, "hello.txt", "grüße".encode()).get_json()["ref"]
    assert invoke(api, READER, "files/read", {"ref": ref}) == {"text": "grüße"}
