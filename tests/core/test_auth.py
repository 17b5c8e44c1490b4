"""The token filter: which requests need X-Service-Token, which bypass it, and what is refused."""
import re
import socket
from urllib.parse import urlsplit

import pytest
from flask import Blueprint, request

from core.auth import bypassed, no_auth, secret_auth, ticket_auth, view_auth
from hookspecs import hookimpl
from tests.conftest import HEADERS, TOKEN
from tests.core.problems import assert_problem
from tests.core.shared_app import module_app


class Marked:
    """A test extension with one route per authentication marker."""

    __name__ = "marked"

    @hookimpl
    def register_routes(self, host):
        bp = Blueprint("marked", __name__)

        @bp.get("/plain")
        def plain():
            return {"ok": True}

        @bp.get("/by-ticket")
        @ticket_auth
        def by_ticket():
            # The view owns the ticket check; the filter must let it reach here.
            return {"ticket": request.args.get("ticket")}

        @bp.post("/by-secret")
        @secret_auth
        def by_secret():
            return {"secret": request.headers.get("X-Service-Webhook-Secret")}

        @bp.get("/open")
        @no_auth
        def open_():
            return {"open": True}

        return [bp]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    # Shared: these rules only read; the one that writes checks it wrote nothing.
    yield from module_app(tmp_path_factory, plugins=[Marked()])


def token_routes(app):
    """(method, url) for every route the filter guards, with path parameters filled in."""
    for rule in app.url_map.iter_rules():
        view = app.view_functions[rule.endpoint]
        if rule.endpoint == "static" or bypassed(rule.rule) or view_auth(view) != "token":
            continue
        url = re.sub(r"<(?:[^:>]+:)?[^>]+>", "1", rule.rule)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            yield method, url


WRONG_TOKENS = {
    "last char differs": TOKEN[:-1] + ("y" if TOKEN[-1] != "y" else "z"),
    "first char differs": ("u" if TOKEN[0] != "u" else "v") + TOKEN[1:],
    "prefix": TOKEN[:-1],
    "half": TOKEN[: len(TOKEN) // 2],
    "extra chars": TOKEN + "x",
    "twice": TOKEN * 2,
    "upper case": TOKEN.upper(),
    "empty": "",
    "non-ascii": TOKEN[:-1] + "é",
    "non-ascii appended": TOKEN + "ü",
    "bearer": "Bearer " + TOKEN,
}


def test_every_token_route_refuses_a_missing_token(app):
    client = app.test_client()
    routes = list(token_routes(app))
    assert ("GET", "/api/settings") in routes and ("GET", "/api/ext/marked/plain") in routes
    for method, url in routes:
        resp = client.open(url, method=method, json={})
        body = assert_problem(resp, 401, "invalid_token")
        assert resp.headers["WWW-Authenticate"], (method, url)
        assert "X-Service-Token" in body["detail"]


@pytest.mark.parametrize("token", list(WRONG_TOKENS.values()), ids=list(WRONG_TOKENS))
def test_a_wrong_token_is_refused(app, token):
    client = app.test_client()
    for method, url in [("GET", "/api/settings"), ("PUT", "/api/settings"), ("GET", "/api/openapi.json"),
                        ("GET", "/api/ext/marked/plain"), ("POST", "/api/notifications/stream-ticket")]:
        resp = client.open(url, method=method, json={"theme": "dark"}, headers={"X-Service-Token": token})
        assert_problem(resp, 401, "invalid_token")
    assert client.get("/api/settings", headers=HEADERS).json["theme"] == "system"


def test_the_right_token_is_accepted(app):
    resp = app.test_client().get("/api/ext/marked/plain", headers=HEADERS)
    assert resp.status_code == 200 and resp.json == {"ok": True}


def raw_get(base, path, header_bytes):
    """A GET over a plain socket, so the header bytes reach the server untouched."""
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     + header_bytes + b"\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]), data


@pytest.mark.parametrize("value", [
    TOKEN.encode() + "é".encode("utf-8"),
    TOKEN[:-1].encode() + "é".encode("utf-8"),
    TOKEN[:-1].encode() + b"\xff",
    "ключ".encode("utf-8"),
])
def test_non_ascii_header_bytes_are_refused_over_a_real_socket(app, live_server, value):
    base = live_server(app)
    status, data = raw_get(base, "/api/settings", b"X-Service-Token: " + value)
    assert status == 401
    assert b"application/problem+json" in data
    ok, _ = raw_get(base, "/api/settings", b"X-Service-Token: " + TOKEN.encode())
    assert ok == 200


@pytest.mark.parametrize("path", ["/api/health/../settings", "/api/setup/../settings",
                                  "/plugin-runtime/../api/settings", "/api/health/%2e%2e/settings",
                                  "/plugin-runtime/x/../../api/settings"])
def test_dot_segments_after_a_bypass_prefix_reach_nothing_guarded(app, live_server, path):
    status, data = raw_get(live_server(app), path, b"Accept: application/json")
    assert status in (400, 401, 404), data
    assert b"sidebarCollapsed" not in data


def test_token_in_the_query_string_is_never_a_credential(app):
    client = app.test_client()
    body = assert_problem(client.get(f"/api/settings?token={TOKEN}"), 401, "token_in_url")
    assert "header" in body["detail"]
    assert_problem(client.put(f"/api/settings?token={TOKEN}", json={"theme": "dark"}), 401, "token_in_url")
    # Even beside a good header the URL form is refused, so clients stop leaking it.
    assert_problem(client.get(f"/api/settings?token={TOKEN}", headers=HEADERS), 400, "token_in_url")
    assert client.get("/api/settings", headers=HEADERS).json["theme"] == "system"


def test_health_needs_no_token(app):
    client = app.test_client()
    assert client.get("/api/health").json == {"status": "ok"}
    assert client.get("/api/health", headers={"X-Service-Token": "wrong"}).status_code == 200


def test_only_the_health_path_itself_is_bypassed(app):
    # A look-alike path gets no free pass: without a token it is a 401, not a 404.
    client = app.test_client()
    assert_problem(client.get("/api/healthz"), 401, "invalid_token")
    assert_problem(client.get("/api/health-admin"), 401, "invalid_token")
    assert_problem(client.get("/api/healthz", headers=HEADERS), 404, "not_found")


def test_setup_paths_need_no_token_in_setup_mode(make_app):
    client = make_app(setup=True).test_client()
    resp = client.get("/api/setup/status")
    assert resp.status_code == 200 and resp.json["initialized"] is False
    assert client.get("/api/setup/types").status_code == 200
    # Everything else still wants the token first, then says the host is in SETUP mode.
    assert_problem(client.get("/api/settings"), 401, "invalid_token")
    assert_problem(client.get("/api/settings", headers=HEADERS), 503, "service_in_setup_mode")


def test_setup_paths_are_gone_in_app_mode_with_or_without_token(app):
    client = app.test_client()
    assert_problem(client.get("/api/setup/status"), 404, "not_found")
    assert_problem(client.get("/api/setup/status", headers=HEADERS), 404, "not_found")


def test_plugin_runtime_paths_bypass_the_token(app):
    # No asset is installed: the answer is "not found", never "unauthorized".
    client = app.test_client()
    assert_problem(client.get("/plugin-runtime/some-plugin/index.html"), 404, "not_found")
    assert_problem(client.get("/plugin-runtime/some-plugin/js/app.js"), 404, "not_found")


def test_ticket_views_need_no_token(app):
    client = app.test_client()
    resp = client.get("/api/ext/marked/by-ticket?ticket=abc")
    assert resp.status_code == 200 and resp.json == {"ticket": "abc"}


def test_the_notification_stream_answers_on_its_ticket_not_the_token(app):
    client = app.test_client()
    # A bad ticket is the stream's own 403, proving the token filter let it through.
    assert_problem(client.get("/api/notifications/stream?ticket=not-a-ticket"), 403)
    ticket = client.post("/api/notifications/stream-ticket", headers=HEADERS).json["ticket"]
    resp = client.get(f"/api/notifications/stream?ticket={ticket}", buffered=False)
    try:
        assert resp.status_code == 200
        assert resp.mimetype == "text/event-stream"
    finally:
        resp.close()


def test_secret_and_open_views_need_no_token(app):
    client = app.test_client()
    resp = client.post("/api/ext/marked/by-secret", headers={"X-Service-Webhook-Secret": "s"})
    assert resp.status_code == 200 and resp.json == {"secret": "s"}
    assert client.get("/api/ext/marked/open").json == {"open": True}
