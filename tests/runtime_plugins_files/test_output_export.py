"""POST .../files/output allocates a fresh writable folder; GET .../files/export/{ref} streams it as a zip."""
import io
import shutil
import zipfile
from pathlib import Path

import pytest

from tests.core.problems import assert_problem

from .conftest import BOTH, READER, WRITER, base, export, invoke, native, output, ref_row, state, upload, \
    upload_directory


def unzip(resp):
    assert resp.status_code == 200, resp.get_data(as_text=True)[:300]
    assert resp.mimetype == "application/zip"
    with zipfile.ZipFile(io.BytesIO(resp.data)) as zf:
        assert zf.testzip() is None
        return {i.filename: zf.read(i) for i in zf.infolist()}


def test_output_is_a_fresh_empty_writable_folder(api, host):
    resp = output(api, WRITER)
    assert resp.status_code == 201
    ref = resp.get_json()
    assert (ref["kind"], ref["access"], ref["source"], ref["name"]) == ("directory", "read-write", "output", "output")
    assert "path" not in ref
    path = Path(ref_row(host, ref["ref"])["path"])
    assert path.is_dir() and list(path.iterdir()) == []
    assert path.is_relative_to(host.data_dir / "plugin-files" / WRITER)
    other = output(api, WRITER).get_json()
    assert ref_row(host, other["ref"])["path"] != str(path)


def test_output_takes_an_optional_name(api):
    assert output(api, WRITER, {"name": "../Report 2024"}).get_json()["name"] == "Report 2024"
    assert output(api, WRITER, {}).get_json()["name"] == "output"


@pytest.mark.parametrize("body, field", [({"name": ""}, "name"), ({"name": 5}, "name"),
                                         ({"name": "x" * 201}, "name"), ({"nmae": "x"}, "nmae")])
def test_bad_output_bodies_are_400(api, host, body, field):
    before = state(host)
    problem = assert_problem(output(api, WRITER, body), 400, "validation_failed")
    assert field in problem["errors"]
    assert state(host) == before


def test_malformed_output_body_is_400(api, host):
    before = state(host)
    assert_problem(api.post(f"{base(WRITER)}/output", data="{", content_type="application/json"),
                   400, "malformed_json")
    assert state(host) == before


def test_export_zips_what_the_worker_wrote(api):
    ref = output(api, WRITER, {"name": "results"}).get_json()["ref"]
    invoke(api, WRITER, "files/write", {"ref": ref, "path": "summary.txt", "text": "done"})
    invoke(api, WRITER, "files/write", {"ref": ref, "path": "charts/q1/plot.svg", "text": "<svg/>"})
    invoke(api, WRITER, "files/mkdir", {"ref": ref, "path": "empty/inner"})
    resp = export(api, WRITER, ref)
    assert resp.headers["Content-Disposition"].startswith('attachment; filename="results.zip"')
    assert unzip(resp) == {"summary.txt": b"done", "charts/": b"", "charts/q1/": b"", "charts/q1/plot.svg": b"<svg/>",
                           "empty/": b"", "empty/inner/": b""}


def test_export_of_an_uploaded_directory_returns_the_tree(api):
    tree = {"site/index.html": b"<h1>x</h1>", "site/css/app.css": b"body{}", "site/big.bin": bytes(range(256)) * 400}
    ref = upload_directory(api, BOTH, tree).get_json()["ref"]
    files = {k: v for k, v in unzip(export(api, BOTH, ref)).items() if not k.endswith("/")}
    assert files == tree


def test_export_never_follows_links(api, tmp_path):
    """A link planted in an output folder must not leak the file it points to."""
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    (tmp_path / "secret-dir").mkdir()
    (tmp_path / "secret-dir" / "inner.txt").write_text("also secret")
    ref = output(api, WRITER).get_json()["ref"]
    invoke(api, WRITER, "files/write", {"ref": ref, "path": "kept.txt", "text": "ok"})
    invoke(api, WRITER, "files/link", {"ref": ref, "name": "leak.txt", "target": str(secret)})
    invoke(api, WRITER, "files/link", {"ref": ref, "name": "leak-dir", "target": str(tmp_path / "secret-dir")})
    assert unzip(export(api, WRITER, ref)) == {"kept.txt": b"ok"}


def test_export_of_a_native_directory(api, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "n.txt").write_text("native")
    ref = native(api, BOTH, {"path": str(tmp_path), "kind": "directory"}).get_json()["ref"]
    assert unzip(export(api, BOTH, ref)) == {"sub/": b"", "sub/n.txt": b"native"}


def test_export_of_a_file_ref_is_400(api):
    ref = upload(api, BOTH).get_json()["ref"]
    assert_problem(export(api, BOTH, ref), 400, "not_a_directory")


def test_export_of_an_unknown_ref_is_404(api):
    assert_problem(export(api, WRITER, "A" * 32), 404, "not_found")
    assert_problem(export(api, WRITER, "x" * 65), 404)


def test_export_of_another_plugins_ref_is_403(api):
    """Refs are bound to the plugin that received them."""
    ref = output(api, BOTH).get_json()["ref"]
    body = assert_problem(export(api, WRITER, ref), 403, "file_ref_not_granted")
    assert "permission" not in body
    assert export(api, BOTH, ref).status_code == 200


def test_export_of_a_vanished_native_directory_is_410(api, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    ref = native(api, BOTH, {"path": str(gone), "kind": "directory"}).get_json()["ref"]
    shutil.rmtree(gone)
    assert_problem(export(api, BOTH, ref), 410, "file_ref_gone")


def test_export_streams_over_a_real_socket(files_app, live_server, api):
    """The zip arrives in chunks over loopback and is complete."""
    import requests

    from tests.conftest import HEADERS
    ref = upload_directory(api, BOTH, {"d/a.bin": bytes(200_000), "d/b.txt": b"b"}
                           ).get_json()["ref"]
    url = live_server(files_app)
    with requests.get(f"{url}{base(BOTH)}/export/{ref}", headers=HEADERS, stream=True, timeout=10) as resp:
        assert resp.status_code == 200
        assert "Content-Length" not in resp.headers  # streamed, not buffered whole
        data = b"".join(resp.iter_content(16 * 1024))
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.read("d/a.bin") == bytes(200_000) and zf.read("d/b.txt") == b"b"
