"""Problem responses: 404, 405, 413, 415 and 500, all RFC 9457 and none leaking internals."""
from pathlib import Path

import pytest
import requests
from flask import Blueprint, abort, request
from sqlalchemy import text

from core.errors import ApiError
from core.http import current_host, request_json
from hookspecs import hookimpl
from tests.conftest import HEADERS
from tests.core.problems import PROBLEM_FIELDS, assert_problem, assert_requests_problem
from tests.core.shared_app import module_app

REPO = str(Path(__file__).resolve().parents[2])
SECRET = "s3cret-internal-detail"


class Faulty:
    """A test extension whose routes fail in the ways a real plugin might."""

    __name__ = "faulty"

    @hookimpl
    def register_routes(self, host):
        bp = Blueprint("faulty", __name__)

        @bp.get("/crash")
        def crash():
            raise RuntimeError(f"{SECRET} while reading {REPO}/core/secret.py")

        @bp.get("/bad-sql")
        def bad_sql():
            with current_host().db.session() as s:
                s.execute(text(f"SELECT {SECRET.replace('-', '_')} FROM no_such_table"))
            return {}

        @bp.get("/key-error")
        def key_error():
            return {"value": {}["missing"]}

        @bp.post("/echo")
        def echo():
            return request_json()

        @bp.get("/api-error")
        def api_error():
            raise ApiError(409, "busy", "Try again.", retryAfter=1)

        @bp.get("/abort-500")
        def abort_500():
            abort(500, description=f"{SECRET} in {REPO}")

        @bp.get("/abort-429")
        def abort_429():
            abort(429)

        @bp.get("/query")
        def query():
            return {"q": request.args.get("q")}

        return [bp]


@pytest.fixture(scope="module")
def faulty_app(tmp_path_factory):
    yield from module_app(tmp_path_factory, plugins=[Faulty()])


@pytest.fixture
def client(faulty_app):
    c = faulty_app.test_client()
    c.environ_base["HTTP_X_SERVICE_TOKEN"] = HEADERS["X-Service-Token"]
    return c


def assert_no_internals(resp):
    body = resp.get_data(as_text=True)
    for leak in (SECRET, SECRET.replace("-", "_"), "Traceback", "no_such_table", "SELECT", REPO,
                 "site-packages", "RuntimeError", "KeyError", ".py"):
        assert leak not in body, f"{leak!r} leaked into {body}"


def test_unknown_route_is_a_404_problem(client):
    assert_problem(client.get("/api/no-such-thing"), 404, "not_found")
    assert_problem(client.get("/api/settings/no-such-child"), 404, "not_found")
    assert_problem(client.delete("/nowhere/at/all"), 404, "not_found")


def test_wrong_method_is_a_405_problem_with_allow(client):
    resp = client.delete("/api/settings")
    assert_problem(resp, 405, "method_not_allowed")
    allowed = {m.strip() for m in resp.headers["Allow"].split(",")}
    assert {"GET", "PUT"} <= allowed
    assert "DELETE" not in allowed
    resp = client.get("/api/ext/faulty/echo")
    assert_problem(resp, 405, "method_not_allowed")
    assert "POST" in resp.headers["Allow"]


def test_body_over_the_configured_max_is_a_413_problem(make_app):
    client = make_app(plugins=[Faulty()], config={"service.max-body-bytes": 256}).test_client()
    resp = client.post("/api/ext/faulty/echo", json={"blob": "x" * 300}, headers=HEADERS)
    assert_problem(resp, 413, "payload_too_large")
    ok = client.post("/api/ext/faulty/echo", json={"blob": "x" * 100}, headers=HEADERS)
    assert ok.status_code == 200 and ok.json == {"blob": "x" * 100}


def test_body_over_the_max_is_a_413_problem_over_a_real_socket(make_app, live_server):
    base = live_server(make_app(plugins=[Faulty()], config={"service.max-body-bytes": 1024}))
    resp = requests.post(base + "/api/ext/faulty/echo", data=b'{"blob": "' + b"x" * 4096 + b'"}',
                         headers={**HEADERS, "Content-Type": "application/json"}, timeout=10)
    assert_requests_problem(resp, 413, "payload_too_large")
    # The server is still healthy for the next request.
    assert requests.get(base + "/api/health", timeout=10).json() == {"status": "ok"}


@pytest.mark.parametrize("path", ["/api/ext/faulty/crash", "/api/ext/faulty/bad-sql",
                                  "/api/ext/faulty/key-error", "/api/ext/faulty/abort-500"])
def test_a_failing_route_is_a_500_problem_without_internals(client, path):
    resp = client.get(path)
    body = assert_problem(resp, 500, "internal_error")
    assert set(body) == set(PROBLEM_FIELDS)
    assert_no_internals(resp)


def test_the_traceback_goes_to_the_log_instead(client, caplog):
    client.get("/api/ext/faulty/crash")
    logged = [r for r in caplog.records if r.name == "agenthost.errors"]
    assert logged and logged[-1].exc_info and SECRET in str(logged[-1].exc_info[1])


def test_a_500_over_a_real_socket_leaks_nothing(faulty_app, live_server):
    base = live_server(faulty_app)
    resp = requests.get(base + "/api/ext/faulty/crash", headers=HEADERS, timeout=10)
    assert_requests_problem(resp, 500, "internal_error")
    for leak in (SECRET, "Traceback", REPO):
        assert leak not in resp.text
    assert requests.get(base + "/api/health", timeout=10).status_code == 200


def test_api_error_keeps_its_status_code_and_extension_fields(client):
    body = assert_problem(client.get("/api/ext/faulty/api-error"), 409, "busy")
    assert body["detail"] == "Try again."
    assert body["retryAfter"] == 1
    assert body["type"].endswith("busy")


def test_werkzeug_errors_keep_their_status(client):
    assert_problem(client.get("/api/ext/faulty/abort-429"), 429, "too_many_requests")


@pytest.mark.parametrize("raw, content_type, status, code", [
    (b"{nope", "application/json", 400, "malformed_json"),
    (b"[1, 2]", "application/json", 400, "malformed_json"),
    (b"", "application/json", 400, "body_required"),
    (b'{"a": 1}', "text/plain", 415, "unsupported_media_type"),
    (b'{"a": NaN}', "application/json", 400, "malformed_json"),
])
def test_bad_bodies_are_problems(client, raw, content_type, status, code):
    assert_problem(client.post("/api/ext/faulty/echo", data=raw, content_type=content_type), status, code)


def test_a_json_subtype_is_accepted(client):
    resp = client.post("/api/ext/faulty/echo", data=b'{"a": 1}', content_type="application/merge-patch+json")
    assert resp.status_code == 200 and resp.json == {"a": 1}


def test_validation_errors_carry_per_field_errors(client):
    body = assert_problem(client.put("/api/settings", json={"theme": 3}), 400, "validation_failed")
    assert isinstance(body["errors"], dict) and list(body["errors"]) == ["theme"]
    assert all(isinstance(m, str) for m in body["errors"]["theme"])


def test_no_files_are_served_from_the_working_directory(make_app, tmp_path, monkeypatch):
    """Flask's default static route would serve <cwd>/static; the host has no such route."""
    (tmp_path / "cwd" / "static").mkdir(parents=True)
    (tmp_path / "cwd" / "static" / "notes.txt").write_text("private")
    monkeypatch.chdir(tmp_path / "cwd")
    client = make_app().test_client()
    resp = client.get("/static/notes.txt", headers=HEADERS)
    assert_problem(resp, 404, "not_found")
    assert b"private" not in resp.data
