"""Host shutdown closes every MCP session and every server process it started."""
import sys

import requests

from core import datasource as ds_file
from tests.conftest import TOKEN
from tests.mcp.support import (FAST, FIXTURE, STDIO_FIXTURE, TIME_SERVER, children_running, http_definition,
                               process_gone, wait_until)

LINGERING = {"name": "lingering", "transport": "STDIO", "command": sys.executable,
             "args": [FIXTURE, "--transport", "stdio", "--linger"]}


def stdio_children():
    return children_running(f"{FIXTURE} --transport stdio") + children_running("-m mcp_server_time")


def test_host_shutdown_closes_every_session_and_child_process(make_app, http_server, sse_server):
    remote = http_server("streamable-http")
    app = make_app(config=FAST)
    api = app.test_client()
    api.environ_base["HTTP_X_SERVICE_TOKEN"] = TOKEN
    stdio = [api.post("/api/mcp/servers", json=d).json for d in (TIME_SERVER, STDIO_FIXTURE, LINGERING)]
    api.post("/api/mcp/servers", json=http_definition(remote, "STREAMABLE_HTTP"))
    api.post("/api/mcp/servers", json=http_definition(sse_server, "SSE"))
    pids = [s["pid"] for s in stdio]
    assert all(s["state"] == "connected" for s in api.get("/api/mcp/servers").json)
    assert sorted(stdio_children()) == sorted(pids)
    assert remote.stats()["sessions"] == 1
    host = app.extensions["agenthost"]

    host.stop()

    # Even the server that ignores EOF on stdin is gone: SIGTERM followed the polite close.
    assert all(process_gone(pid) for pid in pids), [(pid, process_gone(pid)) for pid in pids]
    assert stdio_children() == []
    assert wait_until(lambda: remote.stats()["sessions"] == 0, what="the HTTP session to be closed")
    assert not [t for t in host.tools.list() if t.source.startswith("mcp:")]


def test_core_serve_ends_its_mcp_server_processes_on_sigterm(serve_process, data_dir):
    ds_file.write(data_dir, {"type": "sqlite", "params": {"path": "db.sqlite"}})
    served = serve_process(data_dir)
    resp = requests.post(f"{served.url}/api/mcp/servers", json=LINGERING, headers=served.headers, timeout=30)
    assert resp.status_code == 201 and resp.json()["state"] == "connected", resp.text
    pid = resp.json()["pid"]
    listed = requests.get(f"{served.url}/api/agent/tools", headers=served.headers, timeout=10).json()
    assert "lingering__echo" in {t["name"] for t in listed}

    assert served.stop() == 0

    assert process_gone(pid), "the host exited and left its MCP server running"
