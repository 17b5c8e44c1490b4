"""The plan-and-execute engine: runs an AgentPlan as a dependency graph, with gates, retries and cancel."""
import json
import logging
import secrets
import time

import gevent
from gevent.event import AsyncResult, Event
from gevent.lock import RLock
from gevent.pool import Pool

from core import plans
from core.db import utcnow
from core.errors import ApiError
from core.tools import ToolContext, ToolError

from .store import RunStore, channel

log = logging.getLogger("agenthost.agent")

DISPLAY_CAP = 16 * 1024  # bytes of JSON shown per step result on the stream and in history
DEFAULT_CONCURRENCY = 8


class RunCancelled(Exception):
    pass


class Gate:
    def __init__(self, kind, index=None):
        self.gate_id = secrets.token_urlsafe(18)
        self.kind = kind  # "plan" | "step"
        self.index = index
        self.released = AsyncResult()


class ActiveRun:
    def __init__(self, run_id):
        self.run_id = run_id
        self.cancelled = Event()
        self.gate = None
        self.greenlet = None
        self.lock = RLock()


def display(result):
    """The result as shown (size-capped), and whether it was truncated."""
    text = json.dumps(result, default=str)
    if len(text) <= DISPLAY_CAP:
        return result, False
    return {"truncated": text[:DISPLAY_CAP]}, True


class Engine:
    def __init__(self, host, store: RunStore):
        self.host = host
        self.store = store
        self.active = {}
        self.concurrency = int(host.config.get("agent.step-concurrency", DEFAULT_CONCURRENCY))

    # -- starting ------------------------------------------------------------------------

    def start(self, run_id, *, resume=False):
        active = ActiveRun(run_id)
        self.active[run_id] = active
        active.greenlet = gevent.spawn(self._execute, active, resume)
        return active

    def stop_all(self):
        """Host shutdown: stop every run where it is, without finishing it.

        The rows stay active, so the next start marks them recovery-required and they
        can be resumed; completed steps are already committed and never run again.
        """
        greenlets = [a.greenlet for a in self.active.values() if a.greenlet is not None]
        gevent.killall(greenlets, timeout=5)
        self.active.clear()

    # -- gates ---------------------------------------------------------------------------

    def approve(self, run_id, gate_id=None, plan=None):
        """Release the armed gate exactly once; raise 409 for a stale, late or duplicate gateId."""
        active = self.active.get(run_id)
        if active is None:
            raise ApiError(409, "no_gate_armed", "The run is not waiting for approval.")
        with active.lock:
            gate = active.gate
            if gate is None or gate.released.ready():
                raise ApiError(409, "no_gate_armed", "The run is not waiting for approval.")
            if gate_id is not None and gate_id != gate.gate_id:
                raise ApiError(409, "stale_gate", "The gateId does not match the armed gate; refresh the run.",
                               armedGateId=None)
            if plan is not None and gate.kind != "plan":
                raise ApiError(409, "plan_edit_not_allowed", "A plan can only be edited at plan approval.")
            active.gate = None
            gate.released.set({"by": "user", "plan": plan})
        return {"ok": True, "gateId": gate.gate_id, "kind": gate.kind}

    def cancel(self, run_id):
        active = self.active.get(run_id)
        if active is None:
            return False
        active.cancelled.set()
        with active.lock:
            if active.gate is not None and not active.gate.released.ready():
                active.gate.released.set_exception(RunCancelled())
                active.gate = None
        return True

    def _wait_gate(self, active, run, gate, event, data):
        auto = run["config"].get("permissionMode") == "auto"
        with active.lock:
            if active.cancelled.is_set():
                raise RunCancelled()
            active.gate = gate
        self.store.emit(active.run_id, event, data)
        if auto:
            with active.lock:
                if active.gate is gate:
                    active.gate = None
            self.store.emit(active.run_id, "gate_released",
                            {"gateId": gate.gate_id, "kind": gate.kind, "index": gate.index,
                             "by": "permissionMode:auto"}, streamed=False)
            return None
        decision = gate.released.get()  # raises RunCancelled on cancel
        self.store.emit(active.run_id, "gate_released",
                        {"gateId": gate.gate_id, "kind": gate.kind, "index": gate.index, "by": "user",
                         "planEdited": decision.get("plan") is not None}, streamed=False)
        return decision

    # -- the run -------------------------------------------------------------------------

    def _execute(self, active, resume):
        run_id = active.run_id
        try:
            run_row = self.store.load(run_id)
            run = {"config": json.loads(run_row.config), "inputs": json.loads(run_row.inputs),
                   "goal": run_row.goal, "owner": run_row.owner,
                   "plan": json.loads(run_row.plan) if run_row.plan else None}
            plan = self._plan(active, run, resume)
            self._run_steps(active, run, plan)
        except RunCancelled:
            self._finish(active, run_row, "cancelled", error="cancelled")
        except _RunFailed as exc:
            self._finish(active, run_row, "failed", error=str(exc))
        except Exception as exc:  # the engine itself must never leave a run hanging
            log.exception("run %s crashed", run_id)
            self._finish(active, run_row if "run_row" in locals() else None, "failed",
                         error=f"internal error: {type(exc).__name__}")

    def _plan(self, active, run, resume):
        run_id = active.run_id
        draft = run["plan"]
        if draft is None:
            raise _RunFailed("no planner is available: send a plan in config.plan")
        try:
            plan = plans.validate(draft, tools=self.host.tools)
        except plans.PlanError as exc:
            raise _RunFailed(f"invalid plan: {exc}") from None
        self.store.set_status(run_id, "planning", plan=plan)
        text = json.dumps(_public_plan(plan))
        for i in range(0, len(text), 256):
            self.store.emit(run_id, "plan_token", {"text": text[i:i + 256]})
        self.store.emit(run_id, "plan_ready", {"plan": _public_plan(plan)})
        needs_review = resume or run["config"].get("planApproval", "required") != "auto"
        if needs_review:
            self.store.set_status(run_id, "awaiting_plan_approval")
            gate = Gate("plan")
            decision = self._wait_gate(active, run, gate, "plan_approval_requested", {"gateId": gate.gate_id})
            if decision and decision.get("plan") is not None:
                plan = self._edited_plan(run_id, plan, decision["plan"])
        if active.cancelled.is_set():
            raise RunCancelled()
        self.store.ensure_steps(run_id, plan)
        self.store.set_status(run_id, "running", plan=plan)
        return plan

    def _edited_plan(self, run_id, old, edited):
        # The edited plan was validated by the approve endpoint; validate again against the live catalog.
        try:
            plan = plans.validate(edited, tools=self.host.tools)
        except plans.PlanError as exc:
            raise _RunFailed(f"invalid edited plan: {exc}") from None
        self.store.emit(run_id, "plan_edited", {"plan": _public_plan(plan)}, streamed=False)
        return plan

    def _run_steps(self, active, run, plan):
        run_id = active.run_id
        steps = plan["steps"]
        rows = {r.index: r for r in self.store.steps(run_id)}
        outputs, state = {}, {}
        for step in steps:
            row = rows[step["index"]]
            if row.status == "complete":
                state[step["index"]] = "complete"
                outputs[step["id"]] = json.loads(row.result) if row.result else None
            elif row.status == "skipped":
                state[step["index"]] = "skipped"
            else:
                state[step["index"]] = "pending"
        pool = Pool(self.concurrency)
        running = {}
        failure = []

        def settle_skips():
            changed = True
            while changed:
                changed = False
                for step in steps:
                    i = step["index"]
                    if state[i] != "pending" or i in running:
                        continue
                    deps = step["dependsOn"]
                    if any(state[d] not in ("complete", "skipped") for d in deps):
                        continue
                    all_skipped = bool(deps) and all(state[d] == "skipped" for d in deps)
                    if all_skipped or not plans.condition_holds(step["runWhen"], run["inputs"], outputs):
                        state[i] = "skipped"
                        self.store.update_step(run_id, i, status="skipped", finished_at=utcnow())
                        self.store.emit(run_id, "step_skipped", {"index": i, "id": step["id"]})
                        changed = True

        while True:
            if active.cancelled.is_set():
                break
            settle_skips()
            ready = [s for s in steps if state[s["index"]] == "pending" and s["index"] not in running
                     and all(state[d] in ("complete", "skipped") for d in s["dependsOn"])]
            if failure:
                break
            for step in ready:
                state[step["index"]] = "running"
                running[step["index"]] = pool.spawn(self._run_step, active, run, step, outputs, state, failure)
            if not running:
                break
            finished = gevent.wait(list(running.values()), count=1)
            for g in finished:
                for i, greenlet in list(running.items()):
                    if greenlet is g:
                        del running[i]
        if running:  # cancel or failure: running tools were told; wait for them to stop
            gevent.joinall(list(running.values()), timeout=30)
        if active.cancelled.is_set():
            raise RunCancelled()
        if failure:
            raise _RunFailed(failure[0])
        leftover = [s["id"] for s in steps if state[s["index"]] not in ("complete", "skipped")]
        if leftover:
            raise _RunFailed(f"steps could not run: {', '.join(leftover)}")
        result = {"outputs": {s["id"]: display(outputs.get(s["id"]))[0] for s in steps
                              if state[s["index"]] == "complete"},
                  "skipped": [s["id"] for s in steps if state[s["index"]] == "skipped"]}
        self._finish(active, None, "complete", result=result)

    def _run_step(self, active, run, step, outputs, state, failure):
        run_id, index = active.run_id, step["index"]
        try:
            if step["approval"]:
                self.store.update_step(run_id, index, status="awaiting_approval")
                gate = Gate("step", index)
                self._wait_gate(active, run, gate, "step_approval_requested", {"index": index, "gateId": gate.gate_id})
            tool = self.host.tools.get(step["tool"])
            retry = step["retry"]
            retry_safe = step["retrySafe"] if step["retrySafe"] is not None else bool(tool and tool.retry_safe)
            max_attempts = retry["maxAttempts"] if retry_safe else 1
            rows = {r.index: r for r in self.store.steps(run_id)}
            invocation_id = rows[index].invocation_id
            attempt = rows[index].attempts
            while True:
                if active.cancelled.is_set():
                    raise RunCancelled()
                attempt += 1
                started = time.monotonic()
                self.store.update_step(run_id, index, status="running", attempts=attempt, started_at=utcnow(),
                                       error=None)
                self.store.emit(run_id, "step_start", {"index": index, "id": step["id"], "title": step["title"],
                                                       "tool": step["tool"], "attempt": attempt,
                                                       "invocationId": invocation_id})
                try:
                    result = self._call(active, run, step, outputs, invocation_id)
                except RunCancelled:
                    raise
                except _StepFailed as exc:
                    error = str(exc)
                    if exc.retryable and attempt < max_attempts:
                        self.store.update_step(run_id, index, status="retrying", error=error)
                        self.store.emit(run_id, "step_retry", {"index": index, "nextAttempt": attempt + 1,
                                                               "maxAttempts": max_attempts,
                                                               "delayMs": retry["delayMs"], "error": error})
                        if retry["delayMs"] and active.cancelled.wait(retry["delayMs"] / 1000):
                            raise RunCancelled()
                        continue
                    self.store.update_step(run_id, index, status="failed", error=error, finished_at=utcnow())
                    state[index] = "failed"
                    failure.append(f"step {step['id']} failed: {error}")
                    return
                shown, truncated = display(result)
                self.store.update_step(run_id, index, status="complete", result=json.dumps(result, default=str),
                                       result_truncated=truncated, finished_at=utcnow())
                outputs[step["id"]] = result
                state[index] = "complete"
                self.store.emit(run_id, "step_complete", {
                    "index": index, "id": step["id"], "result": shown, "resultTruncated": truncated,
                    "attempts": attempt, "durationMs": int((time.monotonic() - started) * 1000)})
                return
        except RunCancelled:
            state[index] = "cancelled"
            self.store.update_step(run_id, index, status="cancelled", finished_at=utcnow())

    def _call(self, active, run, step, outputs, invocation_id):
        tool = self.host.tools.get(step["tool"])
        if tool is None:
            raise _StepFailed(f"tool {step['tool']!r} is no longer available", retryable=False)
        try:
            arguments = plans.resolve(step["arguments"], run["inputs"], outputs)
        except KeyError as exc:
            raise _StepFailed(str(exc.args[0]), retryable=False) from None
        try:
            tool.validate(arguments)
        except ToolError as exc:
            raise _StepFailed(str(exc), retryable=False) from None
        ctx = ToolContext(host=self.host, owner=run["owner"], run_id=active.run_id, step_id=step["id"],
                          cancelled=active.cancelled, file_refs=list(run["config"].get("fileGrants") or []))
        ctx.invocation_id = invocation_id
        try:
            result = tool.handler(arguments, ctx)
        except ToolError as exc:
            raise _StepFailed(str(exc)) from None
        except RunCancelled:
            raise
        except Exception as exc:
            log.exception("tool %s raised", step["tool"])
            raise _StepFailed(f"{step['tool']} raised {type(exc).__name__}: {exc}") from None
        if active.cancelled.is_set():
            raise RunCancelled()
        try:
            json.dumps(result)
        except (TypeError, ValueError):
            raise _StepFailed(f"{step['tool']} returned a result that is not JSON", retryable=False) from None
        return result

    # -- the end -------------------------------------------------------------------------

    def _finish(self, active, run_row, status, *, error=None, result=None):
        run_id = active.run_id
        try:
            self.store.set_status(run_id, status, error=error, result=result)
            if status == "complete":
                self.store.emit(run_id, "complete", {"runId": run_id, **(result or {})})
            elif status == "failed":
                self.store.emit(run_id, "error", {"message": error})
            else:
                self.store.emit(run_id, "cancelled", {"runId": run_id}, streamed=False)
        finally:
            self.host.events.close_channel(channel(run_id))
            self.active.pop(run_id, None)
            self.store.forget(run_id)
        summary = {"runId": run_id, "status": status, "error": error}
        center = self.host.service("notifications")
        if center is not None:
            level = {"complete": "success", "failed": "error"}.get(status, "info")
            title = {"complete": "Run complete", "failed": "Run failed"}.get(status, "Run cancelled")
            try:
                center.create(source="agent", level=level, title=title,
                              body=(error or "")[:4000] or None, link=f"agent/runs/{run_id}")
            except Exception:
                log.exception("run %s: notification failed", run_id)
        self.host.plugins.notify("run_finished", host=self.host, run=summary)


class _RunFailed(Exception):
    pass


class _StepFailed(Exception):
    def __init__(self, message, retryable=True):
        super().__init__(message)
        self.retryable = retryable


def _public_plan(plan):
    return {"goal": plan.get("goal", ""), "steps": [
        {k: v for k, v in s.items() if k != "index" and v is not None} for s in plan["steps"]]}
