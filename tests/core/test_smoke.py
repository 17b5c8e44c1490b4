"""Health and token: the first rules every client relies on."""
from tests.conftest import HEADERS


def test_health_needs_no_token(app):
    resp = app.test_client().get("/api/health")
    assert resp.status_code == 200
    assert resp.json == {"status": "ok"}


def test_wrong_token_is_a_401_problem(app):
    resp = app.test_client().get("/api/settings", headers={"X-Service-Token": "nope"})
    assert resp.status_code == 401
    assert resp.mimetype == "application/problem+json"
    assert resp.json["code"] == "invalid_token"


def test_settings_on_every_backend(make_app, backend):
    app = make_app(backend=backend)
    c = app.test_client()
    assert c.put("/api/settings", json={"theme": "dark"}, headers=HEADERS).json["theme"] == "dark"
    assert c.get("/api/settings", headers=HEADERS).json["theme"] == "dark"
