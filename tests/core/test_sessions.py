"""The service keeps no cookie sessions: every request carries its own token."""
from flask import Blueprint, session

from hookspecs import hookimpl
from tests.conftest import HEADERS
from tests.core.problems import assert_problem


class SessionUser:
    """A test extension whose routes read and write Flask's session."""

    __name__ = "session_user"

    @hookimpl
    def register_routes(self, host):
        bp = Blueprint("session_user", __name__)

        @bp.get("/read")
        def read():
            return {"value": session.get("value"), "keys": sorted(session)}

        @bp.post("/write")
        def write():
            session["value"] = "kept?"
            return {"ok": True}

        return [bp]


def test_a_session_reads_empty_and_sets_no_cookie(make_app):
    client = make_app(plugins=[SessionUser()]).test_client()
    resp = client.get("/api/ext/session_user/read", headers=HEADERS)
    assert resp.status_code == 200 and resp.json == {"value": None, "keys": []}
    assert "Set-Cookie" not in resp.headers


def test_writing_the_session_fails_and_nothing_leaks_into_later_requests(make_app):
    client = make_app(plugins=[SessionUser()]).test_client()
    resp = client.post("/api/ext/session_user/write", headers=HEADERS)
    assert_problem(resp, 500)
    assert "Set-Cookie" not in resp.headers
    assert client.get("/api/ext/session_user/read", headers=HEADERS).json == {"value": None, "keys": []}
