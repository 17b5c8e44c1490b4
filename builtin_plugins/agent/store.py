"""Persistence of runs: rows, step executions and ordered audit events (written before they are published)."""
import json
import uuid

from sqlalchemy import func, select, update

from core.db import isoformat, utcnow
from core.errors import NotFound

from .models import Run, RunEvent, StepExecution

ACTIVE = ("planning", "awaiting_plan_approval", "running", "awaiting_step_approval")
RESUMABLE = ("failed", "cancelled", "recovery_required")
TERMINAL = ("complete", "failed", "cancelled", "recovery_required")


def channel(run_id):
    return f"run:{run_id}"


class RunStore:
    def __init__(self, host):
        self.host = host
        self._seq = {}  # run id -> last event seq written by this process

    @property
    def db(self):
        return self.host.db

    # -- runs ----------------------------------------------------------------------------

    def create(self, owner, goal, config, *, plan=None, inputs=None, workflow_id=None,
               workflow_revision=None, parent_run_id=None):
        run_id = str(uuid.uuid4())
        now = utcnow()
        with self.db.session() as s:
            s.add(Run(id=run_id, owner=owner, goal=goal or "", status="planning",
                      plan=json.dumps(plan) if plan is not None else None, config=json.dumps(config),
                      inputs=json.dumps(inputs or {}), workflow_id=workflow_id,
                      workflow_revision=workflow_revision, parent_run_id=parent_run_id,
                      created_at=now, updated_at=now))
        self._seq[run_id] = 0
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

    def set_plan(self, run_id, plan):
        with self.db.session() as s:
            s.execute(update(Run).where(Run.id == run_id).values(plan=json.dumps(plan), updated_at=utcnow()))

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
                elif row.step_id != step["id"] and row.status not in ("complete", "skipped"):
                    row.step_id = step["id"]
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

    def reset_unfinished(self, run_id):
        with self.db.session() as s:
            s.execute(update(StepExecution)
                      .where(StepExecution.run_id == run_id,
                             StepExecution.status.notin_(("complete", "skipped")))
                      .values(status="pending", error=None, finished_at=None))

    # -- events --------------------------------------------------------------------------

    def emit(self, run_id, event, data, *, streamed=True):
        """Commit the event, then publish it; returns its sequence number."""
        if run_id not in self._seq:
            with self.db.session() as s:
                self._seq[run_id] = s.execute(select(func.max(RunEvent.seq))
                                              .where(RunEvent.run_id == run_id)).scalar() or 0
        self._seq[run_id] += 1
        seq = self._seq[run_id]
        with self.db.session() as s:
            s.add(RunEvent(run_id=run_id, seq=seq, type=event, data=json.dumps(data), streamed=streamed,
                           created_at=utcnow()))
        if streamed:
            self.host.events.publish_item(channel(run_id), (event, data, seq))
        return seq

    def events(self, run_id, streamed_only=False):
        query = select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.seq)
        if streamed_only:
            query = query.where(RunEvent.streamed.is_(True))
        with self.db.session() as s:
            return [{"seq": e.seq, "type": e.type, "data": json.loads(e.data),
                     "createdAt": isoformat(e.created_at), "streamed": bool(e.streamed)}
                    for e in s.execute(query).scalars()]

    def forget(self, run_id):
        self._seq.pop(run_id, None)

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
