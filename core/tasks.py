"""The background task queue: durable rows, fair admission, a dispatcher and the in-process executor."""
import collections
import json
import logging
import uuid
from dataclasses import dataclass

import gevent
from gevent.event import Event
from gevent.pool import Pool
from gevent.queue import Empty
from sqlalchemy import Boolean, String, Text, bindparam, func, insert, select, update
from sqlalchemy.orm import Mapped, mapped_column

from .db import Model, Prepared, Record, UTCDateTime, connection_of, isoformat, update_where, utcnow
from .errors import ApiError, NotFound

log = logging.getLogger("agenthost.tasks")

PRIORITIES = ("interactive", "normal", "batch")
WEIGHTS = {"interactive": 4, "normal": 2, "batch": 1}
TERMINAL = ("succeeded", "failed", "cancelled")
POLICY = "owner-round-robin-weighted-priority"
CONTROL = "tasks-control"  # bus channel: wake dispatchers, cancel running tasks wherever they run


class Task(Model):
    __tablename__ = "tasks"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), nullable=False)
    priority: Mapped[str] = mapped_column(String(16), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    kind: Mapped[str] = mapped_column(String(40), nullable=False)
    payload: Mapped[str] = mapped_column(Text, nullable=False)
    source: Mapped[str | None] = mapped_column(String(80), nullable=True)
    run_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    queued_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False)
    started_at: Mapped[object | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[object | None] = mapped_column(UTCDateTime, nullable=True)
    output: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    executor: Mapped[str | None] = mapped_column(String(16), nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    admitted_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    claimed_by: Mapped[str | None] = mapped_column(String(64), nullable=True)


class TaskLock(Model):
    __tablename__ = "task_locks"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)


_K = Task.__table__
# The statements of admission, dispatch and a task's end, built once (see core/db.update_where).
_LOCK = Prepared(select(TaskLock.__table__.c.name).where(TaskLock.__table__.c.name == "admission")
                 .with_for_update())
_QUEUED_COUNTS = Prepared(select(_K.c.owner, _K.c.priority, func.count().label("n")).where(_K.c.state == "queued")
                          .group_by(_K.c.owner, _K.c.priority))
_INSERT = Prepared(insert(_K))
_BY_ID = select(_K).where(_K.c.id == bindparam("task_id"))
# The first ``depth`` queued tasks of every (owner, priority), oldest first: what the fair
# policy can pick from when the dispatcher fills ``depth`` free places in one transaction.
_QUEUED_BY_KEY = (select(_K, func.row_number().over(partition_by=(_K.c.owner, _K.c.priority),
                                                    order_by=(_K.c.queued_at, _K.c.id)).label("place"))
                  .where(_K.c.state == "queued").subquery())
_HEADS = Prepared(select(*[_QUEUED_BY_KEY.c[c.key] for c in _K.columns])
                  .where(_QUEUED_BY_KEY.c.place <= bindparam("depth"))
                  .order_by(_QUEUED_BY_KEY.c.queued_at, _QUEUED_BY_KEY.c.id))


@dataclass(frozen=True)
class Limits:
    running: int = 16
    queued_global: int = 128
    queued_owner: int = 32
    batch_global: int = 64
    non_interactive_global: int = 96
    owner_batch: int = 16
    owner_non_interactive: int = 24
    owner_all: int = 32


class CapacityError(ApiError):
    def __init__(self, scope, priority=None, detail=None):
        extra = {"capacityScope": scope}
        if priority is not None:
            extra["capacityPriority"] = priority
        super().__init__(429, "capacity_exceeded",
                         detail or f"The background queue is full ({scope}); retry shortly.",
                         headers={"Retry-After": "1"}, **extra)


def task_view(row, now=None):
    now = now or utcnow()
    wait_end = row.started_at or (row.finished_at if row.state == "cancelled" else None) or now
    duration = None
    if row.started_at is not None:
        duration = int(((row.finished_at or now) - row.started_at).total_seconds() * 1000)
    return {
        "taskId": row.id, "owner": row.owner, "priority": row.priority, "state": row.state,
        "phase": "queued" if row.state == "queued" else "running" if row.state == "running" else "finished",
        "kind": row.kind, "source": row.source, "runId": row.run_id, "payload": json.loads(row.payload),
        "queuedAt": isoformat(row.queued_at), "startedAt": isoformat(row.started_at),
        "finishedAt": isoformat(row.finished_at),
        "queueWaitMs": max(0, int((wait_end - row.queued_at).total_seconds() * 1000)),
        "runDurationMs": duration,
        "output": json.loads(row.output) if row.output else None, "error": row.error,
    }


class FairPolicy:
    """Owners take turns; within an owner interactive:normal:batch are served 4:2:1
    (smooth weighted round robin); a task waiting longer than ``aging`` seconds goes first."""

    def __init__(self, aging_seconds=60.0):
        self.aging = aging_seconds
        self.last_owner = None
        self.credit = collections.defaultdict(lambda: dict.fromkeys(PRIORITIES, 0))

    def pick(self, heads, now):
        """``heads``: {(owner, priority): oldest queued_at}; returns the (owner, priority) to serve."""
        if not heads:
            return None
        starving = [(queued, key) for key, queued in heads.items()
                    if (now - queued).total_seconds() >= self.aging]
        if starving:
            return min(starving)[1]
        owners = sorted({owner for owner, _ in heads})
        if self.last_owner in owners:
            owner = owners[(owners.index(self.last_owner) + 1) % len(owners)]
        else:
            later = [o for o in owners if self.last_owner is not None and o > self.last_owner]
            owner = later[0] if later else owners[0]
        available = [p for p in PRIORITIES if (owner, p) in heads]
        credit = self.credit[owner]
        total = sum(WEIGHTS[p] for p in available)
        for p in available:
            credit[p] += WEIGHTS[p]
        best = max(available, key=lambda p: (credit[p], WEIGHTS[p]))
        credit[best] -= total
        self.last_owner = owner
        return owner, best


class TaskQueue:
    """Admission, dispatch and execution of background tasks (``host.tasks``)."""

    def __init__(self, host, limits=None):
        self.host = host
        self.limits = limits or Limits(running=int(host.config.get("tasks.max-running", 16)))
        self.policy = FairPolicy(float(host.config.get("tasks.aging-seconds", 60)))
        # kind -> (run(task_view, ctx) -> output, cancel(task_view) or None, start or None)
        self.kinds = {}
        self.pool = Pool(self.limits.running)
        self.running = {}  # task id -> TaskContext
        self._wake = Event()
        self._loop = None
        self._control = None
        self._stopping = False
        self.executor = None  # None: the embedded greenlet pool; else an RQExecutor
        redis_url = host.config.get("service.redis-url")
        if redis_url:
            from .rq_executor import RQExecutor
            self.executor = RQExecutor(redis_url, host.config.get("service.redis-namespace"))
        self.finished_listeners = []  # callables(task view) after a task ends
        # Callables() when a queued place may have freed: a task of this process left the
        # queue (started or cancelled), or another process said so (a "wake" on the bus).
        self.capacity_listeners = []
        self.poll_seconds = float(host.config.get("tasks.poll-seconds", 2))

    # -- kinds ---------------------------------------------------------------------------

    def register_kind(self, kind, run, cancel=None, start=None):
        """``start(conn, task, after)``, optional: the body's first writes, made in the
        transaction that claims the task for the embedded executor (one commit fewer per
        task). It runs inside a savepoint: if it raises, only its writes roll back and the
        body starts from scratch. What it returns reaches the body as ``ctx.started``;
        callables it appends to ``after`` run once the claim has committed (say, to
        announce what it wrote)."""
        self.kinds[kind] = (run, cancel, start)

    # -- admission -----------------------------------------------------------------------

    def admit(self, owner, priority, kind, payload, *, source=None, run_id=None, session=None, task_id=None):
        """Admit a task in one transaction that checks every limit; raises CapacityError (429).

        ``session`` (an ORM session or a Core connection): admit inside the caller's transaction.
        ``task_id``: the id to give the task, when the caller must write it elsewhere in
        that transaction (a webhook delivery's claim row names its task).
        """
        if priority not in PRIORITIES:
            raise ValueError(f"unknown priority {priority!r}")
        if self.executor is not None:
            self.executor.check()  # a clear 503 while Redis is away; nothing half-admitted
        if session is not None:
            return self._admit(session, owner, priority, kind, payload, source, run_id, task_id)
        with self.host.db.session() as s:
            view = self._admit(s, owner, priority, kind, payload, source, run_id, task_id)
        self.wake()
        return view

    def _admit(self, s, owner, priority, kind, payload, source, run_id, task_id=None):
        conn = connection_of(s)
        # Serialise admissions across hosts and workers: the counts below must not race.
        # SQLite has no row locks (FOR UPDATE is not rendered): its one writer at a time,
        # and the snapshot check when this transaction starts writing, do that there.
        if conn.dialect.name != "sqlite":
            _LOCK.rows(conn)
        counts = collections.Counter()
        for row in _QUEUED_COUNTS.rows(conn):
            counts[(row.owner, row.priority)] += row.n
        L = self.limits
        total = sum(counts.values())
        mine = sum(n for (o, _), n in counts.items() if o == owner)
        batch = sum(n for (_, p), n in counts.items() if p == "batch")
        non_interactive = sum(n for (_, p), n in counts.items() if p != "interactive")
        my_batch = counts[(owner, "batch")]
        my_non_interactive = my_batch + counts[(owner, "normal")]
        if total >= L.queued_global:
            raise CapacityError("global")
        if mine >= min(L.queued_owner, L.owner_all):
            raise CapacityError("owner")
        if priority == "batch" and batch >= L.batch_global:
            raise CapacityError("global-priority", "batch")
        if priority != "interactive" and non_interactive >= L.non_interactive_global:
            raise CapacityError("global-priority", priority)
        if priority == "batch" and my_batch >= L.owner_batch:
            raise CapacityError("owner-priority", "batch")
        if priority != "interactive" and my_non_interactive >= L.owner_non_interactive:
            raise CapacityError("owner-priority", priority)
        row = {"id": task_id or str(uuid.uuid4()), "owner": owner, "priority": priority, "state": "queued",
               "kind": kind,
               "payload": json.dumps(payload), "source": source, "run_id": run_id, "queued_at": utcnow(),
               "started_at": None, "finished_at": None, "output": None, "error": None, "executor": None,
               "cancel_requested": False, "admitted_by": self.host.instance_id, "claimed_by": None}
        _INSERT.execute(conn, row)
        return task_view(Record(row))

    # -- reading -------------------------------------------------------------------------

    def get(self, task_id, owner):
        with self.host.db.session() as s:
            row = s.get(Task, task_id)
            if row is None or row.owner != owner:
                raise NotFound("task")
            return task_view(row)

    def list(self, owner, limit=50):
        with self.host.db.session() as s:
            rows = s.execute(select(Task).where(Task.owner == owner)
                             .order_by(Task.queued_at.desc(), Task.id).limit(limit)).scalars().all()
            return [task_view(r) for r in rows]

    def wait(self, task_id, owner, timeout):
        """Long-poll for a terminal state; holds no database connection while waiting."""
        subscription = self.host.events.subscribe(f"task:{task_id}")
        try:
            view = self.get(task_id, owner)
            deadline = gevent.get_hub().loop.now() + timeout
            while view["state"] not in TERMINAL:
                remaining = deadline - gevent.get_hub().loop.now()
                if remaining <= 0:
                    break
                try:
                    subscription.get(timeout=remaining)
                except Empty:
                    return self.get(task_id, owner)  # fresh: it may have started meanwhile
                view = self.get(task_id, owner)
            return view
        finally:
            subscription.close()

    def capacity(self, owner):
        now = utcnow()
        with self.host.db.session() as s:
            rows = s.execute(select(Task.owner, Task.priority, Task.state, func.count(), func.min(Task.queued_at))
                             .where(Task.state.in_(("queued", "running")))
                             .group_by(Task.owner, Task.priority, Task.state)).all()
        L = self.limits
        by = collections.Counter()
        oldest = {}
        owners = set()
        for row_owner, priority, state, n, first in rows:
            by[(row_owner, priority, state)] += n
            owners.add(row_owner)
            if state == "queued":
                wait = int((now - first).total_seconds() * 1000)
                oldest[priority] = max(oldest.get(priority, 0), wait)

        def count(owner_=None, priority=None, state=None):
            return sum(n for (o, p, st), n in by.items()
                       if (owner_ is None or o == owner_) and (priority is None or p == priority)
                       and (state is None or st == state))

        queued, running = count(state="queued"), count(state="running")
        batch_q = count(priority="batch", state="queued")
        non_inter_q = queued - count(priority="interactive", state="queued")
        mine_q = count(owner, state="queued")
        my_batch = count(owner, "batch", "queued")
        my_non_inter = mine_q - count(owner, "interactive", "queued")
        remaining = {
            "global": max(0, L.queued_global - queued),
            "batch": max(0, min(L.batch_global - batch_q, L.queued_global - queued)),
            "nonInteractive": max(0, min(L.non_interactive_global - non_inter_q, L.queued_global - queued)),
        }
        owner_remaining = {
            "all": max(0, min(L.owner_all - mine_q, remaining["global"])),
            "nonInteractive": max(0, min(L.owner_non_interactive - my_non_inter, remaining["nonInteractive"],
                                         L.owner_all - mine_q)),
            "batch": max(0, min(L.owner_batch - my_batch, remaining["batch"], L.owner_all - mine_q)),
        }
        return {
            "running": running, "queued": queued,
            "maxRunning": L.running, "maxQueued": L.queued_global,
            "interactive": {"running": count(priority="interactive", state="running"),
                            "queued": count(priority="interactive", state="queued")},
            "normal": {"running": count(priority="normal", state="running"),
                       "queued": count(priority="normal", state="queued")},
            "batch": {"running": count(priority="batch", state="running"), "queued": batch_q},
            "limits": {"queued": L.queued_global, "queuedPerOwner": L.queued_owner, "batchQueued": L.batch_global,
                       "nonInteractiveQueued": L.non_interactive_global, "running": L.running},
            "remaining": remaining,
            "owner": {
                "queued": mine_q, "running": count(owner, state="running"),
                "shares": {"batch": L.owner_batch, "nonInteractive": L.owner_non_interactive,
                           "all": L.owner_all},
                "remaining": owner_remaining,
            },
            "activeOwners": len(owners),
            "oldestQueueWaitMs": max(oldest.values(), default=0),
            "oldestInteractiveQueueWaitMs": oldest.get("interactive", 0),
            "oldestNormalQueueWaitMs": oldest.get("normal", 0),
            "oldestBatchQueueWaitMs": oldest.get("batch", 0),
            "saturated": running >= L.running or remaining["global"] == 0,
            "schedulingPolicy": POLICY,
        }

    # -- cancel --------------------------------------------------------------------------

    def for_run(self, run_id):
        """The newest task that executes a run, or None."""
        with self.host.db.session() as s:
            row = s.execute(select(Task).where(Task.run_id == run_id).order_by(Task.queued_at.desc())
                            .limit(1)).scalar_one_or_none()
            return task_view(row) if row is not None else None

    def cancel(self, task_id, owner):
        """Queued: removed at once. Running: cooperative (the body is told to stop)."""
        with self.host.db.session() as s:
            row = s.get(Task, task_id)
            if row is None or row.owner != owner:
                raise NotFound("task")
            if row.state in TERMINAL:
                raise ApiError(409, "task_finished", f"The task is already {row.state}.")
            if row.state == "queued":
                result = s.execute(update(Task).where(Task.id == task_id, Task.state == "queued")
                                   .values(state="cancelled", finished_at=utcnow(), error="cancelled before start"))
                if result.rowcount == 1:
                    view = task_view(s.get(Task, task_id))
                    cancelled_queued = True
                else:
                    cancelled_queued = False
            else:
                cancelled_queued = False
        if cancelled_queued:
            self._capacity_freed()
            self._finished_hook(view)
            self.host.events.publish(f"task:{task_id}", "task", view)
            return {"taskId": task_id, "cancelled": True, "state": "cancelled"}
        if not self._cancel_local(task_id):
            # Another process has it (an RQ worker), perhaps not started yet: leave the request
            # on the row, where the worker looks before it starts, and tell it if it runs.
            with self.host.db.session() as s:
                s.execute(update(Task).where(Task.id == task_id).values(cancel_requested=True))
            self.host.events.publish(CONTROL, "cancel", {"taskId": task_id})
        return {"taskId": task_id, "cancelled": True, "state": "cancelling"}

    def _cancel_local(self, task_id):
        ctx = self.running.get(task_id)
        if ctx is None:
            return False
        ctx.cancelled.set()
        _, cancel, _ = self.kinds.get(ctx.task["kind"], (None, None, None))
        if cancel is not None:
            cancel(ctx.task)
        return True

    # -- dispatch ------------------------------------------------------------------------

    def start(self):
        """Host role: fail unfinished tasks (not replayed), then dispatch. Both roles: obey cancels."""
        self._stopping = False
        self._control = gevent.spawn(self._control_loop)
        if self.host.role != "host":
            return
        # This host's own unfinished tasks (admitted or claimed by it, in its data directory's
        # identity): another host sharing the database keeps its live ones.
        me = self.host.instance_id
        with self.host.db.session() as s:
            s.execute(update(Task).where(Task.state.in_(("queued", "running")),
                                         (Task.admitted_by == me) | (Task.claimed_by == me)
                                         | (Task.admitted_by.is_(None)))
                      .values(state="failed", finished_at=utcnow(),
                              error="the host restarted before the task finished"))
        self._loop = gevent.spawn(self._dispatch_loop)

    def stop(self):
        # Let the dispatcher finish what it is doing (it may be inside a database call:
        # killing it there would abandon a connection mid-read), then stop it.
        self._stopping = True
        self._wake.set()
        if self._loop is not None:
            self._loop.join(timeout=5)
        for greenlet in (self._loop, self._control):
            if greenlet is not None and not greenlet.dead:
                greenlet.kill(block=True, timeout=2)
        self._loop = self._control = None
        for ctx in list(self.running.values()):
            ctx.cancelled.set()
        self.pool.kill(block=True, timeout=5)

    def wake(self):
        self._wake.set()
        if self.executor is not None:  # other processes' dispatchers (a worker finished a task)
            self.host.events.publish(CONTROL, "wake", {})

    def _control_loop(self):
        subscription = self.host.events.subscribe(CONTROL)
        try:
            while True:
                item = subscription.get()
                if not isinstance(item, tuple):
                    subscription = self.host.events.subscribe(CONTROL)
                    continue
                op, data = item[0], item[1]
                if op == "wake":
                    self._wake.set()
                    self._capacity_freed()
                elif op == "cancel":
                    self._cancel_local(data["taskId"])
        finally:
            subscription.close()

    def _free_slots(self):
        if self.executor is None:
            return self.pool.free_count()
        with self.host.db.session() as s:
            running = s.execute(select(func.count()).select_from(Task).where(Task.state == "running")).scalar()
        return max(0, self.limits.running - running)

    def _dispatch_loop(self):
        while not self._stopping:
            self._wake.clear()
            try:
                while not self._stopping:
                    free = self._free_slots()
                    claimed = self._claim(free) if free > 0 else []
                    if not claimed:
                        break
                    for i, (task, row, started) in enumerate(claimed):
                        self._capacity_freed()
                        if self.executor is None:
                            ctx = TaskContext(task, self, row, started)
                            self.running[task["taskId"]] = ctx
                            # Wake once the greenlet has left the pool, so its slot counts as free.
                            self.pool.spawn(self.execute, ctx).rawlink(lambda _: self._wake.set())
                        elif not self.executor.submit(task):
                            for unsent, _, _ in claimed[i:]:  # nothing accepted is lost: they wait for the executor
                                self._unclaim(unsent["taskId"])
                            break
                    else:
                        continue
                    break
                if self.executor is not None:
                    self._requeue_lost()
            except Exception:
                log.exception("dispatcher error")
            self._wake.wait(timeout=self.poll_seconds)

    def _requeue_lost(self):
        """Tasks handed to Redis whose jobs vanished with it go back to the queue: nothing accepted is lost."""
        with self.host.db.session() as s:
            ids = s.execute(select(Task.id).where(Task.state == "running", Task.executor == self.executor.name)
                            ).scalars().all()
        lost = self.executor.lost(ids) if ids else []
        for task_id in lost:
            log.warning("task %s was lost by the executor; queued again", task_id)
            self._unclaim(task_id)
        if lost:
            self._wake.set()

    def _unclaim(self, task_id):
        with self.host.db.session() as s:
            s.execute(update(Task).where(Task.id == task_id, Task.state == "running")
                      .values(state="queued", started_at=None, executor=None))

    def _claim(self, places):
        """Claim up to ``places`` queued tasks in one transaction, in the fair policy's order;
        returns ``[(task view, row, started)]`` (``started``: what the kind's ``start`` wrote
        in that transaction, embedded executor only).

        The policy picks from the first ``places`` tasks of every (owner, priority), as it
        would one dispatch at a time. A task another host claimed meanwhile is skipped
        (its conditional update matches nothing); if every pick was taken that way, try again.
        If a kind's ``start`` fails, the whole claim rolls back and is made again without
        starts (a savepoint per start would cost more than the commit it saves).
        """
        executor = "embedded" if self.executor is None else self.executor.name
        start = self.executor is None
        for _ in range(5):
            now = utcnow()
            after = []
            try:
                with self.host.db.engine.begin() as conn:
                    queues = collections.defaultdict(collections.deque)
                    for row in _HEADS.rows(conn, {"depth": places}):
                        queues[(row.owner, row.priority)].append(row)
                    picked = []
                    while len(picked) < places:
                        choice = self.policy.pick({key: q[0].queued_at for key, q in queues.items() if q}, now)
                        if choice is None:
                            break
                        picked.append(queues[choice].popleft())
                    if not picked:
                        return []
                    started = utcnow()
                    claimed = []
                    for row in picked:
                        values = {"state": "running", "started_at": started, "executor": executor,
                                  "claimed_by": self.host.instance_id}
                        if update_where(conn, _K, {"id": row.id, "state": "queued"}, values) == 1:
                            record = Record({**row, **values})
                            claimed.append((task_view(record), record))
                    claimed = [(task, record, self._start_in(conn, task, after) if start else None)
                               for task, record in claimed]
            except _StartFailed as exc:
                log.error("task %s: its start failed (%s); claiming again without starts", exc.task_id,
                          exc.__cause__.__class__.__name__, exc_info=exc.__cause__)
                start = False
                continue
            for announce in after:
                try:
                    announce()
                except Exception:
                    log.exception("announcing a task's start failed")
            if claimed:
                return claimed
        return []

    def _start_in(self, conn, task, after):
        """The kind's ``start`` on the claiming connection; a failure is a ``_StartFailed``."""
        kind = self.kinds.get(task["kind"])
        if kind is None or kind[2] is None:
            return None
        try:
            return kind[2](conn, task, after)
        except Exception as exc:
            raise _StartFailed(task["taskId"]) from exc

    def execute_by_id(self, task_id):
        """The RQ job body: the same ``execute`` as the embedded pool, in a ``core worker`` process."""
        with self.host.db.session() as s:
            row = s.get(Task, task_id)
            if row is None or row.state != "running":
                return  # cancelled or failed while it waited in Redis
            task = task_view(row)
            columns = Record({c.key: getattr(row, c.key) for c in _K.columns})
        ctx = TaskContext(task, self, columns)
        self.running[task_id] = ctx  # first: a cancel from now on finds it here ...
        with self.host.db.session() as s:  # ... and one from before is on the row
            if s.get(Task, task_id).cancel_requested:
                ctx.cancelled.set()
        self.execute(ctx)  # a body started with ctx.cancelled set ends at once

    def execute(self, ctx):
        """Run one task body and record its end: the one task body both executors share."""
        task = ctx.task
        state, output, error = "succeeded", None, None
        kind = self.kinds.get(task["kind"])
        try:
            if kind is None:
                raise TaskFailed(f"no executor for task kind {task['kind']!r}")
            output = kind[0](task, ctx)
            if ctx.cancelled.is_set():
                state = "cancelled"
        except TaskCancelled as exc:
            state, error, output = "cancelled", "cancelled", exc.output
        except TaskFailed as exc:
            state, error, output = "failed", str(exc), exc.output
        except Exception as exc:
            log.exception("task %s failed", task["taskId"])
            state, error = "failed", f"{type(exc).__name__}: {exc}"[:2000]
        finally:
            self.running.pop(task["taskId"], None)
        if ctx.ended is None:
            with self.host.db.engine.begin() as conn:
                view = self.end_in(conn, task, state, output, error, row=ctx.row)
        else:
            view = ctx.ended  # the body ended it in its own last transaction
        self._finished_hook(view)
        self.host.events.publish(f"task:{task['taskId']}", "task", view)
        self.wake()

    def end_in(self, conn, task, state, output, error, row=None):
        """Write a task's end on ``conn`` (the caller commits); returns the task's final view."""
        values = {"state": state, "finished_at": utcnow(), "error": error,
                  "output": json.dumps(output, default=str) if output is not None else None}
        update_where(conn, _K, {"id": task["taskId"]}, values)
        if row is None:
            return task_view(Record(conn.execute(_BY_ID, {"task_id": task["taskId"]}).one()._mapping))
        return task_view(Record({**row, **values}))

    def _capacity_freed(self):
        for listener in list(self.capacity_listeners):
            try:
                listener()
            except Exception:
                log.exception("capacity listener failed")

    def _finished_hook(self, view):
        for listener in list(self.finished_listeners):
            try:
                listener(view)
            except Exception:
                log.exception("task listener failed")


class _StartFailed(Exception):
    """A kind's ``start`` raised inside the claiming transaction (see ``TaskQueue._claim``)."""

    def __init__(self, task_id):
        super().__init__(task_id)
        self.task_id = task_id


class TaskFailed(Exception):
    """A task body's failure, with an optional output summary."""

    def __init__(self, message, output=None):
        super().__init__(message)
        self.output = output


class TaskCancelled(Exception):
    """The work the task stood for was cancelled (e.g. its run, by the run's own cancel)."""

    def __init__(self, output=None):
        super().__init__("cancelled")
        self.output = output


class TaskContext:
    """What a task body gets besides its task: the cancel signal, and a way to end the task
    inside the body's own last transaction."""

    def __init__(self, task, queue, row=None, started=None):
        self.task = task
        self.queue = queue
        self.row = row  # the task's columns when claimed (a view rounds its times to the millisecond)
        self.started = started  # what the kind's start wrote in the claiming transaction, if it ran
        self.cancelled = Event()
        self.ended = None  # the task's final view, once the body's transaction that ended it committed

    def end_in(self, conn, state, output=None, error=None):
        """Write the task's end on the body's connection, so that the work's end and the task's
        end commit together (one transaction fewer per task); returns the final view.

        The body sets ``ended`` to that view once its transaction has committed; until then
        the queue writes the end itself after the body returns.
        """
        return self.queue.end_in(conn, self.task, state, output, error, row=self.row)
