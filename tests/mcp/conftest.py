"""MCP fixtures: an app with fast timings, its client, and fixture servers over SSE and streamable HTTP."""
import pytest

from tests.conftest import TOKEN
from tests.mcp.support import FAST, HttpServer


@pytest.fixture
def mcp_app(make_app):
    return make_app(config=FAST)


@pytest.fixture
def api(mcp_app):
    """An authenticated test client of ``mcp_app``."""
    client = mcp_app.test_client()
    client.environ_base["HTTP_X_SERVICE_TOKEN"] = TOKEN
    return client


@pytest.fixture(scope="module")
def streamable_server():
    server = HttpServer("streamable-http")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sse_server():
    server = HttpServer("sse")
    yield server
    server.stop()


@pytest.fixture
def http_server():
    """``http_server(transport, token=None, port=0, tls=False)``: a fixture server of this test alone."""
    servers = []

    def start(transport, token=None, port=0, tls=False):
        server = HttpServer(transport, token=token, port=port, tls=tls)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
