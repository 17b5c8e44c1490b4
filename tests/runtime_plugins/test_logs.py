"""Worker logs and notifications: host/notify, stderr and MCP log events, the ring, its SSE stream, logLevel."""
import pytest
import requests

from tests.conftest import HEADERS, TOKEN
from tests.core.problems import assert_problem, assert_requests_problem
from tests.notifications.support import SSEStream
from tests.runtime_plugins.support import (HELLO_ID, hello_copy, install, invoke, set_enabled, status, wait_until,
                                           worker_plugin)

ECHO = "test.echo"
LOG_FIELDS = {"timestamp", "level", "logger", "thread", "message", "sequence"}


@pytest.fixture
def echo(rt, tmp_path):
    install(rt, worker_plugin(tmp_path, "echo", ECHO))
    return ECHO


def logs(rt, plugin_id, **params):
    resp = rt.get(f"/api/plugin-runtime/{plugin_id}/logs", query_string=params)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.json


# -- host/notify ---------------------------------------------------------------------------

def test_host_notify_creates_a_plugin_notification_titled_with_the_display_name(rt, hello_zip):
    install(rt, hello_zip)
    resp = invoke(rt, HELLO_ID, "hello/notify", {"title": "Job done", "body": "3 files"})
    assert resp.status_code == 200
    note_id = resp.json["notified"]["id"]

    notes = [n for n in rt.get("/api/notifications").json if n["id"] == note_id]
    assert len(notes) == 1
    note = notes[0]
    assert note["source"] == f"plugin:{HELLO_ID}"
    assert note["title"] == "Hello: Job done"
    assert note["body"] == "3 files" and note["level"] == "success" and note["read"] is False


def test_host_notify_without_the_permission_is_a_json_rpc_error(rt, tmp_path):
    install(rt, hello_copy(tmp_path, permissions=[]), confirm=None)
    before = rt.get("/api/notifications").json

    answer = invoke(rt, HELLO_ID, "hello/notify", {"title": "Sneaky"}).json["notified"]

    assert answer["code"] == -32001 and "notify permission" in answer["message"]
    assert rt.get("/api/notifications").json == before


def test_host_notify_with_bad_params_is_invalid_params(rt, hello_zip):
    install(rt, hello_zip)
    before = rt.get("/api/notifications").json
    for params in ({"title": ""}, {"title": "   "}, {"title": "nul\u0000byte"}):
        answer = invoke(rt, HELLO_ID, "hello/notify", params).json["notified"]
        assert answer["code"] == -32602, (params, answer)
    assert rt.get("/api/notifications").json == before


# -- log events ----------------------------------------------------------------------------

def test_stderr_and_mcp_logging_become_log_events(rt, echo):
    assert invoke(rt, echo, "logs", {"tag": "a"}).status_code == 200
    assert wait_until(lambda: len([e for e in logs(rt, echo) if e["message"].endswith(" a")]) == 3)
    events = {e["message"]: e for e in logs(rt, echo)}

    assert all(set(e) == LOG_FIELDS for e in events.values())
    structured = events["structured a"]
    assert structured["level"] == "WARN" and structured["logger"] == "echo.worker"
    assert structured["thread"] == "main-1" and structured["timestamp"] == "2024-05-01T10:00:00Z"
    legacy = events["legacy line a"]
    assert legacy["logger"] is None and legacy["thread"] is None and legacy["level"] == "INFO"
    assert legacy["timestamp"]
    mcp = events["mcp a"]
    assert mcp["level"] == "ERROR" and mcp["logger"] == "echo.mcp" and mcp["thread"] is None


def test_log_sequence_rises_and_survives_a_restart(rt, echo):
    invoke(rt, echo, "logs", {"tag": "one"})
    set_enabled(rt, echo, False)
    set_enabled(rt, echo, True)
    invoke(rt, echo, "logs", {"tag": "two"})
    assert wait_until(lambda: any(e["message"] == "mcp two" for e in logs(rt, echo)))
    sequences = [e["sequence"] for e in logs(rt, echo)]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
    assert sequences[0] == 1


def test_logs_limit_returns_the_most_recent_events(rt, echo):
    for tag in "abc":
        invoke(rt, echo, "logs", {"tag": tag})
    assert wait_until(lambda: any(e["message"] == "mcp c" for e in logs(rt, echo)))
    everything = logs(rt, echo)
    assert logs(rt, echo, limit=2) == everything[-2:]


def test_a_disabled_plugin_keeps_its_recent_logs(rt, echo):
    invoke(rt, echo, "logs", {"tag": "last"})
    assert wait_until(lambda: any(e["message"] == "mcp last" for e in logs(rt, echo)))
    set_enabled(rt, echo, False)
    assert any(e["message"] == "mcp last" for e in logs(rt, echo))


@pytest.mark.parametrize("limit", ["0", "501", "-1", "many"])
def test_a_bad_logs_limit_is_400(rt, echo, limit):
    problem = assert_problem(rt.get(f"/api/plugin-runtime/{ECHO}/logs", query_string={"limit": limit}), 400)
    assert "limit" in problem["errors"]


def test_logs_of_an_unknown_plugin_are_404(rt):
    assert_problem(rt.get("/api/plugin-runtime/no.such.plugin/logs"), 404)
    assert_problem(rt.get("/api/plugin-runtime/no.such.plugin/logs/stream"), 404)


# -- the log stream ------------------------------------------------------------------------

def open_log_stream(base, plugin_id, headers=HEADERS):
    return requests.get(f"{base}/api/plugin-runtime/{plugin_id}/logs/stream", headers=headers,
                        stream=True, timeout=10)


def test_log_stream_replays_recent_events_then_streams_new_ones(rt_app, rt, echo, live_server):
    base = live_server(rt_app)
    invoke(rt, echo, "logs", {"tag": "before"})
    assert wait_until(lambda: any(e["message"] == "mcp before" for e in logs(rt, echo)))
    recent = logs(rt, echo)

    resp = open_log_stream(base, echo)
    stream = SSEStream(resp)
    try:
        assert resp.status_code == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert stream.next_frame() == {"comment": "connected"}
        replayed = [stream.next_event() for _ in recent]
        assert [f["event"] for f in replayed] == ["log"] * len(recent)
        assert [f["data"] for f in replayed] == recent

        invoke(rt, echo, "logs", {"tag": "after"})
        live = [stream.next_event()["data"] for _ in range(3)]
        assert sorted(e["message"] for e in live) == ["legacy line after", "mcp after", "structured after"]
        assert min(e["sequence"] for e in live) > recent[-1]["sequence"]
        assert all(set(e) == LOG_FIELDS for e in live)
    finally:
        stream.close()


def test_log_stream_needs_the_token(rt_app, echo, live_server):
    base = live_server(rt_app)
    assert_requests_problem(open_log_stream(base, echo, headers={}), 401)
    assert_requests_problem(open_log_stream(base, echo, headers={"X-Service-Token": TOKEN + "x"}), 401)
    assert rt_app.extensions["agenthost"].events.subscriber_count(f"plugin-logs:{echo}") == 0


# -- log level -----------------------------------------------------------------------------

def test_log_level_changes_reach_a_running_worker(rt, hello_zip):
    install(rt, hello_zip)
    assert invoke(rt, HELLO_ID, "ping").status_code == 200
    pid = status(rt, HELLO_ID)["pid"]

    assert rt.put("/api/settings", json={"logLevel": "DEBUG"}).status_code == 200

    assert wait_until(lambda: any(e["message"] == "log level is now debug" for e in logs(rt, HELLO_ID)))
    assert status(rt, HELLO_ID)["pid"] == pid  # live, without a restart


def test_a_new_worker_starts_with_the_stored_log_level(rt, echo):
    assert rt.put("/api/settings", json={"logLevel": "WARN"}).status_code == 200
    params = invoke(rt, echo, "initialize-params").json
    assert params["_meta"]["agenthost"]["logLevel"] == "WARN"
    assert params["_meta"]["agenthost"]["pluginId"] == ECHO
    assert params["protocolVersion"] == "2025-06-18"
