"""http_request against a small HTTP server started in the test: status, JSON, size cap, timeouts, schemes."""
import json

import gevent
import pytest
from gevent.pywsgi import WSGIServer

from tests.agent.support import assert_problem
from tests.builtin_tools.support import live_api, run_steps, run_tool


def upstream_app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/json":
        body = json.dumps({"hello": "world", "n": [1, 2]}).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    if path == "/missing":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"no such thing"]
    if path == "/big":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"a" * 70_000, b"b" * 70_000]
    if path == "/slow":
        gevent.sleep(3)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"late"]
    if path == "/drip":
        def drip():  # each chunk within the socket timeout, the whole far beyond it
            for _ in range(30):
                gevent.sleep(0.1)
                yield b"."
        start_response("200 OK", [("Content-Type", "text/plain")])
        return drip()
    if path == "/echo":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        data = environ["wsgi.input"].read(length).decode()
        body = json.dumps({"method": environ["REQUEST_METHOD"], "body": data,
                           "header": environ.get("HTTP_X_PROBE")}).encode()
        start_response("201 Created", [("Content-Type", "application/json")])
        return [body]
    start_response("500 Internal Server Error", [])
    return [b""]


@pytest.fixture
def upstream():
    server = WSGIServer(("127.0.0.1", 0), upstream_app, log=None, error_log=None)
    server.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.stop(timeout=1)


def test_status_headers_and_a_json_body(make_app, live_server, upstream):
    _, api = live_api(make_app, live_server)
    status, result, _ = run_tool(api, "http_request", {"url": f"{upstream}/json"})
    assert status == "complete"
    assert result["status"] == 200 and result["truncated"] is False
    assert result["body"] == {"hello": "world", "n": [1, 2]}
    assert result["headers"]["Content-Type"] == "application/json"

    status, result, _ = run_tool(api, "http_request", {"url": f"{upstream}/missing"})
    assert status == "complete"  # an HTTP error status is a result, not a failed step
    assert (result["status"], result["body"]) == (404, "no such thing")

    status, result, _ = run_tool(api, "http_request", {
        "url": f"{upstream}/echo", "method": "POST", "body": {"k": "v"}, "headers": {"X-Probe": "yes"}})
    assert result["status"] == 201
    assert result["body"] == {"method": "POST", "body": '{"k": "v"}', "header": "yes"}


def test_a_large_body_is_cut_at_the_size_cap(make_app, live_server, upstream):
    _, api = live_api(make_app, live_server)
    status, result, _ = run_tool(api, "http_request", {"url": f"{upstream}/big", "maxBytes": 1000})
    assert status == "complete"
    assert result["truncated"] is True and result["body"] == "a" * 1000
    # Under the 1 MiB default cap the whole body comes back (the run detail only shows a preview of it).
    detail = run_steps(api, [{"id": "get", "tool": "http_request", "arguments": {"url": f"{upstream}/big"}},
                             {"id": "cut", "tool": "json_extract",
                              "arguments": {"value": "{{steps.get.output}}", "path": "truncated"}},
                             {"id": "tail", "tool": "json_extract",
                              "arguments": {"value": "{{steps.get.output.body}}", "path": ""}}])
    outputs = detail["result"]["outputs"]
    assert outputs["cut"] is False
    assert outputs["tail"]["size"] == 140_002 and outputs["tail"]["preview"].startswith('"aaa')


def test_timeouts_fail_the_step(make_app, live_server, upstream):
    _, api = live_api(make_app, live_server)
    status, _, error = run_tool(api, "http_request", {"url": f"{upstream}/slow", "timeoutMs": 200})
    assert status == "failed" and "timed out after 0.2 s" in error
    # A server that keeps sending a byte at a time is bounded by the whole-request timeout too.
    status, _, error = run_tool(api, "http_request", {"url": f"{upstream}/drip", "timeoutMs": 500})
    assert status == "failed" and "timed out" in error


def test_a_refused_connection_fails_with_a_clear_message(make_app, live_server):
    _, api = live_api(make_app, live_server)
    status, _, error = run_tool(api, "http_request", {"url": "http://127.0.0.1:9/", "timeoutMs": 1000})
    assert status == "failed" and "GET http://127.0.0.1:9/ failed: ConnectionError" in error


def test_the_schema_refuses_other_schemes_and_bad_arguments(make_app, live_server, upstream):
    tools, api = live_api(make_app, live_server)
    for args in ({"url": "file:///etc/passwd"}, {"url": "ftp://example.com/"}, {"url": "gopher://x"},
                 {"url": f"{upstream}/json", "method": "TRACE"}, {"url": f"{upstream}/json", "timeoutMs": 10},
                 {"url": f"{upstream}/json", "maxBytes": 0}, {"url": f"{upstream}/json", "extra": 1}, {}):
        resp = api.http.post(f"{api.base}/api/agent/run", json={"goal": "g", "config": {
            "planApproval": "auto", "plan": {"steps": [{"tool": "http_request", "arguments": args}]}}})
        body = assert_problem(resp, 400, "invalid_plan")
        assert "config.plan.steps.0.arguments" in body["errors"], body
    # A URL that only turns bad at run time fails the step before any request is made.
    detail = run_steps(api, [{"id": "u", "tool": "echo", "arguments": {"v": "file:///etc/passwd"}},
                             {"id": "get", "tool": "http_request", "arguments": {"url": "{{steps.u.output.v}}"}}])
    assert detail["status"] == "failed"
    assert "invalid arguments for http_request: url" in detail["steps"][1]["error"]
    assert detail["steps"][1]["result"] is None
