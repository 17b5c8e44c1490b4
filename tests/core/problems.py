"""Assertions shared by the tests that check RFC 9457 problem responses."""

PROBLEM_FIELDS = ("type", "title", "status", "detail", "code")


def assert_problem(resp, status, code=None):
    """``resp`` is an ``application/problem+json`` answer with the five fields; returns its body."""
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True)[:500])
    assert resp.mimetype == "application/problem+json"
    body = resp.get_json(force=True)
    for name in PROBLEM_FIELDS:
        assert name in body, f"problem body lacks {name!r}: {body}"
    assert body["status"] == status
    assert isinstance(body["type"], str) and body["type"]
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    assert isinstance(body["code"], str) and body["code"]
    if code is not None:
        assert body["code"] == code, body
    return body


def assert_requests_problem(resp, status, code=None):
    """The same check for a ``requests`` response over a real socket."""
    assert resp.status_code == status, (resp.status_code, resp.text[:500])
    assert resp.headers["Content-Type"].split(";")[0].strip() == "application/problem+json"
    body = resp.json()
    for name in PROBLEM_FIELDS:
        assert name in body, f"problem body lacks {name!r}: {body}"
    assert body["status"] == status
    if code is not None:
        assert body["code"] == code, body
    return body
