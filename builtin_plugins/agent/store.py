"""Persistence of runs: rows, step executions and ordered audit events (written before they are published)."""
import json
import uuid

from gevent.lock import RLock
from sqlalchemy import func, select, update

from core.db import isoformat, utcnow
from core.errors import NotFound

from .models import Run, RunEvent, StepExecution

ACTIVE = ("queued", "planning", "awaiting_plan_approval", "running", "awaiting_step_approval")
RESUMABLE = ("failed", "cancelled", "recovery_required")
TERMINAL = ("complete", "failed", "cancelled", "recovery_required")


def channel(run_id):
    return f"run:{run_id}"


class RunStore:
    def __init__(self, host):
        self.host = host
        self._seq = {}  # run id -> last event seq written by this process
        # Per run: taking a seq, committing and publishing happen under one lock, so
        # concurrent steps publish in seq order and a stream's replay/live split
        # (by seq) can neither lose nor repeat an event.
        self._locks = {}

    def _lock(self, run_id):
        lock = self._locks.get(run_id)
        if lock is None:
            lock = self._locks[run_id] = RLock()
        return lock

    def _next_seq(self, s, run_id):
        if run_id not in self._seq:
            self._seq[run_id] = s.execute(select(func.max(RunEvent.seq))
                                          .where(RunEvent.run_id == run_id)).scalar() or 0
        return self._seq[run_id] + 1

    @property
    def db(self):
        return self.host.db

    # -- runs ----------------------------------------------------------------------------

    def create(self, owner, goal, config, *, plan=None, inputs=None, workflow_id=None,
               workflow_revision=None, parent_run_id=None, session=None, status="queued"):
        """A new run row (``queued`` until its task starts); inside ``session`` when given."""
        run_id = str(uuid.uuid4())
        now = utcnow()
        row = Run(id=run_id, owner=owner, goal=goal or "", status=status,
                  plan=json.dumps(plan) if plan is not None else None, config=json.dumps(config),
                  inputs=json.dumps(inputs or {}), workflow_id=workflow_id,
                  workflow_revision=workflow_revision, parent_run_id=parent_run_id,
                  created_at=now, updated_at=now)
        if session is not None:
            session.add(row)
        else:
            with self.db.session() as s:
                s.add(row)
        return run_id

    def load(self, run_id, owner=None):
        with self.db.session() as s:
            run = s.get(Run, run_id)
            if run is None or (owner is not None and run.owner != owner):
                raise NotFound("run")
            s.expunge(run)
            return run

    def set_status(self, run_id, status, **fields):
        values = {"status": status, "updated_at": utcnow()}
        if status in TERMINAL:
            values["finished_at"] = utcnow()
        for key, value in fields.items():
            values[key] = json.dumps(value) if key in ("plan", "result") and value is not None else value
        with self.db.session() as s:
            s.execute(update(Run).where(Run.id == run_id).values(**values))

    def finish(self, run_id, status, *, error, result, event, data, streamed):
        """The terminal status and the terminal event in one transaction, then publish.

        A stream that finds the run terminal therefore also finds its last event.
        """
        with self._lock(run_id):
            now = utcnow()
            with self.db.session() as s:
                seq = self._next_seq(s, run_id)
                s.execute(update(Run).where(Run.id == run_id).values(
                    status=status, error=error, result=json.dumps(result) if result is not None else None,
                    updated_at=now, finished_at=now))
                s.add(RunEvent(run_id=run_id, seq=seq, type=event, data=json.dumps(data), streamed=streamed,
                               created_at=now))
            self._seq[run_id] = seq
            if streamed:
                self.host.events.publish_item(channel(run_id), (event, data, seq))

    def claim_resume(self, run_id, owner):
        """Move a resumable run back to planning, exactly once; writes the ``resumed`` marker event.

        Returns False when another request resumed it first.
        """
        with self._lock(run_id):
            # Another process (a task worker) may have written events since this one cached a seq.
            self._seq.pop(run_id, None)
            with self.db.session() as s:
                previous = s.execute(select(Run.status).where(Run.id == run_id)).scalar()
                claimed = s.execute(update(Run).where(Run.id == run_id, Run.owner == owner,
                                                      Run.status.in_(RESUMABLE))
                                    .values(status="planning", error=None, finished_at=None, updated_at=utcnow())
                                    .execution_options(synchronize_session=False))
                if claimed.rowcount != 1:
                    return False
                s.execute(update(StepExecution)
                          .where(StepExecution.run_id == run_id,
                                 StepExecution.status.notin_(("complete", "skipped")))
                          .values(status="pending", error=None, attempts=0, started_at=None, finished_at=None))
                seq = self._next_seq(s, run_id)
                s.add(RunEvent(run_id=run_id, seq=seq, type="resumed", data=json.dumps({"from": previous}),
                               streamed=False, created_at=utcnow()))
            self._seq[run_id] = seq
            return True

    def mark_interrupted(self):
        """At start: runs that were active when the host stopped need recovery."""
        with self.db.session() as s:
            result = s.execute(update(Run).where(Run.status.in_(ACTIVE))
                               .values(status="recovery_required", updated_at=utcnow(),
                                       error="the host stopped while the run was active"))
            s.execute(update(StepExecution).where(StepExecution.status == "running")
                      .values(status="pending"))
            return result.rowcount

    # -- steps ---------------------------------------------------------------------------

    def ensure_steps(self, run_id, plan):
        """One execution row per plan step, each with a stable invocation id (kept across resumes)."""
        with self.db.session() as s:
            existing = {row.index: row for row in s.execute(
                select(StepExecution).where(StepExecution.run_id == run_id)).scalars()}
            for step in plan["steps"]:
                row = existing.get(step["index"])
                if row is None:
                    s.add(StepExecution(run_id=run_id, index=step["index"], step_id=step["id"],
                                        invocation_id=str(uuid.uuid4()), status="pending", attempts=0,
                                        result_truncated=False))
                elif row.step_id != step["id"]:
                    # An edited plan put another step at this position: it is a new invocation.
                    row.step_id, row.invocation_id = step["id"], str(uuid.uuid4())
                    row.status, row.attempts, row.result, row.error = "pending", 0, None, None
                    row.result_truncated, row.started_at, row.finished_at = False, None, None
            for index, row in existing.items():
                if index >= len(plan["steps"]):
                    s.delete(row)

    def steps(self, run_id):
        with self.db.session() as s:
            rows = s.execute(select(StepExecution).where(StepExecution.run_id == run_id)
                             .order_by(StepExecution.index)).scalars().all()
            for row in rows:
                s.expunge(row)
            return rows

    def update_step(self, run_id, index, **values):
        with self.db.session() as s:
            s.execute(update(StepExecution).where(StepExecution.run_id == run_id,
                                                  StepExecution.index == index).values(**values))

    # -- events --------------------------------------------------------------------------

    def emit(self, run_id, event, data, *, streamed=True, step=None):
        """Commit the event (with the step row change ``step=(index, values)`` in the same
        transaction), then publish it; returns its sequence number."""
        return self.emit_many(run_id, [(event, data)], streamed=streamed, step=step)[-1]

    def emit_many(self, run_id, events, *, streamed=True, step=None):
        """Several events in one transaction (a plan's tokens), published in order after it."""
        with self._lock(run_id):
            with self.db.session() as s:
                if step is not None:
                    index, values = step
                    s.execute(update(StepExecution).where(StepExecution.run_id == run_id,
                                                          StepExecution.index == index).values(**values))
                seq = self._next_seq(s, run_id)
                first = seq
                now = utcnow()
                for offset, (event, data) in enumerate(events):
                    s.add(RunEvent(run_id=run_id, seq=first + offset, type=event, data=json.dumps(data),
                                   streamed=streamed, created_at=now))
                last = first + len(events) - 1
            self._seq[run_id] = last
            if streamed:
                for offset, (event, data) in enumerate(events):
                    self.host.events.publish_item(channel(run_id), (event, data, first + offset))
            return list(range(first, last + 1))

    def events(self, run_id, streamed_only=False, since_resume=False):
        """Ordered audit events; ``since_resume``: only those after the last ``resumed`` marker."""
        query = select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.seq)
        if streamed_only:
            query = query.where(RunEvent.streamed.is_(True))
        if since_resume:
            marker = (select(func.max(RunEvent.seq))
                      .where(RunEvent.run_id == run_id, RunEvent.type == "resumed").scalar_subquery())
            query = query.where(RunEvent.seq > func.coalesce(marker, 0))
        with self.db.session() as s:
            return [{"seq": e.seq, "type": e.type, "data": json.loads(e.data),
                     "createdAt": isoformat(e.created_at), "streamed": bool(e.streamed)}
                    for e in s.execute(query).scalars()]

    def forget(self, run_id):
        self._seq.pop(run_id, None)
        self._locks.pop(run_id, None)

    # -- views ---------------------------------------------------------------------------

    def summaries(self, owner, limit=50):
        with self.db.session() as s:
            rows = s.execute(select(Run).where(Run.owner == owner).order_by(Run.updated_at.desc(), Run.id)
                             .limit(limit)).scalars().all()
            return [summary(r) for r in rows]

    def detail(self, run_id, owner):
        run = self.load(run_id, owner)
        return {**summary(run),
                "plan": json.loads(run.plan) if run.plan else None,
                "config": json.loads(run.config),
                "inputs": json.loads(run.inputs),
                "result": json.loads(run.result) if run.result else None,
                "steps": [step_view(r, full=True) for r in self.steps(run_id)],
                "events": self.events(run_id)}


def summary(run):
    return {"runId": run.id, "goal": run.goal, "status": run.status, "workflowId": run.workflow_id,
            "workflowRevision": run.workflow_revision, "parentRunId": run.parent_run_id, "error": run.error,
            "createdAt": isoformat(run.created_at), "updatedAt": isoformat(run.updated_at),
            "finishedAt": isoformat(run.finished_at)}


def step_view(row, full=False):
    view = {"index": row.index, "id": row.step_id, "invocationId": row.invocation_id, "status": row.status,
            "attempts": row.attempts, "startedAt": isoformat(row.started_at),
            "finishedAt": isoformat(row.finished_at), "error": row.error,
            "resultTruncated": bool(row.result_truncated)}
    if full:
        view["result"] = json.loads(row.result) if row.result else None
    return view
