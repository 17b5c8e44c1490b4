"""Shared helpers for agent tests: test tools, an SSE reader over real HTTP, run helpers."""
import json

import gevent
import requests
from gevent.event import Event

from core.tools import Tool, ToolError
from hookspecs import hookimpl
from tests.conftest import HEADERS


class Tools:
    """Test tools (recording their calls) and a run_finished recorder."""

    __name__ = "agent_test_tools"

    def __init__(self):
        self.calls = []  # (tool, arguments, invocation id)
        self.finished = []
        self.failures = {}  # key -> failures left for the "flaky" tool
        self.release = Event()  # lets "block" return
        self.saw_cancel = []  # steps whose tool observed ctx.cancelled
        self.hanging = []

    def _record(self, name, args, ctx):
        self.calls.append((name, args, getattr(ctx, "invocation_id", None)))

    def names(self):
        return [c[0] for c in self.calls]

    @hookimpl
    def register_tools(self, host):
        def echo(args, ctx):
            self._record("echo", args, ctx)
            return {"v": args.get("v"), "ok": True}

        def flaky_tool(name):
            def flaky(args, ctx):
                self._record(name, args, ctx)
                key = args.get("key", "flaky")
                if self.failures.get(key, 0) > 0:
                    self.failures[key] -= 1
                    raise ToolError(f"{key} not yet")
                return {"key": key, "done": True}
            return flaky

        def block(args, ctx):
            """Waits for the test to release it, or for ctx.cancelled."""
            self._record("block", args, ctx)
            while not self.release.is_set():
                if ctx.cancelled.wait(0.01):
                    self.saw_cancel.append(ctx.step_id)
                    raise ToolError("stopped: cancelled")
            return {"released": True}

        def hang(args, ctx):
            """Ignores ctx.cancelled entirely."""
            self._record("hang", args, ctx)
            try:
                gevent.sleep(3600)
            finally:
                self.hanging.append("stopped")
            return None

        def boom(args, ctx):
            self._record("boom", args, ctx)
            raise RuntimeError("kaboom")

        def not_json(args, ctx):
            self._record("not_json", args, ctx)
            return {"nan": float("nan")} if args.get("nan") else {"when": object()}

        def big(args, ctx):
            self._record("big", args, ctx)
            return {"blob": "x" * args["size"]}

        def size_of(args, ctx):
            self._record("size_of", args, ctx)
            return {"length": len(args["value"]["blob"])}

        def number(args, ctx):
            self._record("number", args, ctx)
            return args["n"] * 2

        return [
            Tool("echo", "Echo", {"type": "object"}, echo, retry_safe=True),
            Tool("flaky", "Fails while failures are left", {"type": "object"}, flaky_tool("flaky"),
                 retry_safe=True),
            Tool("flaky_unsafe", "Fails while failures are left; not retry-safe", {"type": "object"},
                 flaky_tool("flaky_unsafe")),
            Tool("block", "Blocks until released or cancelled", {"type": "object"}, block),
            Tool("hang", "Ignores cancel", {"type": "object"}, hang),
            Tool("boom", "Raises", {"type": "object"}, boom),
            Tool("not_json", "Returns a non-JSON value", {"type": "object"}, not_json),
            Tool("big", "A large result", {"type": "object", "required": ["size"],
                                            "properties": {"size": {"type": "integer"}}}, big, retry_safe=True),
            Tool("size_of", "Length of a blob", {"type": "object", "required": ["value"]}, size_of,
                 retry_safe=True),
            Tool("number", "Doubles an integer", {"type": "object", "required": ["n"],
                                                   "properties": {"n": {"type": "integer"}}}, number,
                 retry_safe=True),
        ]

    @hookimpl
    def run_finished(self, host, run):
        self.finished.append(run)


def wait_for(predicate, timeout=10.0, message="condition not reached", interval=0.01):
    hub = gevent.get_hub()
    deadline = hub.loop.now() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert hub.loop.now() < deadline, message
        gevent.sleep(interval)


class Stream:
    """One agent stream read over real HTTP in a greenlet: ``events`` fills as frames arrive."""

    def __init__(self, base, run_id, on_event=None):
        self.base, self.run_id = base, run_id
        self.events = []  # (event or ": comment", data)
        self.on_event = on_event
        ticket = requests.post(f"{base}/api/agent/stream-ticket", json={"runId": run_id}, headers=HEADERS,
                               timeout=10)
        assert ticket.status_code == 200, ticket.text
        self.response = requests.get(f"{base}/api/agent/stream",
                                     params={"runId": run_id, "ticket": ticket.json()["ticket"]},
                                     stream=True, timeout=30)
        assert self.response.status_code == 200, self.response.text
        assert self.response.headers["Content-Type"].startswith("text/event-stream")
        self.greenlet = gevent.spawn(self._read)

    def _read(self):
        event = None
        for raw in self.response.iter_lines():
            line = raw.decode()
            if line.startswith(":"):
                self.events.append((line, None))
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                self.events.append((event, data))
                if self.on_event is not None:
                    self.on_event(event, data)

    def names(self):
        return [e for e, _ in self.events if not e.startswith(":")]

    def frames(self):
        return [(e, d) for e, d in self.events if not e.startswith(":")]

    def first(self, name, timeout=10.0):
        return wait_for(lambda: next((d for e, d in self.events if e == name), None), timeout,
                        f"no {name} event; got {self.names()}")

    def count(self, name):
        return self.names().count(name)

    def wait_count(self, name, n, timeout=10.0):
        wait_for(lambda: self.count(name) >= n, timeout, f"fewer than {n} {name}; got {self.names()}")

    def join(self, timeout=15.0):
        self.greenlet.join(timeout=timeout)
        assert self.greenlet.ready(), f"the stream did not end; got {self.names()}"
        self.greenlet.get()
        return self


class Api:
    """Thin HTTP helpers against a live base URL."""

    def __init__(self, base):
        self.base = base
        self.http = requests.Session()
        self.http.headers.update(HEADERS)

    def start(self, plan, goal="g", **config):
        resp = self.http.post(f"{self.base}/api/agent/run", json={"goal": goal, "config": {"plan": plan, **config}},
                              timeout=10)
        assert resp.status_code == 201, resp.text
        return resp.json()["runId"]

    def approve(self, run_id, body=None):
        return self.http.post(f"{self.base}/api/agent/{run_id}/approve", json=body or {}, timeout=10)

    def cancel(self, run_id):
        return self.http.post(f"{self.base}/api/agent/{run_id}/cancel", timeout=10)

    def resume(self, run_id):
        return self.http.post(f"{self.base}/api/agent/runs/{run_id}/resume", timeout=10)

    def detail(self, run_id):
        resp = self.http.get(f"{self.base}/api/agent/runs/{run_id}", timeout=10)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def status(self, run_id):
        runs = self.http.get(f"{self.base}/api/agent/runs?limit=200", timeout=10).json()
        return next(r["status"] for r in runs if r["runId"] == run_id)

    def wait_status(self, run_id, *statuses, timeout=15.0):
        """Poll the (small) run list, not the detail, so polling does not slow the run down."""
        wait_for(lambda: self.status(run_id) in statuses, timeout, f"run never reached {statuses}", interval=0.02)
        return self.detail(run_id)

    def streamed(self, run_id):
        """The persisted events a stream shows, as (event, data)."""
        return [(e["type"], e["data"]) for e in self.detail(run_id)["events"] if e["streamed"]]

    def audit(self, run_id, kind):
        return [e["data"] for e in self.detail(run_id)["events"] if e["type"] == kind]


def assert_problem(resp, status, code=None):
    """A problem+json answer with the fields every error carries."""
    assert resp.status_code == status, resp.get_data(as_text=True) if hasattr(resp, "get_data") else resp.text
    assert resp.headers["Content-Type"].startswith("application/problem+json")
    body = resp.json() if callable(resp.json) else resp.json  # requests or the Flask test client
    assert {"type", "title", "status", "detail", "code"} <= set(body)
    assert body["status"] == status
    if code is not None:
        assert body["code"] == code, body
    return body


# A linear plan whose stream order is fixed: a retry, a branch that does not fire, a skip that propagates.
LINEAR = {"goal": "order", "steps": [
    {"id": "a", "tool": "echo", "arguments": {"v": 1}},
    {"id": "b", "tool": "flaky", "arguments": {"key": "b"}, "dependsOn": ["a"],
     "retry": {"maxAttempts": 2, "delayMs": 0}},
    {"id": "c", "tool": "echo", "runWhen": {"ref": "steps.b.output.done", "op": "falsy"}},
    {"id": "d", "tool": "echo", "dependsOn": ["c"]},
    {"id": "e", "tool": "echo", "dependsOn": ["b", "d"]},
]}


def auto(plan):
    """Config that runs a plan without any person in the loop."""
    return {"plan": plan, "planApproval": "auto"}
