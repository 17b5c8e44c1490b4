"""Persistence of runs: rows, step executions and ordered audit events (written before they are published).

The statements are SQLAlchemy Core, built once at import: a run writes a dozen rows,
and the ORM's unit of work and per-statement cache-key building cost several times
the database work itself (docs/performance.md, "Background tasks and webhooks").
"""
import json
import uuid
from contextlib import contextmanager
from types import SimpleNamespace

from gevent.lock import RLock
from sqlalchemy import bindparam, delete, func, insert, select, update

from core.db import Prepared, connection_of, isoformat, update_where, utcnow
from core.errors import NotFound
from core.write_groups import WriteGroup

from .models import Run, RunEvent, StepExecution

ACTIVE = ("queued", "planning", "awaiting_plan_approval", "running", "awaiting_step_approval")
RESUMABLE = ("failed", "cancelled", "recovery_required")
TERMINAL = ("complete", "failed", "cancelled", "recovery_required")

_R, _S, _E = Run.__table__, StepExecution.__table__, RunEvent.__table__

_LOAD = select(_R).where(_R.c.id == bindparam("run_id"))
_LAST_SEQ = select(func.max(_E.c.seq)).where(_E.c.run_id == bindparam("run_id"))
# The run to execute and its last event seq, in one read (the seq then counts on in memory).
_LOAD_TO_RUN = Prepared(select(_R, _LAST_SEQ.scalar_subquery().label("last_seq"))
                        .where(_R.c.id == bindparam("run_id")))
_INSERT_RUN = Prepared(insert(_R))
_INSERT_EVENT = Prepared(insert(_E))
_INSERT_STEP = Prepared(insert(_S))
_STEPS = Prepared(select(_S).where(_S.c.run_id == bindparam("run_id")).order_by(_S.c.index))


def channel(run_id):
    return f"run:{run_id}"


def _new_step(run_id, step):
    """A step's execution row before it first runs, with its invocation id."""
    return SimpleNamespace(run_id=run_id, index=step["index"], step_id=step["id"], invocation_id=str(uuid.uuid4()),
                           status="pending", attempts=0, started_at=None, finished_at=None, result=None, error=None,
                           result_truncated=False)


def _step_row(row):
    # A namespace, not the Row: a Row's .index is the tuple method, not the column.
    return SimpleNamespace(**row)


class RunStore:
    def __init__(self, host):
        self.host = host
        self._seq = {}  # run id -> last event seq written by this process
        # Per run: taking a seq, committing and publishing happen under one lock, so
        # concurrent steps publish in seq order and a stream's replay/live split
        # (by seq) can neither lose nor repeat an event.
        self._locks = {}
        # Runs that end at the same moment (a wave of short runs started by one claim) write
        # their ends in one transaction (see core.write_groups).
        self._ends = WriteGroup(lambda: self.db.engine, int(host.config.get("agent.end-group", 16)))

    def _lock(self, run_id):
        lock = self._locks.get(run_id)
        if lock is None:
            lock = self._locks[run_id] = RLock()
        return lock

    def _next_seq(self, conn, run_id):
        if run_id not in self._seq:
            self._seq[run_id] = conn.execute(_LAST_SEQ, {"run_id": run_id}).scalar() or 0
        return self._seq[run_id] + 1

    @property
    def db(self):
        return self.host.db

    @contextmanager
    def _begin(self, conn=None):
        """A transaction: on ``conn`` when given (yielding it; inside the caller's transaction
        when one is open there, which the caller commits), else on a pooled connection."""
        if conn is None:
            with self.db.engine.begin() as own:
                yield own
        elif conn.in_transaction():
            yield conn
        else:
            with conn.begin():
                yield conn

    # -- runs ----------------------------------------------------------------------------

    def create(self, owner, goal, config, *, plan=None, inputs=None, workflow_id=None,
               workflow_revision=None, parent_run_id=None, session=None, status="queued"):
        """A new run row (``queued`` until its task starts); inside ``session`` when given."""
        run_id = str(uuid.uuid4())
        now = utcnow()
        values = {"id": run_id, "owner": owner, "goal": goal or "", "status": status,
                  "plan": json.dumps(plan) if plan is not None else None, "config": json.dumps(config),
                  "inputs": json.dumps(inputs or {}), "workflow_id": workflow_id,
                  "workflow_revision": workflow_revision, "parent_run_id": parent_run_id,
                  "result": None, "error": None, "created_at": now, "updated_at": now, "finished_at": None}
        if session is not None:
            _INSERT_RUN.execute(connection_of(session), values)
        else:
            with self._begin() as conn:
                _INSERT_RUN.execute(conn, values)
        return run_id

    def load(self, run_id, owner=None):
        """The run's row (columns as attributes); NotFound for an unknown id or another owner's run."""
        with self.db.engine.connect() as conn:
            run = conn.execute(_LOAD, {"run_id": run_id}).one_or_none()
        if run is None or (owner is not None and run.owner != owner):
            raise NotFound("run")
        return run

    def connection(self):
        """A connection to read a run and then write its start on (``load_to_run``, ``plan_ready``)."""
        return self.db.engine.connect()

    def load_to_run(self, run_id, conn=None):
        """The run's row for the process about to execute it; its event seq is cached from here.

        On ``conn`` when given; no transaction stays open on it afterwards.
        """
        if conn is None:
            with self.connection() as own:
                return self.load_to_run(run_id, own)
        joined = conn.in_transaction()  # the caller's transaction (a task's claim): leave it open
        run = _LOAD_TO_RUN.first(conn, {"run_id": run_id})
        if conn.in_transaction() and not joined:  # read through SQLAlchemy (an engine listener is attached)
            conn.rollback()
        if run is None:
            raise NotFound("run")
        with self._lock(run_id):
            self._seq[run_id] = run.last_seq or 0
        return run

    @staticmethod
    def _status_values(status, fields):
        now = utcnow()
        values = {"status": status, "updated_at": now}
        if status in TERMINAL:
            values["finished_at"] = now
        for key, value in fields.items():
            values[key] = json.dumps(value) if key in ("plan", "result") and value is not None else value
        return values

    def set_status(self, run_id, status, **fields):
        with self._begin() as conn:
            update_where(conn, _R, {"id": run_id}, self._status_values(status, fields))

    def finish(self, run_id, status, *, error, result, event, data, streamed, also=None, before=(),
               committed=None):
        """The terminal status and the terminal event in one transaction, then publish.

        A stream that finds the run terminal therefore also finds its last event.
        ``before``: streamed events, each with its step row change ``(index, values)``,
        that precede the terminal event in the same transaction (the last step's result).
        ``also(conn)``: more to write in that transaction (the run's task's end); its
        answer is returned once the transaction has committed. ``committed()``: called as
        soon as it has (even if this greenlet is killed while it waits for a grouped commit).

        Runs ending at the same moment share one transaction (``WriteGroup``); if that
        fails, each writes its end alone, and the error of its own reaches its caller.
        """
        before = list(before)
        with self._lock(run_id):  # held while the group writes this run's end on its behalf
            now = utcnow()
            last_seq = self._seq.get(run_id)

            def write(conn):
                extra = also(conn) if also is not None else None
                first = None
                if before:
                    for _, _, (index, values) in before:
                        update_where(conn, _S, {"run_id": run_id, "index": index}, values)
                    first = self._insert_events(conn, run_id, [(e, d) for e, d, _ in before], True)
                seq = self._next_seq(conn, run_id)
                update_where(conn, _R, {"id": run_id}, {
                    "status": status, "error": error,
                    "result": json.dumps(result) if result is not None else None,
                    "updated_at": now, "finished_at": now})
                _INSERT_EVENT.execute(conn, {"run_id": run_id, "seq": seq, "type": event,
                                             "data": json.dumps(data), "streamed": streamed, "created_at": now})
                self._seq[run_id] = seq
                return extra, first, seq

            def undo():  # nothing was written: the next attempt numbers from here
                if last_seq is not None:
                    self._seq[run_id] = last_seq
                else:
                    self._seq.pop(run_id, None)

            try:
                extra, first, seq = self._ends.run(
                    write, undo=undo, committed=(lambda _: committed()) if committed is not None else None)
            except BaseException:
                undo()
                raise
            if before:
                self._publish(run_id, [(e, d) for e, d, _ in before], first, True)
            if streamed:
                self.host.events.publish_item(channel(run_id), (event, data, seq))
        return extra

    def claim_resume(self, run_id, owner):
        """Move a resumable run back to planning, exactly once; writes the ``resumed`` marker event.

        Returns False when another request resumed it first.
        """
        with self._lock(run_id):
            # Another process (a task worker) may have written events since this one cached a seq.
            self._seq.pop(run_id, None)
            with self._begin() as conn:
                previous = conn.execute(select(_R.c.status).where(_R.c.id == run_id)).scalar()
                claimed = conn.execute(update(_R).where(_R.c.id == run_id, _R.c.owner == owner,
                                                        _R.c.status.in_(RESUMABLE))
                                       .values(status="planning", error=None, finished_at=None, updated_at=utcnow()))
                if claimed.rowcount != 1:
                    return False
                conn.execute(update(_S).where(_S.c.run_id == run_id, _S.c.status.notin_(("complete", "skipped")))
                             .values(status="pending", error=None, attempts=0, started_at=None, finished_at=None))
                seq = self._next_seq(conn, run_id)
                _INSERT_EVENT.execute(conn, {"run_id": run_id, "seq": seq, "type": "resumed",
                                             "data": json.dumps({"from": previous}), "streamed": False,
                                             "created_at": utcnow()})
            self._seq[run_id] = seq
            return True

    def mark_interrupted(self):
        """At start: runs that were active when the host stopped need recovery."""
        with self._begin() as conn:
            result = conn.execute(update(_R).where(_R.c.status.in_(ACTIVE))
                                  .values(status="recovery_required", updated_at=utcnow(),
                                          error="the host stopped while the run was active"))
            conn.execute(update(_S).where(_S.c.status == "running").values(status="pending"))
            return result.rowcount

    # -- the plan ------------------------------------------------------------------------

    def plan_ready(self, run_id, plan, events, *, start_steps=None, starting=None, fresh=False, plan_text=None,
                   conn=None, after=None):
        """The draft's status, plan and events in one transaction, then published.

        ``start_steps`` (the normalised plan, when nothing waits for approval): the step
        rows and the ``running`` status join the same transaction, and the step rows are
        returned, so an unattended run starts with one commit instead of four.
        ``starting(rows)``: the steps that start at once, as ``(index, step_start data,
        step row values)``; their starts join the transaction too, after the plan's events.
        ``fresh``: the run has never written an event, so it has no step rows yet (they are
        only ever written with or after its plan's events): they are inserted as they start,
        without looking for existing ones. ``plan_text``: ``plan`` as JSON, when the caller has it.
        ``conn``: the connection the run was loaded on (the transaction begins on it, or
        joins the one open there). ``after``: a list to append the events' announcement to,
        for a caller that commits later; otherwise they are announced once this commits.
        """
        with self._lock(run_id):
            with self._begin(conn) as conn:
                rows = None
                status = "planning" if start_steps is None else "running"
                values = self._status_values(status, {})
                values["plan"] = plan_text if plan_text is not None else json.dumps(plan)
                update_where(conn, _R, {"id": run_id}, values)
                if start_steps is not None:
                    rows = ([_new_step(run_id, step) for step in start_steps["steps"]] if fresh
                            else self._ensure_steps(conn, run_id, start_steps))
                    started = starting(rows) if starting is not None else []
                    for index, _, change in started:
                        if fresh:
                            vars(rows[index]).update(change)  # inserted below, already started
                        else:
                            update_where(conn, _S, {"run_id": run_id, "index": index}, change)
                    if fresh:
                        _INSERT_STEP.execute(conn, [dict(vars(r)) for r in rows])
                    events = [*events, *(("step_start", data) for _, data, _ in started)]
                first = self._insert_events(conn, run_id, events, True)
            if after is not None:
                after.append(lambda: self._publish(run_id, events, first, True))
            else:
                self._publish(run_id, events, first, True)
            return rows

    # -- steps ---------------------------------------------------------------------------

    def ensure_steps(self, run_id, plan):
        """One execution row per plan step, each with a stable invocation id (kept across resumes)."""
        with self._begin() as conn:
            return self._ensure_steps(conn, run_id, plan)

    def _ensure_steps(self, conn, run_id, plan):
        existing = {row.index: row for row in map(_step_row, _STEPS.rows(conn, {"run_id": run_id}))}
        new = []
        for step in plan["steps"]:
            row = existing.get(step["index"])
            if row is None:
                row = _new_step(run_id, step)
                new.append(vars(row))
                existing[step["index"]] = row
            elif row.step_id != step["id"]:
                # An edited plan put another step at this position: it is a new invocation.
                row.step_id, row.invocation_id = step["id"], str(uuid.uuid4())
                row.status, row.attempts, row.result, row.error = "pending", 0, None, None
                row.result_truncated, row.started_at, row.finished_at = False, None, None
                conn.execute(update(_S).where(_S.c.run_id == run_id, _S.c.index == row.index).values(
                    step_id=row.step_id, invocation_id=row.invocation_id, status="pending", attempts=0,
                    result=None, error=None, result_truncated=False, started_at=None, finished_at=None))
        if new:
            _INSERT_STEP.execute(conn, [dict(r) for r in new])
        gone = [index for index in existing if index >= len(plan["steps"])]
        if gone:
            conn.execute(delete(_S).where(_S.c.run_id == run_id, _S.c.index.in_(gone)))
        return [existing[i] for i in sorted(existing) if i < len(plan["steps"])]

    def steps(self, run_id):
        with self.db.engine.connect() as conn:
            rows = [_step_row(r) for r in _STEPS.rows(conn, {"run_id": run_id})]
        return rows

    def update_step(self, run_id, index, **values):
        with self._begin() as conn:
            update_where(conn, _S, {"run_id": run_id, "index": index}, values)

    # -- events --------------------------------------------------------------------------

    def emit(self, run_id, event, data, *, streamed=True, step=None):
        """Commit the event (with the step row change ``step=(index, values)`` in the same
        transaction), then publish it; returns its sequence number."""
        return self.emit_many(run_id, [(event, data)], streamed=streamed, step=step)[-1]

    def emit_many(self, run_id, events, *, streamed=True, step=None):
        """Several events in one transaction (a plan's tokens), published in order after it."""
        with self._lock(run_id):
            with self._begin() as conn:
                if step is not None:
                    index, values = step
                    update_where(conn, _S, {"run_id": run_id, "index": index}, values)
                first = self._insert_events(conn, run_id, events, streamed)
            self._publish(run_id, events, first, streamed)
            return list(range(first, first + len(events)))

    def _insert_events(self, conn, run_id, events, streamed):
        """Insert ``events`` after the run's last seq; returns the first new seq (the caller holds the lock)."""
        first = self._next_seq(conn, run_id)
        now = utcnow()
        # An event may carry its data already as JSON text, third (a cached plan's events).
        _INSERT_EVENT.execute(conn, [{"run_id": run_id, "seq": first + offset, "type": item[0],
                                      "data": item[2] if len(item) > 2 else json.dumps(item[1]),
                                      "streamed": streamed, "created_at": now}
                                     for offset, item in enumerate(events)])
        self._seq[run_id] = first + len(events) - 1
        return first

    def _publish(self, run_id, events, first, streamed):
        if streamed:
            for offset, item in enumerate(events):
                self.host.events.publish_item(channel(run_id), (item[0], item[1], first + offset))

    def events(self, run_id, streamed_only=False, since_resume=False):
        """Ordered audit events; ``since_resume``: only those after the last ``resumed`` marker."""
        query = select(_E).where(_E.c.run_id == run_id).order_by(_E.c.seq)
        if streamed_only:
            query = query.where(_E.c.streamed.is_(True))
        if since_resume:
            marker = (select(func.max(_E.c.seq))
                      .where(_E.c.run_id == run_id, _E.c.type == "resumed").scalar_subquery())
            query = query.where(_E.c.seq > func.coalesce(marker, 0))
        with self.db.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [{"seq": e.seq, "type": e.type, "data": json.loads(e.data),
                 "createdAt": isoformat(e.created_at), "streamed": bool(e.streamed)} for e in rows]

    def forget(self, run_id):
        self._seq.pop(run_id, None)
        self._locks.pop(run_id, None)

    # -- views ---------------------------------------------------------------------------

    def summaries(self, owner, limit=50):
        with self.db.engine.connect() as conn:
            rows = conn.execute(select(_R).where(_R.c.owner == owner).order_by(_R.c.updated_at.desc(), _R.c.id)
                                .limit(limit)).all()
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
