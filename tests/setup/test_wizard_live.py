"""The wizard against a real ``core serve``: one process goes SETUP -> APP -> SETUP -> APP."""
import stat

import pytest
import requests

from core import datasource as ds_file


def get(served, path, **kw):
    return requests.get(served.url + path, headers=served.headers, timeout=10, **kw)


def put(served, path, **kw):
    return requests.put(served.url + path, headers=served.headers, timeout=10, **kw)


def post(served, path, **kw):
    return requests.post(served.url + path, headers=served.headers, timeout=10, **kw)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "mysql"])
def test_initialize_and_reset_switch_the_running_process(serve_process, data_dir, fresh_datasource,
                                                         kind):
    served = serve_process(data_dir)
    assert get(served, "/api/setup/status").json()["initialized"] is False
    assert get(served, "/api/settings").status_code == 503

    # A failing initialize first: a problem, still SETUP, nothing written.
    broken = {"type": "sqlite", "params": {"path": "folder"}}
    (data_dir / "folder").mkdir()
    resp = post(served, "/api/setup/initialize", json=broken)
    assert resp.status_code == 422
    assert resp.headers["Content-Type"].startswith("application/problem+json")
    assert not (data_dir / ds_file.FILE).exists()
    assert get(served, "/api/settings").status_code == 503

    datasource = fresh_datasource(kind)
    resp = post(served, "/api/setup/initialize", json=datasource)
    assert resp.status_code == 200, resp.text
    assert resp.json()["initialized"] is True
    # Same process, same port, same token: now in APP mode.
    assert served.proc.poll() is None
    assert get(served, "/api/settings").status_code == 200
    assert requests.get(served.url + "/api/settings", headers={"X-Service-Token": "wrong"},
                        timeout=10).status_code == 401
    assert get(served, "/api/setup/status").status_code == 404
    assert post(served, "/api/setup/initialize", json=datasource).status_code == 404
    assert stat.S_IMODE((data_dir / ds_file.FILE).stat().st_mode) == 0o600
    assert ds_file.read(data_dir)["type"] == kind
    assert put(served, "/api/settings", json={"theme": "dark"}).status_code == 200

    resp = post(served, "/api/settings/database/reset")
    assert resp.status_code == 200
    assert not (data_dir / ds_file.FILE).exists()
    assert (data_dir / ds_file.BACKUP).exists()
    assert get(served, "/api/settings").json()["code"] == "service_in_setup_mode"
    assert get(served, "/api/setup/status").json()["initialized"] is False

    # And back again on the same database: the data is still there.
    assert post(served, "/api/setup/initialize", json=datasource).status_code == 200
    assert get(served, "/api/settings").json()["theme"] == "dark"
    assert served.stop() == 0
    assert "Traceback" not in served.proc.stderr.read()
