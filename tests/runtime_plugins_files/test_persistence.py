"""FileRefs live in the database on every backend, survive a restart, and die with their plugin."""
import io
import zipfile
from pathlib import Path

from tests.core.problems import assert_problem

from .conftest import BOTH, CONFIG, READER, export, install, invoke, output, token_client, upload, \
    upload_directory


def test_refs_survive_a_restart_and_leave_with_the_plugin(make_app, backend, data_dir):
    app = make_app(backend=backend, config=CONFIG)
    api = token_client(app)
    install(api, BOTH)
    install(api, READER)
    file_ref = upload(api, BOTH, "kept.txt", b"kept").get_json()["ref"]
    dir_ref = upload_directory(api, BOTH, {"t/a.txt": b"a"}).get_json()["ref"]
    long_name = "é" * 200  # fits the name column on every backend
    out_ref = output(api, BOTH, {"name": long_name}).get_json()["ref"]
    reader_ref = upload(api, READER, "r.txt", b"r").get_json()["ref"]
    app.extensions["agenthost"].stop()

    app = make_app(backend=backend, config=CONFIG)  # same data directory and database
    api = token_client(app)
    held = {r["ref"]: r for r in invoke(api, BOTH, "files/list")["refs"]}
    assert set(held) == {file_ref, dir_ref, out_ref}
    assert held[out_ref]["name"] == long_name
    assert Path(held[file_ref]["path"]).read_bytes() == b"kept"
    with zipfile.ZipFile(io.BytesIO(export(api, BOTH, dir_ref).data)) as zf:
        assert zf.read("t/a.txt") == b"a"

    storage = data_dir / "plugin-files" / BOTH
    assert api.delete(f"/api/plugin-packages/{BOTH}?deleteData=false").status_code == 200
    files = app.extensions["agenthost"].service("plugin_files")
    assert files.worker_refs(BOTH) == []  # the grants went with the plugin row
    assert [r["ref"] for r in files.worker_refs(READER)] == [reader_ref]
    install(api, BOTH)  # the same id again is a new plugin: it inherits nothing
    assert invoke(api, BOTH, "files/list") == {"refs": []}
    assert_problem(export(api, BOTH, dir_ref), 404, "not_found")
    assert storage.is_dir()
    assert api.delete(f"/api/plugin-packages/{BOTH}?deleteData=true").status_code == 200
    app.extensions["agenthost"].stop()

    make_app(backend=backend, config=CONFIG)
    assert not storage.exists()  # swept at start: the plugin is gone
    assert (data_dir / "plugin-files" / READER).is_dir()


def test_half_written_uploads_are_swept_at_start(make_app, data_dir):
    app = make_app(config=CONFIG)
    api = token_client(app)
    install(api, READER)
    ref = upload(api, READER).get_json()["ref"]
    leftover = data_dir / "plugin-files" / READER / ".partial-crashed"
    leftover.mkdir()
    (leftover / "half.bin").write_bytes(b"half")
    app.extensions["agenthost"].stop()
    make_app(config=CONFIG)
    assert not leftover.exists()
    assert (data_dir / "plugin-files" / READER / ref).is_dir()
