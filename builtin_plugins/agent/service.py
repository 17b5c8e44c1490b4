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

        from .schemas import CONFIG
        try:
            return CONFIG.load(raw or {})
        except ValidationError as exc:
            raise ValidationError({"config": exc.messages}) from None

    def recover(self):
        return self.store.mark_interrupted()

    def start_run(self, goal, config, *, owner=OWNER, plan=None, inputs=None, workflow_id=None,
                  workflow_revision=None, parent_run_id=None, priority="interactive", source=None,
                  session=None, task_id=None):
        """Create a run and admit its background task; returns the run id.

        ``plan`` (or ``config.plan``) is the draft plan. A ``config.plan`` is checked here
        (400 with per-field errors) so a bad plan never becomes a run; ``plan`` comes from
        a caller that validated it already. The run row and its task are written in one
        transaction (the caller's ``session`` when given, as a webhook delivery does), so
        a 429 from admission leaves no run behind. ``task_id`` names the task to admit
        (see ``TaskQueue.admit``).
        """
        draft = plan
        if draft is None and config.get("plan") is not None:
            draft = config["plan"]
            self.check_plan(draft, config, prefix="config.plan.")
        stored_config = {k: v for k, v in config.items() if k != "plan"}

        def write(s):
            run_id = self.store.create(owner, goal, stored_config, plan=draft, inputs=inputs,
                                       workflow_id=workflow_id, workflow_revision=workflow_revision,
                                       parent_run_id=parent_run_id, session=s)
            self.host.tasks.admit(owner, priority, "agent_run", {"runId": run_id, "resume": False},
                                  source=source or priority, run_id=run_id, session=s, task_id=task_id)
            return run_id

        if session is not None:
            return write(session)
        with self.host.db.session() as s:
            run_id = write(s)
        self.host.tasks.wake()
        return run_id

    def start_batch(self, goals, config, owner=OWNER):
        """1 to 8 independent runs of priority ``batch``, admitted all together or not at all."""
        if config.get("plan") is not None:
            self.check_plan(config["plan"], config, prefix="config.plan.")
        with self.host.db.session() as s:
            run_ids = [self.start_run(goal, config, owner=owner, priority="batch", source="batch", session=s)
                       for goal in goals]
        self.host.tasks.wake()
        return run_ids

    def run_task(self, task, ctx):
        """The body of an ``agent_run`` task: the whole run, in this greenlet (or RQ worker)."""
        from core.tasks import TaskCancelled, TaskFailed

        run_id = task["payload"]["runId"]
        started = ctx.started
        if ctx.cancelled.is_set() and started is None:  # cancelled while it waited for an executor
            self.engine.finish_unstarted(run_id, "cancelled", "cancelled before it started")
            raise TaskCancelled({"runId": run_id, "status": "cancelled"})

        def end_task(conn, status, error):
            # The task's end, written in the transaction of the run's end (see Engine.execute).
            state = {"complete": "succeeded", "failed": "failed"}.get(status, "cancelled")
            reason = {"succeeded": None, "cancelled": "cancelled"}.get(state, error or "the run failed")
            return ctx.end_in(conn, state, {"runId": run_id, "status": status}, reason)

        status, error, ctx.ended = self.engine.execute(run_id, resume=bool(task["payload"].get("resume")),
                                                       end_task=end_task, started=started,
                                                       cancelled=ctx.cancelled)
        output = {"runId": run_id, "status": status}
        if status == "failed":
            raise TaskFailed(error or "the run failed", output)
        if status == "cancelled":
            raise TaskCancelled(output)
        return output

    def start_task(self, conn, task, after):
        """An ``agent_run`` task's start, written in the transaction that claims it (see
        ``TaskQueue.register_kind``): an unattended run's plan and first steps."""
        if task["payload"].get("resume"):
            return None
        return self.engine.start_in(conn, task["payload"]["runId"], after)

    def cancel_task(self, task):
        self.engine.cancel(task["runId"])

    def check_plan(self, plan, config, prefix=""):
        """Validate an AgentPlan against the live catalog and ``config.maxSteps``; 400 otherwise."""
        try:
            normalised = plans.validate(plan, tools=self.host.tools)
        except plans.PlanError as exc:
            raise ApiError(400, "invalid_plan", f"The plan is invalid: {exc}",
                           errors={prefix + k: v for k, v in exc.errors.items()}) from None
        limit = (config or {}).get("maxSteps")
        if limit is not None and len(normalised["steps"]) > limit:
            raise ApiError(400, "invalid_plan", f"The plan has {len(normalised['steps'])} steps; "
                           f"config.maxSteps is {limit}.", errors={prefix + "steps": [f"At most {limit} steps."]})
        return normalised

    def approve(self, run_id, gate_id=None, plan=None, owner=OWNER):
        run = self.store.load(run_id, owner)
        if plan is not None:
            self.check_plan(plan, json.loads(run.config))
        if run.status not in ACTIVE:
            raise ApiError(409, "no_gate_armed", f"The run is {run.status}; nothing waits for approval.")
        return self.engine.approve(run_id, gate_id, plan)

    def cancel(self, run_id, owner=OWNER):
        run = self.store.load(run_id, owner)  # owner None: the host itself (a parent run)
        if run.status not in ACTIVE:
            raise ApiError(409, "run_not_active", f"The run is already {run.status}.")
        task = self.host.tasks.for_run(run_id) if run.status == "queued" else None
        if task is not None and task["state"] == "queued":  # still queued: take its task out of the queue
            result = self.host.tasks.cancel(task["taskId"], run.owner)
            if result["state"] == "cancelled":
                self.engine.finish_unstarted(run_id, "cancelled", "cancelled before it started")
                return {"ok": True, "cancelled": True, "status": "cancelled"}
        cancelled = self.engine.cancel(run_id)
        return {"ok": True, "cancelled": cancelled, "status": "cancelling" if cancelled else run.status}

    def resume(self, run_id, owner=OWNER):
        run = self.store.load(run_id, owner)
        if run.status not in RESUMABLE:
            raise ApiError(409, "not_resumable", f"A {run.status} run cannot be resumed.")
        if run_id in self.engine.active:
            raise ApiError(409, "not_resumable", "The run is still stopping; try again in a moment.")
        if run.plan is None:
            raise ApiError(409, "not_resumable", "The run never had a plan.")
        config = json.loads(run.config)
        unfinished = [r for r in self.store.steps(run_id) if r.status not in ("complete", "skipped")]
        session_grants = [g for g in config.get("fileGrants") or [] if g.get("scope", "session") == "session"]
        if unfinished and session_grants:
            raise ApiError(409, "not_resumable",
                           "The remaining steps hold session-scoped file grants that ended with the session.")
        if not self.store.claim_resume(run_id, owner):
            raise ApiError(409, "not_resumable", "The run was resumed by another request.")
        self.store.set_status(run_id, "queued")
        try:
            self.host.tasks.admit(run.owner, "interactive", "agent_run", {"runId": run_id, "resume": True},
                                  source="resume", run_id=run_id)
        except Exception:
            self.store.set_status(run_id, run.status, error=run.error)  # a 429 leaves it resumable
            raise
        return {"runId": run_id, "status": "queued"}

    def runs(self, owner=OWNER, limit=50):
        return self.store.summaries(owner, limit)

    def run_detail(self, run_id, owner=OWNER):
        detail = self.store.detail(run_id, owner)
        detail["steps"] = [_shown(s) for s in detail["steps"]]
        return detail

    def stream_items(self, run_id):
        """Persisted stream events of the run's current attempt (since its last resume), in order,
        as ``(event, data, seq)``: a resumed run's stream must not end at the earlier ``error``."""
        return [(e["type"], e["data"], e["seq"])
                for e in self.store.events(run_id, streamed_only=True, since_resume=True)]

    def wait(self, run_id, timeout=600, cancelled=None):
        """Wait for a run to end (a child run of a workflow tool); its result, or ToolError.

        The run may still be queued behind other tasks, so this follows the run's own
        event channel (the end closes it) rather than a greenlet.
        """
        import gevent
        from gevent.queue import Empty

        from core.tools import ToolError

        from .store import TERMINAL, channel

        subscription = self.host.events.subscribe(channel(run_id))
        deadline = gevent.get_hub().loop.now() + timeout
        try:
            while True:
                run = self.store.load(run_id)
                if run.status in TERMINAL:
                    break
                if cancelled is not None and cancelled.is_set():
                    self._stop_child(run_id)
                    raise ToolError("cancelled")
                remaining = deadline - gevent.get_hub().loop.now()
                if remaining <= 0:
                    self._stop_child(run_id)
                    raise ToolError(f"workflow run {run_id} timed out")
                if subscription.closed:  # the run ended (or the stream was dropped): re-read and follow again
                    subscription = self.host.events.subscribe(channel(run_id))
                    continue
                try:
                    subscription.get(timeout=min(remaining, 0.25))
                except Empty:
                    pass
        except (gevent.GreenletExit, gevent.Timeout):
            self._stop_child(run_id)  # the calling step was stopped: its child run stops too
            raise
        finally:
            subscription.close()
        if run.status == "complete":
            return json.loads(run.result) if run.result else None
        raise ToolError(f"workflow run {run_id} {run.status}: {run.error or ''}".strip())

    def _stop_child(self, run_id):
        try:
            self.cancel(run_id, owner=None)
        except ApiError:
            pass

    def shutdown(self):
        self.engine.stop_all()


def _shown(step):
    from .engine import display
    if step.get("result") is not None:
        step["result"], truncated = display(step["result"])
        step["resultTruncated"] = step["resultTruncated"] or truncated
    return step


__all__ = ["AgentService", "step_view"]
