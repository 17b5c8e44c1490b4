"""Every malformed server definition or request answers a problem and changes nothing."""
import sys

import pytest

from tests.conftest import TOKEN
from tests.core.problems import assert_problem
from tests.core.shared_app import module_app
from tests.mcp.support import FAST

STDIO = {"name": "s", "transport": "STDIO", "command": sys.executable}
HTTP = {"name": "h", "transport": "STREAMABLE_HTTP", "url": "http://127.0.0.1:9/mcp"}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    yield from module_app(tmp_path_factory, config=FAST)


@pytest.fixture
def api(app):
    client = app.test_client()
    client.environ_base["HTTP_X_SERVICE_TOKEN"] = TOKEN
    yield client
    assert client.get("/api/mcp/servers").json == [], "a refused request left a server behind"


BAD_DEFINITIONS = [
    ({**STDIO, "transport": "WEBSOCKET"}, "transport"),
    ({**STDIO, "transport": "stdio"}, "transport"),
    ({"name": "s", "transport": "STDIO"}, "command"),
    ({"name": "h", "transport": "SSE"}, "url"),
    ({"name": "h", "transport": "STREAMABLE_HTTP", "url": ""}, "url"),
    ({**HTTP, "url": "ftp://127.0.0.1/mcp"}, "url"),
    ({**HTTP, "url": "file:///etc/passwd"}, "url"),
    ({**HTTP, "url": "http:///no-host"}, "url"),
    ({**HTTP, "url": "http://user:pw@127.0.0.1/mcp"}, "url"),
    ({**HTTP, "url": "http://127.0.0.1:99999/mcp"}, "url"),
    ({**HTTP, "url": "http://127.0.0.1/" + "a" * 2048}, "url"),
    ({**HTTP, "command": "python"}, "command"),
    ({**HTTP, "env": {"A": "1"}}, "env"),
    ({**STDIO, "url": "http://127.0.0.1/mcp"}, "url"),
    ({**STDIO, "headers": {"X-A": "1"}}, "headers"),
    ({**STDIO, "name": ""}, "name"),
    ({**STDIO, "name": "n" * 65}, "name"),
    ({**STDIO, "name": " padded "}, "name"),
    ({**STDIO, "name": "line\nbreak"}, "name"),
    ({**STDIO, "name": 7}, "name"),
    ({**STDIO, "name": "nul\x00"}, "name"),
    ({**STDIO, "command": "c" * 4097}, "command"),
    ({**STDIO, "args": "-m mcp_server_time"}, "args"),
    ({**STDIO, "args": [1, 2]}, "args"),
    ({**STDIO, "args": ["x"] * 101}, "args"),
    ({**STDIO, "args": ["a" * 4097]}, "args"),
    ({**STDIO, "env": ["A=1"]}, "env"),
    ({**STDIO, "env": {"1BAD": "x"}}, "env"),
    ({**STDIO, "env": {"A-B": "x"}}, "env"),
    ({**STDIO, "env": {"A": 1}}, "env"),
    ({**STDIO, "env": {"A": "v" * 16385}}, "env"),
    ({**STDIO, "env": {f"K{i}": "v" for i in range(101)}}, "env"),
    ({**STDIO, "cwd": "relative/dir"}, "cwd"),
    ({**HTTP, "headers": {"Bad Header": "x"}}, "headers"),
    ({**HTTP, "headers": {"Mcp-Session-Id": "x"}}, "headers"),
    ({**HTTP, "headers": {"Content-Type": "text/plain"}}, "headers"),
    ({**HTTP, "headers": {"X-Inject": "a\r\nX-Other: b"}}, "headers"),
    ({**HTTP, "headers": {"X-Big": "v" * 8193}}, "headers"),
    ({**HTTP, "headers": {f"X-{i}": "v" for i in range(51)}}, "headers"),
    ({**HTTP, "headers": "Authorization: Bearer x"}, "headers"),
    ({**STDIO, "callTimeoutSeconds": "5"}, "callTimeoutSeconds"),
    ({**STDIO, "callTimeoutSeconds": 0}, "callTimeoutSeconds"),
    ({**STDIO, "callTimeoutSeconds": 3601}, "callTimeoutSeconds"),
    ({**STDIO, "callTimeoutSeconds": True}, "callTimeoutSeconds"),
    ({**STDIO, "enabled": True}, "enabled"),
    ({**STDIO, "env": {"API_KEY": "***"}}, "env"),
]


@pytest.mark.parametrize("body,field", BAD_DEFINITIONS,
                         ids=[f"{i}-{field}" for i, (_, field) in enumerate(BAD_DEFINITIONS)])
def test_a_bad_definition_is_a_400_naming_the_field(api, body, field):
    body = assert_problem(api.post("/api/mcp/servers", json=body), 400, "validation_failed")
    assert field in body["errors"], body["errors"]


@pytest.mark.parametrize("data,content_type,status,code", [
    (b"{not json", "application/json", 400, "malformed_json"),
    (b"[1, 2]", "application/json", 400, "malformed_json"),
    (b'{"name": NaN}', "application/json", 400, "malformed_json"),
    (b"", "application/json", 400, "body_required"),
    (b'{"name": "s"}', "text/plain", 415, "unsupported_media_type"),
])
def test_a_body_that_is_not_a_json_object_is_refused(api, data, content_type, status, code):
    assert_problem(api.post("/api/mcp/servers", data=data, content_type=content_type), status, code)


def test_a_body_over_the_size_limit_is_413(api):
    huge = b'{"name": "' + b"x" * (8 * 1024 * 1024 + 10) + b'"}'
    assert_problem(api.post("/api/mcp/servers", data=huge, content_type="application/json"), 413)


UNKNOWN = "0123456789ab"
ROUTES = [
    ("get", f"/api/mcp/servers/{UNKNOWN}", None),
    ("put", f"/api/mcp/servers/{UNKNOWN}", STDIO),
    ("delete", f"/api/mcp/servers/{UNKNOWN}", None),
    ("post", f"/api/mcp/servers/{UNKNOWN}/test", None),
    ("post", f"/api/mcp/servers/{UNKNOWN}/call", {"tool": "echo", "arguments": {}}),
    ("get", f"/api/mcp/servers/{UNKNOWN}/prompts", None),
    ("get", f"/api/mcp/servers/{UNKNOWN}/resources", None),
    ("get", f"/api/mcp/servers/{'x' * 33}", None),
]


@pytest.mark.parametrize("method,path,body", ROUTES)
def test_an_unknown_server_id_is_404(api, method, path, body):
    kwargs = {"json": body} if body is not None else {}
    assert_problem(getattr(api, method)(path, **kwargs), 404, "not_found")


ALL_ROUTES = [("get", "/api/mcp/status", None), ("get", "/api/mcp/servers", None),
              ("post", "/api/mcp/servers", STDIO)] + ROUTES[:-1]


@pytest.mark.parametrize("token", [None, "wrong-token"])
@pytest.mark.parametrize("method,path,body", ALL_ROUTES)
def test_every_mcp_endpoint_needs_the_token(app, method, path, body, token):
    client = app.test_client()
    headers = {"X-Service-Token": token} if token else {}
    kwargs = {"json": body} if body is not None else {}
    assert_problem(getattr(client, method)(path, headers=headers, **kwargs), 401, "invalid_token")


@pytest.mark.parametrize("body,field", [
    ({}, "tool"),
    ({"tool": ""}, "tool"),
    ({"tool": 5}, "tool"),
    ({"tool": "echo", "arguments": [1]}, "arguments"),
    ({"tool": "echo", "arguments": "x=1"}, "arguments"),
    ({"tool": "echo", "extra": 1}, "extra"),
])
def test_a_bad_call_body_is_a_400_even_before_the_id_is_looked_up(api, body, field):
    body = assert_problem(api.post(f"/api/mcp/servers/{UNKNOWN}/call", json=body), 400, "validation_failed")
    assert field in body["errors"]
