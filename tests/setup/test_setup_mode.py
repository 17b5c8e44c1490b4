"""SETUP mode: what answers before a database is configured, and the wizard's form metadata."""
import re

import pytest

from tests.conftest import HEADERS

SAMPLE_ARGS = {"int": "1", "path": "x/y", "default": "x", "string": "x",
               "uuid": "00000000-0000-0000-0000-000000000000"}


def sample_path(rule):
    """A concrete URL for a routing rule, with a plausible value for each variable."""
    def value(match):
        converter = match.group(1) or "default"
        return SAMPLE_ARGS.get(converter, "x")
    return re.sub(r"<(?:(\w+)(?:\([^)]*\))?:)?\w+>", value, rule.rule)


def guarded_routes(app):
    """Every (method, path) under /api/ other than health and the setup wizard."""
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/") or rule.rule.startswith(("/api/health", "/api/setup")):
            continue
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            yield method, sample_path(rule)


@pytest.fixture
def setup_app(make_app):
    return make_app(setup=True)


def test_health_answers_in_setup_mode(setup_app):
    resp = setup_app.test_client().get("/api/health")
    assert resp.status_code == 200
    assert resp.json == {"status": "ok"}


def test_status_says_not_initialized_and_lists_the_types(setup_app):
    resp = setup_app.test_client().get("/api/setup/status")
    assert resp.status_code == 200
    assert resp.json == {"initialized": False, "supportedTypes": ["sqlite", "postgresql", "mysql"],
                         "embeddedTypes": ["sqlite"]}


def test_every_other_api_path_is_503_service_in_setup_mode(setup_app):
    client = setup_app.test_client()
    routes = list(guarded_routes(setup_app))
    assert ("GET", "/api/settings") in routes and len(routes) > 10
    for method, path in routes + [("GET", "/api/no-such-thing"), ("POST", "/api/openapi.json")]:
        resp = client.open(path, method=method, headers=HEADERS, json={})
        assert resp.status_code == 503, (method, path, resp.status_code)
        assert resp.mimetype == "application/problem+json"
        assert resp.json["code"] == "service_in_setup_mode"
        assert resp.json["status"] == 503


@pytest.mark.parametrize("headers", [{}, {"X-Service-Token": "wrong"}], ids=["missing", "wrong"])
def test_token_is_checked_before_the_mode(setup_app, headers):
    resp = setup_app.test_client().get("/api/settings", headers=headers)
    assert resp.status_code == 401
    assert resp.json["code"] == "invalid_token"


def test_setup_endpoints_need_no_token(setup_app):
    client = setup_app.test_client()
    assert client.get("/api/setup/types").status_code == 200
    assert client.get("/api/setup/status", headers={"X-Service-Token": "wrong"}).status_code == 200


def test_paths_outside_the_api_are_plain_404(setup_app):
    resp = setup_app.test_client().get("/no-such-page", headers=HEADERS)
    assert resp.status_code == 404
    assert resp.mimetype == "application/problem+json"


def test_types_describe_every_field_and_mark_the_password_secret(setup_app):
    body = setup_app.test_client().get("/api/setup/types").json
    types = {t["type"]: t for t in body["types"]}
    assert list(types) == ["sqlite", "postgresql", "mysql"]
    assert types["sqlite"]["embedded"] is True
    assert [f["name"] for f in types["sqlite"]["fields"]] == ["path"]
    for kind, port in (("postgresql", 5432), ("mysql", 3306)):
        assert types[kind]["embedded"] is False
        fields = {f["name"]: f for f in types[kind]["fields"]}
        assert list(fields) == ["host", "port", "database", "user", "password"]
        for f in fields.values():
            assert {"name", "type", "required", "default", "secret"} <= set(f)
        assert fields["port"]["type"] == "integer" and fields["port"]["default"] == port
        assert fields["host"]["default"] == "127.0.0.1"
        assert fields["database"]["required"] and fields["user"]["required"]
        assert [n for n, f in fields.items() if f["secret"]] == ["password"]
        assert fields["password"]["default"] is None
