"""A run through the HTTP API and the real agent stream: gates, steps, branches, retries, the end."""
import json

import gevent
import requests

from core.tools import Tool, ToolError
from hookspecs import hookimpl
from tests.conftest import HEADERS


class Tools:
    """Test tools and a run_finished recorder."""

    __name__ = "agent_test_tools"

    def __init__(self):
        self.calls = []
        self.finished = []
        self.flaky_failures = 2

    @hookimpl
    def register_tools(self, host):
        def echo(args, ctx):
            self.calls.append(("echo", args))
            return {"v": args.get("v"), "ok": True}

        def flaky(args, ctx):
            if self.flaky_failures:
                self.flaky_failures -= 1
                raise ToolError("not yet")
            return 42

        return [Tool("echo", "Echo", {"type": "object"}, echo, retry_safe=True),
                Tool("flaky", "Fails twice", {"type": "object"}, flaky, retry_safe=True)]

    @hookimpl
    def run_finished(self, host, run):
        self.finished.append(run)


def read_stream(base, run_id, events):
    ticket = requests.post(f"{base}/api/agent/stream-ticket", json={"runId": run_id}, headers=HEADERS).json()["ticket"]
    resp = requests.get(f"{base}/api/agent/stream", params={"runId": run_id, "ticket": ticket}, stream=True,
                        timeout=10)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    event = None
    for raw in resp.iter_lines():
        line = raw.decode()
        if line.startswith(":"):
            events.append((line, None))
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            events.append((event, json.loads(line[6:])))
    return events


def wait_for(predicate, timeout=5.0):
    deadline = gevent.get_hub().loop.now() + timeout
    while not predicate():
        assert gevent.get_hub().loop.now() < deadline, "condition not reached"
        gevent.sleep(0.01)


PLAN = {"goal": "g", "steps": [
    {"id": "a", "tool": "echo", "arguments": {"v": 1}},
    {"id": "b", "tool": "flaky", "retry": {"maxAttempts": 3, "delayMs": 0}, "dependsOn": ["a"]},
    {"id": "c", "tool": "echo", "arguments": {"v": "{{steps.b.output}}"}},
    {"id": "d", "tool": "echo", "runWhen": {"ref": "steps.a.output.v", "op": "eq", "value": 2}},
    {"id": "e", "tool": "echo", "dependsOn": ["d"]},
]}


def test_a_run_streams_the_interface_order_and_finishes(make_app, live_server):
    tools = Tools()
    app = make_app(plugins=[tools])
    base = live_server(app)
    run_id = requests.post(f"{base}/api/agent/run", json={"goal": "g", "config": {"plan": PLAN}},
                           headers=HEADERS).json()["runId"]
    events = []
    reader = gevent.spawn(read_stream, base, run_id, events)
    wait_for(lambda: any(e == "plan_approval_requested" for e, _ in events))
    gate = next(d for e, d in events if e == "plan_approval_requested")["gateId"]

    stale = requests.post(f"{base}/api/agent/{run_id}/approve", json={"gateId": "not-the-gate"}, headers=HEADERS)
    assert stale.status_code == 409
    assert requests.post(f"{base}/api/agent/{run_id}/approve", json={"gateId": gate}, headers=HEADERS).ok
    again = requests.post(f"{base}/api/agent/{run_id}/approve", json={"gateId": gate}, headers=HEADERS)
    assert again.status_code == 409  # a late duplicate releases nothing
    reader.join(timeout=10)

    names = [e for e, _ in events]
    assert names[0] == ": connected"
    assert names[-1] == "complete"
    body = [n for n in names if not n.startswith(":")]
    assert body.index("plan_ready") < body.index("plan_approval_requested") < body.index("step_start")
    assert body.count("step_retry") == 2
    retry = next(d for e, d in events if e == "step_retry")
    assert retry == {"index": 1, "nextAttempt": 2, "maxAttempts": 3, "delayMs": 0, "error": "not yet"}
    skipped = sorted(d["index"] for e, d in events if e == "step_skipped")
    assert skipped == [3, 4]  # d's branch did not fire; e's only dependency was skipped
    assert ("echo", {"v": 42}) in tools.calls  # the whole-placeholder kept the int type

    detail = requests.get(f"{base}/api/agent/runs/{run_id}", headers=HEADERS).json()
    assert detail["status"] == "complete"
    assert [(s["id"], s["status"], s["attempts"]) for s in detail["steps"]] == [
        ("a", "complete", 1), ("b", "complete", 3), ("c", "complete", 1), ("d", "skipped", 0), ("e", "skipped", 0)]
    assert [e["seq"] for e in detail["events"]] == list(range(1, len(detail["events"]) + 1))
    assert tools.finished == [{"runId": run_id, "status": "complete", "error": None}]
    notes = requests.get(f"{base}/api/notifications", headers=HEADERS).json()
    assert notes[0]["source"] == "agent" and run_id in notes[0]["link"]

    # A stream opened after the end replays the persisted events in order, then ends.
    late = read_stream(base, run_id, [])
    assert [e for e, _ in late if not e.startswith(":")] == body
