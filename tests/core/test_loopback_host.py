"""Only requests addressed to the loopback interface are served (DNS-rebinding defence)."""
import pytest

from tests.conftest import HEADERS


@pytest.mark.parametrize("host_header", ["127.0.0.1:24056", "localhost:24056", "[::1]:24056", "localhost"])
def test_loopback_host_headers_are_served(app, host_header):
    resp = app.test_client().get("/api/health", headers={"Host": host_header})
    assert resp.status_code == 200


@pytest.mark.parametrize("host_header", ["evil.example:24056", "attacker.test", "127.0.0.1.nip.io:24056"])
@pytest.mark.parametrize("path", ["/api/health", "/api/settings", "/plugin-runtime/x/index.html"])
def test_foreign_host_headers_are_refused(app, host_header, path):
    resp = app.test_client().get(path, headers={"Host": host_header, **HEADERS})
    assert resp.status_code == 403
    assert resp.mimetype == "application/problem+json"
    assert resp.json["code"] == "host_not_allowed"


def test_foreign_host_cannot_initialize_setup(make_app, data_dir):
    app = make_app(setup=True)
    resp = app.test_client().post("/api/setup/initialize", json={"type": "sqlite", "params": {}},
                                  headers={"Host": "rebound.example:24056"})
    assert resp.status_code == 403
    assert not (data_dir / "datasource.properties").exists()
    assert app.test_client().get("/api/setup/status").json["initialized"] is False
