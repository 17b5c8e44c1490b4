"""Agent logic: starting runs, gates, cancel, resume, history. Other areas use it as host.service("agent")."""
import json

from core import plans
from core.errors import ApiError

from .engine import Engine
from .store import ACTIVE, RESUMABLE, RunStore, step_view

OWNER = "local"


class AgentService:
    def __init__(self, host):
        self.host = host
        self.store = RunStore(host)
        self.engine = Engine(host, self.store)

    @staticmethod
    def parse_config(raw):
        """Validate an agent ``config`` object (for other areas' endpoints that take one)."""
        from marshmallow import ValidationError

        from .schemas import AgentConfig
        try:
            return AgentConfig().load(raw or {})
        except ValidationError as exc:
            raise ValidationError({"config": exc.messages}) from None

    def recover(self):
        return self.store.mark_interrupted()

    def start_run(self, goal, config, *, owner=OWNER, plan=None, inputs=None, workflow_id=None,
                  workflow_revision=None, parent_run_id=None):
        """Create and start a run; returns its id. ``plan`` (or ``config.plan``) is the draft plan."""
        draft = plan if plan is not None else config.get("plan")
        stored_config = {k: v for k, v in config.items() if k != "plan"}
        run_id = self.store.create(owner, goal, stored_config, plan=draft, inputs=inputs, workflow_id=workflow_id,
                                   workflow_revision=workflow_revision, parent_run_id=parent_run_id)
        self.engine.start(run_id)
        return run_id

    def approve(self, run_id, gate_id=None, plan=None, owner=OWNER):
        run = self.store.load(run_id, owner)
        if plan is not None:
            try:
                plans.validate(plan, tools=self.host.tools)
            except plans.PlanError as exc:
                raise ApiError(400, "invalid_plan", str(exc), errors=exc.errors) from None
        if run.status not in ACTIVE:
            raise ApiError(409, "no_gate_armed", f"The run is {run.status}; nothing waits for approval.")
        return self.engine.approve(run_id, gate_id, plan)

    def cancel(self, run_id, owner=OWNER):
        run = self.store.load(run_id, owner)
        if run.status not in ACTIVE:
            raise ApiError(409, "run_not_active", f"The run is already {run.status}.")
        cancelled = self.engine.cancel(run_id)
        return {"ok": True, "cancelled": cancelled, "status": "cancelling" if cancelled else run.status}

    def resume(self, run_id, owner=OWNER):
        run = self.store.load(run_id, owner)
        if run.status not in RESUMABLE:
            raise ApiError(409, "not_resumable", f"A {run.status} run cannot be resumed.")
        if run.plan is None:
            raise ApiError(409, "not_resumable", "The run never had a plan.")
        config = json.loads(run.config)
        unfinished = [r for r in self.store.steps(run_id) if r.status not in ("complete", "skipped")]
        session_grants = [g for g in config.get("fileGrants") or [] if g.get("scope", "session") == "session"]
        if unfinished and session_grants:
            raise ApiError(409, "not_resumable",
                           "The remaining steps hold session-scoped file grants that ended with the session.")
        self.store.reset_unfinished(run_id)
        self.store.set_status(run_id, "planning", error=None)
        self.engine.start(run_id, resume=True)
        return {"runId": run_id, "status": "planning"}

    def runs(self, owner=OWNER, limit=50):
        return self.store.summaries(owner, limit)

    def run_detail(self, run_id, owner=OWNER):
        detail = self.store.detail(run_id, owner)
        detail["steps"] = [_shown(s) for s in detail["steps"]]
        return detail

    def stream_items(self, run_id):
        """Persisted stream events of a run, in order, as ``(event, data, seq)``."""
        return [(e["type"], e["data"], e["seq"]) for e in self.store.events(run_id, streamed_only=True)]

    def wait(self, run_id, timeout=600, cancelled=None):
        """Wait for a run to end (a child run of a workflow tool); its result, or ToolError."""
        import gevent

        from core.tools import ToolError

        active = self.engine.active.get(run_id)
        if active is not None and active.greenlet is not None:
            watch = [active.greenlet] + ([cancelled] if cancelled is not None else [])
            gevent.wait(watch, count=1, timeout=timeout)
            if not active.greenlet.ready():
                self.engine.cancel(run_id)
                active.greenlet.join(timeout=30)
                if cancelled is not None and cancelled.is_set():
                    raise ToolError("cancelled")
                raise ToolError(f"workflow run {run_id} timed out")
        run = self.store.load(run_id)
        if run.status == "complete":
            return json.loads(run.result) if run.result else None
        raise ToolError(f"workflow run {run_id} {run.status}: {run.error or ''}".strip())

    def shutdown(self):
        self.engine.stop_all()


def _shown(step):
    from .engine import display
    if step.get("result") is not None:
        step["result"], truncated = display(step["result"])
        step["resultTruncated"] = step["resultTruncated"] or truncated
    return step


__all__ = ["AgentService", "step_view"]
