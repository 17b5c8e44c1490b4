"""Faults: servers that never start, die, vanish and come back, hang past the timeout, or refuse our credentials."""
import os
import sys

import gevent
import pytest
from sqlalchemy import text

from tests.conftest import TOKEN
from tests.core.problems import assert_problem
from tests.mcp.support import (BAD_RESULT, EXIT_AFTER_INITIALIZE, FAST, FIXTURE_TOOLS, STDIO_FIXTURE,
                               http_definition, process_gone, wait_until)


def server_of(api, server_id):
    return api.get(f"/api/mcp/servers/{server_id}").json


def catalog_names(api):
    return {t["name"] for t in api.get("/api/agent/tools").json}


def call(api, server_id, tool, **arguments):
    return api.post(f"/api/mcp/servers/{server_id}/call", json={"tool": tool, "arguments": arguments})


def test_a_command_that_does_not_exist_fails_and_is_retried_with_capped_backoff(api):
    server = api.post("/api/mcp/servers", json={"name": "ghost", "transport": "STDIO",
                                                "command": "/nonexistent/agenthost-mcp"}).json
    assert server["state"] == "failed" and "command not found" in server["lastError"]

    seen = []

    def retried_a_few_times():
        now = server_of(api, server["id"])
        if now["retry"]:
            seen.append(now["retry"])
        return now["retry"] and now["retry"]["attempt"] >= 4

    wait_until(retried_a_few_times, what="several reconnect attempts")
    assert all(r["inMs"] <= FAST["mcp.backoff-cap-seconds"] * 1000 for r in seen), seen

    api.delete(f"/api/mcp/servers/{server['id']}")
    assert server["id"] not in api.application.extensions["agenthost"].service("mcp").connections


def test_a_stdio_server_that_exits_after_initialize_is_failed_with_its_last_words(api):
    server = api.post("/api/mcp/servers", json={"name": "brief", "transport": "STDIO", "command": sys.executable,
                                                "args": [EXIT_AFTER_INITIALIZE]}).json

    failed = wait_until(lambda: (s := server_of(api, server["id"]))["lastError"] and s, what="the failure")

    assert "exited" in failed["lastError"] and "fatal: out of cheese" in failed["lastError"]
    assert failed["state"] in ("failed", "connecting") and failed["tools"] == []
    wait_until(lambda: (server_of(api, server["id"])["retry"] or {}).get("attempt", 0) >= 2,
               what="a reconnect attempt")


def test_a_stdio_server_dying_mid_call_fails_that_call_and_is_reconnected(api):
    server = api.post("/api/mcp/servers", json=STDIO_FIXTURE).json
    first_pid = server["pid"]

    body = assert_problem(call(api, server["id"], "crash", code=3), 502, "mcp_connection_lost")

    assert "exited" in body["detail"] and "crashing on purpose" in body["detail"]
    assert wait_until(lambda: process_gone(first_pid), what="the crashed process to be reaped")
    back = wait_until(lambda: (s := server_of(api, server["id"]))["state"] == "connected" and s,
                      what="the reconnect")
    assert back["pid"] != first_pid and back["tools"] == FIXTURE_TOOLS and back["lastError"] is None
    again = call(api, server["id"], "echo", text="again")
    assert again.status_code == 200, again.json
    assert again.json["content"][0]["text"] == "again"


@pytest.mark.parametrize("transport", ["STREAMABLE_HTTP", "SSE"])
def test_an_http_server_that_goes_away_fails_calls_in_flight_and_is_reconnected_when_back(api, http_server,
                                                                                         transport):
    remote = http_server("sse" if transport == "SSE" else "streamable-http")
    server = api.post("/api/mcp/servers", json=http_definition(remote, transport, name="remote")).json
    assert server["state"] == "connected" and "remote__echo" in catalog_names(api), (server, sorted(catalog_names(api)))

    in_flight = gevent.spawn(call, api, server["id"], "sleep", seconds=30)
    gevent.sleep(0.3)  # the call is on the wire
    remote.stop()

    in_flight.join(timeout=30)
    assert in_flight.ready(), "a call in flight hung after its server went away"
    assert_problem(in_flight.value, 502, "mcp_connection_lost")
    failed = wait_until(lambda: (s := server_of(api, server["id"]))["state"] == "failed" and s["retry"] and s,
                        what="failed state, waiting to retry")
    assert failed["lastError"] and failed["tools"] == [] and failed["retry"]["attempt"] >= 1
    assert not [n for n in catalog_names(api) if n.startswith("remote__")]
    body = assert_problem(call(api, server["id"], "echo", text="x"), 503, "mcp_not_connected")
    assert body["lastError"] == server_of(api, server["id"])["lastError"] or body["state"] != "failed"

    remote.start()  # the same port again

    back = wait_until(lambda: (s := server_of(api, server["id"]))["state"] == "connected" and s, timeout=20,
                      what="the reconnect")
    assert back["tools"] == FIXTURE_TOOLS and "remote__echo" in catalog_names(api)
    assert call(api, server["id"], "echo", text="back").json["content"][0]["text"] == "back"


def test_a_result_that_breaks_the_tools_output_schema_is_a_502_and_the_session_stays_up(api):
    server = api.post("/api/mcp/servers", json={"name": "liar", "transport": "STDIO", "command": sys.executable,
                                                "args": [BAD_RESULT]}).json
    assert server["state"] == "connected"

    for _ in range(2):  # the second call checks with the validator kept from the first
        body = assert_problem(call(api, server["id"], "count"), 502, "mcp_bad_result")
        assert "Invalid structured content returned by tool count" in body["detail"] and "'many'" in body["detail"]
    assert server_of(api, server["id"])["state"] == "connected"


def test_a_call_past_its_timeout_fails_clearly_and_the_session_stays_up(api, streamable_server):
    server = api.post("/api/mcp/servers", json=http_definition(streamable_server, "STREAMABLE_HTTP",
                                                               callTimeoutSeconds=0.5)).json

    body = assert_problem(call(api, server["id"], "sleep", seconds=30), 504, "mcp_timeout")

    assert "0.5" in body["detail"]
    assert server_of(api, server["id"])["state"] == "connected"
    assert call(api, server["id"], "echo", text="still here").json["content"][0]["text"] == "still here"


def test_a_catalog_call_past_its_timeout_raises_a_tool_error(api, streamable_server):
    from core.tools import ToolError

    api.post("/api/mcp/servers", json=http_definition(streamable_server, "STREAMABLE_HTTP", name="slow",
                                                      callTimeoutSeconds=0.3))
    with pytest.raises(ToolError, match="did not answer"):
        api.application.extensions["agenthost"].tools.call("slow__sleep", {"seconds": 30})


SECRET = "Bearer tok-" + "7" * 24


def test_a_bearer_header_is_sent_never_returned_and_stored_sealed(api, http_server, data_dir):
    remote = http_server("streamable-http", token=SECRET.split(" ", 1)[1])

    refused = api.post("/api/mcp/servers", json=http_definition(remote, "STREAMABLE_HTTP", name="no-token")).json
    assert refused["state"] == "failed" and "HTTP 401" in refused["lastError"]

    resp = api.post("/api/mcp/servers", json=http_definition(remote, "STREAMABLE_HTTP", name="with-token",
                                                             headers={"Authorization": SECRET}))
    server = resp.json
    assert server["state"] == "connected", server["lastError"]  # the server let us in: the header was sent
    assert server["headers"] == {"Authorization": "***"}
    assert call(api, server["id"], "echo", text="authorised").json["content"][0]["text"] == "authorised"

    token = SECRET.split(" ", 1)[1]
    for body in (resp.get_data(as_text=True), api.get("/api/mcp/servers").get_data(as_text=True),
                 api.get(f"/api/mcp/servers/{server['id']}").get_data(as_text=True),
                 api.get("/api/mcp/status").get_data(as_text=True),
                 api.post(f"/api/mcp/servers/{server['id']}/test").get_data(as_text=True)):
        assert token not in body

    host = api.application.extensions["agenthost"]
    with host.db.engine.connect() as conn:
        row = conn.execute(text("SELECT * FROM mcp_servers WHERE id = :id"), {"id": server["id"]}).mappings().one()
    assert not [column for column, value in row.items() if value is not None and token in str(value)]
    assert row["headers_sealed"].startswith("v1.") and row["header_names"] == '["Authorization"]'
    for folder, _, files in os.walk(data_dir):
        for name in files:
            with open(os.path.join(folder, name), "rb") as fh:
                assert token.encode() not in fh.read(), f"{name} holds the credential in the clear"

    again = api.put(f"/api/mcp/servers/{server['id']}", json=http_definition(
        remote, "STREAMABLE_HTTP", name="with-token", headers={"Authorization": "***"})).json
    assert again["state"] == "connected", "*** kept the stored credential"


def test_credentials_that_no_longer_open_leave_the_server_failed_until_entered_again(make_app, data_dir):
    first = make_app(config=FAST)
    client = first.test_client()
    client.environ_base["HTTP_X_SERVICE_TOKEN"] = TOKEN
    server = client.post("/api/mcp/servers", json={"name": "locked", "transport": "SSE",
                                                   "url": "http://127.0.0.1:9/sse",
                                                   "headers": {"Authorization": "Bearer lost"}}).json
    first.extensions["agenthost"].stop()
    (data_dir / "keyring.key").unlink()
    (data_dir / "keyring.json").unlink()

    api = make_app(config=FAST).test_client()
    api.environ_base["HTTP_X_SERVICE_TOKEN"] = TOKEN
    stuck = server_of(api, server["id"])

    assert stuck["state"] == "failed" and "stored credentials cannot be used" in stuck["lastError"]
    assert stuck["retry"] is None, "nothing to retry until the credentials are entered again"
    assert_problem(api.put(f"/api/mcp/servers/{server['id']}", json={
        "name": "locked", "transport": "SSE", "url": "http://127.0.0.1:9/sse",
        "headers": {"Authorization": "***"}}), 409, "credentials_unavailable")

    fixed = api.put(f"/api/mcp/servers/{server['id']}", json={
        "name": "locked", "transport": "SSE", "url": "http://127.0.0.1:9/sse",
        "headers": {"Authorization": "Bearer new"}}).json

    assert "cannot connect" in fixed["lastError"], "it tries to connect again"
