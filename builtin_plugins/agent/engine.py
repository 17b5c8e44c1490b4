"""The plan-and-execute engine: runs an AgentPlan as a dependency graph, with gates, retries and cancel."""
import json
import logging
import secrets
import time
import types

import gevent
from cachetools import LRUCache
from gevent.event import AsyncResult, Event
from gevent.lock import RLock, Semaphore
from gevent.pool import Pool

from core import plans
from core.db import utcnow
from core.errors import ApiError
from core.tools import ToolContext, ToolError

from .store import RunStore, channel

log = logging.getLogger("agenthost.agent")

CONTROL = "agent-control"  # bus channel for approvals and cancels of runs in other processes
DISPLAY_CAP = 16 * 1024  # bytes of JSON shown per step result on the stream and in history
DEFAULT_CONCURRENCY = 8
MAX_ERROR_CHARS = 4000
PLAN_CACHE = 64  # checked drafts kept (see Engine._checked_plan)
DEFAULT_CANCEL_GRACE = 5.0  # seconds a running tool has to notice ctx.cancelled before it is stopped


class RunCancelled(Exception):
    """The run (or this step) was told to stop."""


class Gate:
    def __init__(self, kind, index=None):
        self.gate_id = secrets.token_urlsafe(18)
        self.kind = kind  # "plan" | "step"
        self.index = index
        self.released = AsyncResult()


class ActiveRun:
    def __init__(self, run_id):
        self.run_id = run_id
        self.cancelled = Event()  # the user asked to cancel
        self.halt = Event()  # every running tool must stop (cancel, or another step failed); ctx.cancelled
        self.gate = None
        # One armed gate at a time: approve addresses "the armed gate", so concurrent
        # steps that need approval queue for it instead of replacing each other's gate.
        self.gate_slot = Semaphore(1)
        self.greenlet = None
        self.lock = RLock()
        self.end_task = None  # writes the run's task's end with the run's end (see Engine.execute)
        self.announced = set()  # step indexes whose first step_start was written with the plan
        self.last_result = []  # the last step's step_complete, written with the run's end
        self.task_ended = None
        self.started = None  # Engine.start_in's answer, when the run's start was written at its claim


def display(result):
    """The result as shown (size-capped), and whether it was truncated."""
    text = json.dumps(result, default=str)
    if len(text) <= DISPLAY_CAP:
        return result, False
    return {"preview": text[:DISPLAY_CAP], "size": len(text)}, True


class Engine:
    def __init__(self, host, store: RunStore):
        self.host = host
        self.store = store
        self.active = {}
        self.concurrency = max(1, int(host.config.get("agent.step-concurrency", DEFAULT_CONCURRENCY)))
        self.cancel_grace = float(host.config.get("agent.cancel-grace-seconds", DEFAULT_CANCEL_GRACE))
        self._plans = LRUCache(PLAN_CACHE)  # (draft text, catalog generation) -> _checked_plan's answer

    # -- starting ------------------------------------------------------------------------

    def start(self, run_id, *, resume=False):
        """Run in a greenlet of its own (tests and tools that bypass the task queue)."""
        active = ActiveRun(run_id)
        self.active[run_id] = active
        active.greenlet = gevent.spawn(self._execute, active, resume)
        return active

    def finish_unstarted(self, run_id, status, error):
        """End a run whose task never started (cancelled while queued)."""
        active = ActiveRun(run_id)
        self._finish(active, status, error=error)

    def execute(self, run_id, *, resume=False, end_task=None, started=None, cancelled=None):
        """Run to the end in the calling greenlet (the body of an ``agent_run`` task); returns
        the run's final ``(status, error, ended)``.

        ``end_task(conn, status, error)`` writes the task's end in the transaction that writes
        the run's end; ``ended`` is its answer once that committed, else None. ``started``:
        what ``start_in`` wrote when the task was claimed (the run goes on from there).
        ``cancelled``: the task's cancel event; one set before the run was registered here
        (so ``cancel`` could not reach it) cancels the run now.
        """
        active = ActiveRun(run_id)
        active.greenlet = gevent.getcurrent()
        active.end_task = end_task
        self.active[run_id] = active
        active.started = started
        if cancelled is not None and cancelled.is_set():
            active.cancelled.set()
            self._halt(active)
        status, error = self._execute(active, resume)
        return status, error, active.task_ended

    def start_in(self, conn, run_id, after):
        """Write an unattended run's start (plan, step rows, the first steps' ``step_start``)
        on ``conn``, inside the transaction that claims its task; returns what
        ``execute(started=)`` goes on from, or None when the run does not start that way
        (it waits for a person, has run before, or its plan fails: the body deals with it).
        The events are announced by ``after`` once the claim has committed.
        """
        row = self.store.load_to_run(run_id, conn)
        run = _run_fields(row)
        if row.status != "queued" or run["last_seq"] or not _unattended(run, False):
            return None
        holder = types.SimpleNamespace(run_id=run_id, announced=set())
        try:
            plan, rows = self._plan(holder, run, False, conn, after=after)
        except _RunFailed:
            return None
        return run, plan, rows, holder.announced

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
        if active is None and self.remote:
            return self._ask_remote("approve", {"runId": run_id, "gateId": gate_id, "plan": plan})
        if active is None:
            raise ApiError(409, "no_gate_armed", "The run is not waiting for approval.")
        with active.lock:
            gate = active.gate
            if gate is None or gate.released.ready():
                raise ApiError(409, "no_gate_armed", "The run is not waiting for approval.")
            if gate_id is not None and gate_id != gate.gate_id:
                raise ApiError(409, "stale_gate", "The gateId does not match the armed gate; refresh the run.")
            if plan is not None and gate.kind != "plan":
                raise ApiError(409, "plan_edit_not_allowed", "A plan can only be edited at plan approval.")
            active.gate = None
            gate.released.set({"by": "user", "plan": plan})
        return {"ok": True, "gateId": gate.gate_id, "kind": gate.kind}

    # -- runs in other processes (the RQ executor) ----------------------------------------

    @property
    def remote(self):
        return bool(self.host.config.get("service.redis-url"))

    def listen(self):
        """Obey approvals and cancels for the runs this process executes (over the Redis bus)."""
        self._listener = gevent.spawn(self._control_loop)

    def _control_loop(self):
        subscription = self.host.events.subscribe(CONTROL)
        while True:
            item = subscription.get()
            if not isinstance(item, tuple):
                subscription = self.host.events.subscribe(CONTROL)
                continue
            op, data = item[0], item[1]
            if data.get("runId") not in self.active:
                continue
            if op == "cancel":
                self.cancel(data["runId"])
            elif op == "approve":
                try:
                    reply = {"ok": self.approve(data["runId"], data.get("gateId"), data.get("plan"))}
                except ApiError as exc:
                    reply = {"error": {"status": exc.status, "code": exc.code, "detail": exc.detail}}
                self.host.events.publish(data["reply"], "reply", reply)

    def _ask_remote(self, op, data, timeout=3.0):
        from gevent.queue import Empty
        reply_channel = f"agent-reply:{secrets.token_hex(8)}"
        subscription = self.host.events.subscribe(reply_channel)
        try:
            self.host.events.publish(CONTROL, op, {**data, "reply": reply_channel})
            try:
                item = subscription.get(timeout=timeout)
            except Empty:
                raise ApiError(409, "no_gate_armed", "The run is not waiting for approval.") from None
        finally:
            subscription.close()
        body = item[1] if isinstance(item, tuple) else {}
        if "error" in body:
            err = body["error"]
            raise ApiError(err["status"], err["code"], err["detail"])
        return body.get("ok")

    def cancel(self, run_id):
        active = self.active.get(run_id)
        if active is None and self.remote:
            self.host.events.publish(CONTROL, "cancel", {"runId": run_id})  # a worker may be running it
            return True
        if active is None:
            return False
        active.cancelled.set()
        self._halt(active)
        return True

    def _halt(self, active):
        """Tell every running tool to stop and drop the armed gate."""
        active.halt.set()
        with active.lock:
            if active.gate is not None and not active.gate.released.ready():
                active.gate.released.set_exception(RunCancelled())
            active.gate = None

    def _wait_gate(self, active, run, gate, event, data):
        auto = run["config"].get("permissionMode") == "auto"
        with active.gate_slot:
            with active.lock:
                if active.halt.is_set():
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
        status, error, result = "failed", None, None
        try:
            # An unattended run reads itself and writes its start on one connection; a run
            # whose plan waits for a person must not hold a connection while it waits.
            if active.started is not None:  # written when the task was claimed
                run, plan, rows, active.announced = active.started
            else:
                with self.store.connection() as conn:
                    run = _run_fields(self.store.load_to_run(run_id, conn))
                    planned = self._plan(active, run, resume, conn) if _unattended(run, resume) else None
                plan, rows = planned if planned is not None else self._plan(active, run, resume)
            result = self._run_steps(active, run, plan, rows)
            status = "complete"
        except RunCancelled:
            status, error = "cancelled", "cancelled"
        except _RunFailed as exc:
            error = str(exc)
        except Exception as exc:  # the engine itself must never leave a run hanging
            log.exception("run %s crashed", run_id)
            error = f"internal error: {type(exc).__name__}"
        except gevent.GreenletExit:
            # Host shutdown skips the end on purpose: the run stays active and is marked
            # recovery-required at the next start. A step that completed keeps its result.
            self._write_last_result(active)
            raise
        self._finish(active, status, error=error, result=result)
        return status, error

    def _plan(self, active, run, resume, conn=None, after=None):
        """Validate the draft and publish it; returns (plan, step rows).

        An unattended run (``planApproval: auto``, not a resume) writes its plan events,
        step rows and ``running`` status in one transaction (on ``conn`` when given).
        """
        run_id = active.run_id
        if run["plan_text"] is None:
            raise _RunFailed("no planner is available: send a plan in config.plan")
        plan, shown, shown_text, events = self._checked_plan(run["plan_text"])
        check_max_steps(plan, run["config"])
        if _unattended(run, resume):
            wave = self._first_wave(plan, run)

            def starting(rows):
                invocations = {r.index: r.invocation_id for r in rows}
                return [(step["index"], *self._start_record(step, 1, invocations[step["index"]])) for step in wave]

            rows = self.store.plan_ready(run_id, shown, events, start_steps=plan, starting=starting,
                                         fresh=not run["last_seq"], plan_text=shown_text, conn=conn, after=after)
            active.announced = {step["index"] for step in wave}
            return plan, rows
        self.store.plan_ready(run_id, shown, events)
        self.store.set_status(run_id, "awaiting_plan_approval")
        gate = Gate("plan")
        decision = self._wait_gate(active, run, gate, "plan_approval_requested", {"gateId": gate.gate_id})
        if decision and decision.get("plan") is not None:
            plan = self._edited_plan(run_id, run, decision["plan"])
        if active.halt.is_set():
            raise RunCancelled()
        rows = self.store.ensure_steps(run_id, plan)
        self.store.set_status(run_id, "running", plan=public_plan(plan))
        return plan, rows

    def _first_wave(self, plan, run):
        """The steps an unattended run starts at once, when their ``step_start`` can join the
        plan's transaction: every step without dependencies, when none of them waits for
        approval or is skipped by its ``runWhen`` (those write other events first), up to
        the step concurrency (the rest wait for a place in the pool)."""
        roots = [step for step in plan["steps"] if not step["dependsOn"]]
        if any(step["approval"] or not plans.condition_holds(step["runWhen"], run["inputs"], {}) for step in roots):
            return []
        return roots[:self.concurrency]

    @staticmethod
    def _start_record(step, attempt, invocation_id):
        """The ``step_start`` event of an attempt and the step row's change that goes with it."""
        data = {"index": step["index"], "id": step["id"], "title": step["title"], "tool": step["tool"],
                "attempt": attempt, "invocationId": invocation_id}
        return data, {"status": "running", "attempts": attempt, "started_at": utcnow(), "finished_at": None,
                      "error": None}

    def _checked_plan(self, text):
        """(normalised plan, its public form, that as JSON, its plan events) for a stored draft.

        Runs of one workflow revision store the same draft, so the answer is kept per
        (draft text, tool catalog generation): a catalog change checks the draft again.
        The cached objects are shared between runs and never modified.
        """
        key = (text, self.host.tools.generation)
        checked = self._plans.get(key)
        if checked is not None:
            return checked
        try:
            plan = plans.validate(json.loads(text), tools=self.host.tools)
        except plans.PlanError as exc:
            raise _RunFailed(f"invalid plan: {exc}") from None
        shown = public_plan(plan)
        shown_text = json.dumps(shown)
        # The whole draft in order: tokens, then plan_ready; each with its data as JSON already.
        events = [("plan_token", {"text": shown_text[i:i + 256]}) for i in range(0, len(shown_text), 256)]
        events.append(("plan_ready", {"plan": shown}))
        events = [(event, data, json.dumps(data)) for event, data in events]
        checked = self._plans[key] = (plan, shown, shown_text, events)
        return checked

    def _edited_plan(self, run_id, run, edited):
        # The approve endpoint validated it; validate again against the live catalog.
        try:
            plan = plans.validate(edited, tools=self.host.tools)
        except plans.PlanError as exc:
            raise _RunFailed(f"invalid edited plan: {exc}") from None
        check_max_steps(plan, run["config"])
        self.store.emit(run_id, "plan_edited", {"plan": public_plan(plan)}, streamed=False)
        return plan

    def _run_steps(self, active, run, plan, rows):
        run_id = active.run_id
        steps = plan["steps"]
        rows = {r.index: r for r in rows}
        invocations = {i: r.invocation_id for i, r in rows.items()}
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
                    if state[i] != "pending":
                        continue
                    deps = step["dependsOn"]
                    if any(state[d] not in ("complete", "skipped") for d in deps):
                        continue
                    all_skipped = bool(deps) and all(state[d] == "skipped" for d in deps)
                    if all_skipped or not plans.condition_holds(step["runWhen"], run["inputs"], outputs):
                        state[i] = "skipped"
                        self.store.emit(run_id, "step_skipped", {"index": i, "id": step["id"]},
                                        step=(i, {"status": "skipped", "finished_at": utcnow()}))
                        changed = True

        try:
            while not active.halt.is_set() and not failure:
                settle_skips()
                ready = [s for s in steps if state[s["index"]] == "pending"
                         and all(state[d] in ("complete", "skipped") for d in s["dependsOn"])]
                for step in ready:
                    if active.halt.is_set():
                        break
                    state[step["index"]] = "running"
                    # Blocks while the pool is full: that is the concurrency bound.
                    running[step["index"]] = pool.spawn(self._run_step, active, run, step, outputs, state,
                                                        failure, invocations[step["index"]])
                if not running:
                    break
                finished = gevent.wait(list(running.values()), count=1)
                for i in [i for i, g in running.items() if g in finished]:
                    del running[i]
            if running:  # cancel or failure: the running tools were told; wait for them to stop
                gevent.joinall(list(running.values()), timeout=self.cancel_grace + 5)
        finally:
            pool.kill(block=True, timeout=5)  # shutdown kill, or a straggler past its grace
        if active.cancelled.is_set():
            raise RunCancelled()
        if failure:
            raise _RunFailed(failure[0])
        leftover = [s["id"] for s in steps if state[s["index"]] not in ("complete", "skipped")]
        if leftover:
            raise _RunFailed(f"steps could not run: {', '.join(leftover)}")
        return {"outputs": {s["id"]: display(outputs.get(s["id"]))[0] for s in steps
                            if state[s["index"]] == "complete"},
                "skipped": [s["id"] for s in steps if state[s["index"]] == "skipped"]}

    def _run_step(self, active, run, step, outputs, state, failure, invocation_id):
        run_id, index = active.run_id, step["index"]
        try:
            if step["approval"]:
                self.store.update_step(run_id, index, status="awaiting_approval")
                gate = Gate("step", index)
                self.store.set_status(run_id, "awaiting_step_approval")
                self._wait_gate(active, run, gate, "step_approval_requested", {"index": index, "gateId": gate.gate_id})
                self.store.set_status(run_id, "running")
            tool = self.host.tools.get(step["tool"])
            retry = step["retry"]
            retry_safe = step["retrySafe"] if step["retrySafe"] is not None else bool(tool and tool.retry_safe)
            max_attempts = retry["maxAttempts"] if retry_safe else 1
            attempt = 0
            while True:
                if active.halt.is_set():
                    raise RunCancelled()
                attempt += 1
                started = time.monotonic()
                if attempt == 1 and index in active.announced:
                    active.announced.discard(index)  # its start was written with the plan
                else:
                    data, values = self._start_record(step, attempt, invocation_id)
                    self.store.emit(run_id, "step_start", data, step=(index, values))
                try:
                    result = self._call(active, run, step, outputs, invocation_id)
                except _StepFailed as exc:
                    error = str(exc)[:MAX_ERROR_CHARS]
                    if exc.retryable and attempt < max_attempts:
                        self.store.emit(run_id, "step_retry", {"index": index, "nextAttempt": attempt + 1,
                                                               "maxAttempts": max_attempts,
                                                               "delayMs": retry["delayMs"], "error": error},
                                        step=(index, {"status": "retrying", "error": error}))
                        if retry["delayMs"] and active.halt.wait(retry["delayMs"] / 1000):
                            raise RunCancelled() from None
                        continue
                    self.store.update_step(run_id, index, status="failed", error=error, finished_at=utcnow())
                    state[index] = "failed"
                    failure.append(f"step {step['id']} failed: {error}")
                    self._halt(active)  # the run fails: stop the steps still running
                    return
                shown, truncated = display(result)
                data = {"index": index, "id": step["id"], "result": shown, "resultTruncated": truncated,
                        "attempts": attempt, "durationMs": int((time.monotonic() - started) * 1000)}
                values = {"status": "complete", "result": json.dumps(result), "result_truncated": truncated,
                          "finished_at": utcnow()}
                if all(st in ("complete", "skipped") for i, st in state.items() if i != index):
                    # The last step: nothing else can start after it, so its result joins the
                    # run's end (Engine._finish), one transaction instead of two.
                    active.last_result.append(("step_complete", data, (index, values)))
                else:
                    # The result row and its event commit together, before anyone hears of either.
                    self.store.emit(run_id, "step_complete", data, step=(index, values))
                outputs[step["id"]] = result
                state[index] = "complete"
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
                          cancelled=active.halt, file_refs=list(run["config"].get("fileGrants") or []))
        ctx.invocation_id = invocation_id
        outcome = self._invoke(active, tool, arguments, ctx)
        if active.halt.is_set():
            raise RunCancelled()  # a tool that stopped because it was told to: not a failure
        kind, value = outcome
        if kind == "tool_error":
            raise _StepFailed(str(value))
        if kind == "crash":
            raise _StepFailed(f"{step['tool']} raised {type(value).__name__}: {value}")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise _StepFailed(f"{step['tool']} returned a result that is not JSON ({exc})",
                              retryable=False) from None
        return value

    def _invoke(self, active, tool, arguments, ctx):
        """Run the handler in its own greenlet, so a tool that ignores ctx.cancelled can still be stopped."""

        def call():
            try:
                return "ok", tool.handler(arguments, ctx)
            except ToolError as exc:
                return "tool_error", exc
            except Exception as exc:
                log.exception("tool %s raised", tool.name)
                return "crash", exc

        worker = gevent.spawn(call)
        try:
            gevent.wait([worker, active.halt], count=1)
            if not worker.ready():
                worker.join(timeout=self.cancel_grace)
                if not worker.ready():
                    log.warning("tool %s ignored cancel for %.1f s; stopped", tool.name, self.cancel_grace)
                    raise RunCancelled()
            return worker.get()
        finally:
            if not worker.ready():
                worker.kill(block=False)

    # -- the end -------------------------------------------------------------------------

    def _finish(self, active, status, *, error=None, result=None):
        """Write the run's end, its notification and (when given) its task's end in one
        transaction; then publish, announce the notification and call ``run_finished``."""
        run_id = active.run_id
        if status == "complete":
            event, data, streamed = "complete", {"runId": run_id, **(result or {})}, True
        elif status == "failed":
            event, data, streamed = "error", {"message": error}, True
        else:
            event, data, streamed = "cancelled", {"runId": run_id}, False
        center = self.host.service("notifications")
        note = None
        if center is not None:
            try:
                note = center.check(
                    source="agent", level={"complete": "success", "failed": "error"}.get(status, "info"),
                    title={"complete": "Run complete", "failed": "Run failed"}.get(status, "Run cancelled"),
                    body=None if status == "complete" else (error or "")[:4000] or None,
                    link=f"agent/runs/{run_id}")
            except Exception:
                log.exception("run %s: notification failed", run_id)

        def also(conn):
            staged = center.insert(conn, note) if note is not None else None
            ended = active.end_task(conn, status, error) if active.end_task is not None else None
            return staged, ended

        staged = None
        end = {"error": None if status == "complete" else error, "result": result, "event": event, "data": data,
               "streamed": streamed, "before": active.last_result,
               "committed": active.last_result.clear}  # written: a shutdown now must not write it again
        try:
            try:
                staged, active.task_ended = self.store.finish(run_id, status, also=also, **end)
            except gevent.GreenletExit:
                self._write_last_result(active)  # shutdown: as in _execute
                raise
            except Exception:
                # Rolled back whole: record the run's end alone; the task queue then ends the
                # task itself, and the notification is created on its own below.
                log.warning("run %s: its end, notification and task end failed together; "
                            "recording the end alone", run_id, exc_info=True)
                self.store.finish(run_id, status, **end)
        except Exception:
            log.exception("run %s: could not record its end", run_id)
        finally:
            self.host.events.close_channel(channel(run_id))
            if self.active.get(run_id) is active:
                del self.active[run_id]
            self.store.forget(run_id)
        try:
            if staged is not None:
                center.announce(staged)
            elif note is not None:  # the end's transaction failed: the notification still goes out
                center.create(**{k: note[k] for k in ("source", "level", "title", "body", "link")})
        except Exception:
            log.exception("run %s: notification failed", run_id)
        self.host.plugins.notify("run_finished", host=self.host,
                                 run={"runId": run_id, "status": status,
                                      "error": None if status == "complete" else error})

    def _write_last_result(self, active):
        for event, data, step in active.last_result:
            try:
                self.store.emit(active.run_id, event, data, step=step)
            except Exception:
                log.exception("run %s: could not record its last step's result", active.run_id)
        active.last_result = []


def _run_fields(row):
    """What the engine reads of a run's row (``RunStore.load_to_run``)."""
    return {"config": json.loads(row.config), "inputs": json.loads(row.inputs), "goal": row.goal,
            "owner": row.owner, "plan_text": row.plan, "last_seq": row.last_seq or 0}


def _unattended(run, resume):
    """Whether the run starts without a plan review: ``planApproval: auto``, and not a resume."""
    return not resume and run["config"].get("planApproval", "required") == "auto"


class _RunFailed(Exception):
    pass


class _StepFailed(Exception):
    def __init__(self, message, retryable=True):
        super().__init__(message)
        self.retryable = retryable


def check_max_steps(plan, config):
    limit = config.get("maxSteps")
    if limit is not None and len(plan["steps"]) > limit:
        raise _RunFailed(f"the plan has {len(plan['steps'])} steps; config.maxSteps is {limit}")


def public_plan(plan):
    """A normalised plan as an AgentPlan again (valid input to plans.validate)."""
    return {"goal": plan.get("goal", ""), "steps": [
        {k: v for k, v in s.items() if k != "index" and v is not None} for s in plan["steps"]]}
