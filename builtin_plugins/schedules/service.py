"""Schedule logic: create, list, cancel, and the firing loop that claims each fire in the database."""
import datetime as dt
import json
import logging
import uuid

import gevent
from gevent.event import Event
from sqlalchemy import select, update
from sqlalchemy.exc import SQLAlchemyError

from core.db import isoformat, utcnow
from core.errors import ApiError, NotFound
from core.host import APP
from core.tasks import Task

from . import calendar as cal
from .models import ACTIVE, CANCELLED, COMPLETED, EXPIRED, FAILED, Schedule

log = logging.getLogger("agenthost.schedules")

OWNER = "local"
MAX_BODY_BYTES = 256 * 1024
# Interval schedules expire seven days after creation, so a longer interval could never fire.
LEGACY_EXPIRY = dt.timedelta(days=7)
MAX_INTERVAL_SECONDS = int(LEGACY_EXPIRY.total_seconds())
DEFAULT_MIN_INTERVAL_SECONDS = 60
DEFAULT_RESCAN_SECONDS = 60
DEFAULT_MISSED_GRACE_SECONDS = 60
# Schedules run unattended: no person answers gates, and no session-scoped file grants exist.
SANDBOX = {"planApproval": "auto", "permissionMode": "auto", "fileGrants": "none"}
FIRE_BATCH = 100
MAX_COUNTED_MISSES = 100_000  # counting a calendar's misses over decades of downtime stops here


def view(row):
    return {
        "id": row.id, "workflowId": row.workflow_id, "inputs": json.loads(row.inputs),
        "intervalSeconds": row.interval_seconds, "recurring": row.recurring,
        "calendar": json.loads(row.calendar) if row.calendar else None,
        "fireImmediately": row.immediate_pending,
        "state": row.state, "active": row.state == ACTIVE,
        "nextFireAt": isoformat(row.next_fire_at), "fires": row.fires, "missedFires": row.missed_fires,
        "lastTaskId": row.last_task_id, "lastRunId": row.last_run_id, "lastError": row.last_error,
        "lastFiredAt": isoformat(row.last_fired_at), "expiresAt": isoformat(row.expires_at),
        "sandbox": dict(SANDBOX), "createdAt": isoformat(row.created_at), "endedAt": isoformat(row.ended_at),
    }


class Timing:
    """When a schedule's regular fires fall (interval or calendar), independent of the database."""

    def __init__(self, row):
        self.created = row.created_at
        self.rule = json.loads(row.calendar) if row.calendar else None
        self.interval = dt.timedelta(seconds=row.interval_seconds) if row.interval_seconds else None
        self.recurring = True if self.rule else bool(row.recurring)

    def first(self):
        return self.after(self.created)

    def after(self, t):
        """The first regular fire strictly after ``t``, or None when there is none."""
        if self.rule is not None:
            return cal.next_fire(self.rule, t)
        if not self.recurring:
            once = self.created + self.interval
            return once if once > t else None
        n = max(0, (t - self.created) // self.interval) + 1
        return self.created + n * self.interval

    def between(self, start, end):
        """``(regular fires in (start, end], the first regular fire after end or None)``."""
        if self.rule is not None:
            return cal.fires_between(self.rule, start, end, MAX_COUNTED_MISSES)
        if not self.recurring:
            once = self.created + self.interval
            return (1 if start < once <= end else 0), (once if once > end else None)
        first = max(0, (start - self.created) // self.interval) + 1
        last = (end - self.created) // self.interval
        return max(0, last - first + 1), self.created + (max(last, first - 1) + 1) * self.interval


class Refused(Exception):
    """The workflow run of a claimed fire could not be admitted; the claim is rolled back and redone.

    ``end`` is set when no later fire can succeed either (the workflow is gone).
    """

    def __init__(self, message, end=False):
        super().__init__(message)
        self.message = message
        self.end = end


class Schedules:
    """The schedules service (``host.service("schedules")``) and this host's firing loop."""

    def __init__(self, host):
        self.host = host
        config = host.config
        self.min_interval = float(config.get("schedules.min-interval-seconds", DEFAULT_MIN_INTERVAL_SECONDS))
        self.rescan = float(config.get("schedules.rescan-seconds", DEFAULT_RESCAN_SECONDS))
        self.grace = dt.timedelta(seconds=float(config.get("schedules.missed-grace-seconds",
                                                           DEFAULT_MISSED_GRACE_SECONDS)))
        # Interval schedules expire this long after creation (seven days; tests shorten it).
        self.expiry = dt.timedelta(seconds=float(config.get("schedules.expiry-seconds",
                                                            LEGACY_EXPIRY.total_seconds())))
        self._wake = Event()
        self._loop = None
        self._stopping = False

    # -- the API -------------------------------------------------------------------------

    def create(self, data, owner=OWNER):
        rule, interval = self._timing_of(data)
        workflows = self._workflows()
        workflows.check_inputs(data["workflowId"], data["inputs"], owner)
        now = utcnow()
        row = Schedule(id=str(uuid.uuid4()), owner=owner, workflow_id=data["workflowId"],
                       inputs=json.dumps(data["inputs"]),
                       interval_seconds=None if rule else interval,
                       recurring=True if rule else data["recurring"],
                       calendar=json.dumps(rule) if rule else None,
                       immediate_pending=data["fireImmediately"], state=ACTIVE, fires=0, missed_fires=0,
                       expires_at=None if rule else now + self.expiry, created_at=now)
        row.next_fire_at = now if data["fireImmediately"] else Timing(row).first()
        with self.host.db.session() as s:
            s.add(row)
        self.wake()
        return view(row)

    def _timing_of(self, data):
        """(normalised calendar rule or None, interval seconds or None); 400 for bad timing."""
        interval = data.get("intervalSeconds")
        errors = {}
        if interval is not None and not self.min_interval <= interval <= MAX_INTERVAL_SECONDS:
            errors["intervalSeconds"] = [
                f"Must be between {self.min_interval:g} and {MAX_INTERVAL_SECONDS} seconds "
                "(interval schedules expire after seven days)."]
        rule = None
        if data.get("calendar") is not None:
            try:
                rule = cal.normalise(data["calendar"])
            except cal.CalendarError as exc:
                errors.update({f"calendar.{k}" if k != "calendar" else k: v for k, v in exc.errors.items()})
        elif interval is None and "intervalSeconds" not in errors:
            errors["intervalSeconds"] = ["Required unless a calendar is given."]
        if errors:
            raise ApiError(400, "validation_failed", "The schedule's timing is invalid.", errors=errors)
        return rule, interval

    def list(self, owner=OWNER):
        with self.host.db.session() as s:
            rows = s.execute(select(Schedule).where(Schedule.owner == owner, Schedule.state == ACTIVE)
                             .order_by(Schedule.created_at, Schedule.id)).scalars().all()
            return [view(r) for r in rows]

    def get(self, schedule_id, owner=OWNER):
        with self.host.db.session() as s:
            row = s.get(Schedule, schedule_id)
            if row is None or row.owner != owner:
                raise NotFound("schedule")
            return view(row)

    def cancel(self, schedule_id, owner=OWNER):
        """Durably cancel an active schedule: 404 when unknown, 409 when it is no longer active."""
        with self.host.db.session() as s:
            row = s.get(Schedule, schedule_id)
            if row is None or row.owner != owner:
                raise NotFound("schedule")
            # Conditional: a fire claimed meanwhile keeps its run; the schedule still ends here.
            result = s.execute(update(Schedule).where(Schedule.id == schedule_id, Schedule.state == ACTIVE)
                               .values(state=CANCELLED, next_fire_at=None, ended_at=utcnow())
                               .execution_options(synchronize_session=False))
            if result.rowcount != 1:
                state = s.execute(select(Schedule.state).where(Schedule.id == schedule_id)).scalar_one()
                raise ApiError(409, "schedule_not_active", f"The schedule is already {state}.", state=state)
            row = s.execute(select(Schedule).where(Schedule.id == schedule_id)
                            .execution_options(populate_existing=True)).scalar_one()
            answer = view(row)
        self.wake()
        return answer

    @staticmethod
    def cancel_for_workflow(session, workflow_id):
        """Cancel a workflow's active schedules inside ``session`` (the workflow's delete); returns the count."""
        result = session.execute(update(Schedule).where(Schedule.workflow_id == workflow_id, Schedule.state == ACTIVE)
                                 .values(state=CANCELLED, next_fire_at=None, ended_at=utcnow())
                                 .execution_options(synchronize_session=False))
        return result.rowcount

    def _workflows(self):
        service = self.host.service("workflows")
        if service is None:
            raise ApiError(503, "workflows_unavailable", "Workflows are not available.")
        return service

    # -- the firing loop -----------------------------------------------------------------

    def start(self):
        if self._loop is None:
            self._stopping = False
            self._loop = gevent.spawn(self._run)

    def stop(self):
        # Ask the loop to end and let it finish its database call first: a kill thrown into
        # a connection checkout (PostgreSQL's pre-ping) can come back out of the driver as a
        # DBAPIError, which the loop's retry would swallow, and leave the connection mid-query.
        loop, self._loop = self._loop, None
        if loop is None:
            return
        self._stopping = True
        self._wake.set()
        loop.join(timeout=5)
        if not loop.dead:
            loop.kill(block=True, timeout=5)

    def wake(self):
        self._wake.set()

    def _run(self):
        # Tasks queued before the task queue starts are failed by its start-up sweep: fire
        # nothing until the host is fully in APP mode.
        while self.host.mode != APP:
            if self._stopping:
                return
            gevent.sleep(0.02)
        failures = 0
        while not self._stopping:
            self._wake.clear()
            try:
                self.fire_due()
                wait = self._seconds_to_next()
                failures = 0
            except Exception:
                if self._stopping:
                    return
                # A database outage must not end the loop: retry, backing off to the rescan period.
                failures += 1
                log.exception("schedule loop error")
                wait = min(2 ** failures / 4, max(self.rescan, 1))
            if self.rescan > 0:
                # Other hosts sharing the database do not wake this loop: look again now and then.
                wait = self.rescan if wait is None else min(wait, self.rescan)
            self._wake.wait(timeout=wait)

    def _seconds_to_next(self):
        with self.host.db.session() as s:
            first = s.execute(select(Schedule.next_fire_at).where(Schedule.state == ACTIVE,
                                                                  Schedule.next_fire_at.is_not(None))
                              .order_by(Schedule.next_fire_at).limit(1)).scalar()
        if first is None:
            return None
        return max(0.0, (first - utcnow()).total_seconds())

    def fire_due(self):
        """Fire every schedule whose nextFireAt has come; returns how many fires this host claimed."""
        fired = 0
        while True:
            now = utcnow()
            with self.host.db.session() as s:
                due = s.execute(select(Schedule.id, Schedule.next_fire_at)
                                .where(Schedule.state == ACTIVE, Schedule.next_fire_at <= now)
                                .order_by(Schedule.next_fire_at, Schedule.id).limit(FIRE_BATCH)).all()
            for schedule_id, due_at in due:
                try:
                    if self.fire(schedule_id, due_at):
                        fired += 1
                except SQLAlchemyError:
                    raise  # the database is in trouble: the loop backs off and retries
                except Exception as exc:
                    # A row this host cannot work with (say its zone left the tz database) must
                    # neither stop the other schedules nor come due again at once, forever.
                    log.exception("schedule %s cannot fire; it is ended", schedule_id)
                    self._end_broken(schedule_id, due_at, f"the schedule could not fire ({type(exc).__name__})")
            if len(due) < FIRE_BATCH:
                return fired

    def fire(self, schedule_id, due_at):
        """Claim the fire due at ``due_at`` and admit its run in the same transaction.

        The claim is a conditional UPDATE on (id, nextFireAt): of several hosts
        sharing the database exactly one moves nextFireAt on, and only that one
        admits the run. When the run cannot be admitted (a 429 from the queue,
        an unpublished workflow, inputs the new revision refuses) the transaction
        rolls back and the claim is redone with the reason in lastError: the
        schedule moves on to its next fire. Returns True when this host fired.
        """
        try:
            claimed = self._claim(schedule_id, due_at, admit=True)
        except Refused as refused:
            claimed = self._claim(schedule_id, due_at, error=refused.message, end=refused.end)
        if claimed and self.host.tasks is not None:
            self.host.tasks.wake()
        return claimed

    def _end_broken(self, schedule_id, due_at, message):
        with self.host.db.session() as s:
            s.execute(update(Schedule).where(Schedule.id == schedule_id, Schedule.state == ACTIVE,
                                             Schedule.next_fire_at == due_at)
                      .values(state=FAILED, next_fire_at=None, ended_at=utcnow(), last_error=message)
                      .execution_options(synchronize_session=False))

    def _claim(self, schedule_id, due_at, *, admit=False, error=None, end=False):
        now = utcnow()
        with self.host.db.session() as s:
            row = s.execute(select(Schedule).where(Schedule.id == schedule_id)
                            .execution_options(populate_existing=True)).scalar_one_or_none()
            if row is None or row.state != ACTIVE or row.next_fire_at != due_at:
                return False
            values = self._advance(row, now)
            if end:
                values.update(state=CANCELLED, next_fire_at=None, ended_at=now)
            result = s.execute(update(Schedule)
                               .where(Schedule.id == schedule_id, Schedule.state == ACTIVE,
                                      Schedule.next_fire_at == due_at)
                               .values(last_fired_at=now, last_error=error, **values)
                               .execution_options(synchronize_session=False))
            if result.rowcount != 1:
                return False  # another host claimed this fire first
            if not admit:
                return True
            try:
                run_id, task_id = self._admit(s, row)
            except ApiError as exc:
                # 404: the workflow was deleted (a create that raced the delete's cancel): end here.
                raise Refused(f"{exc.status} {exc.code}: {exc.detail or exc.code}"[:1000],
                              end=exc.status == 404) from None
            except Exception as exc:
                log.exception("schedule %s: the run could not be admitted", schedule_id)
                raise Refused(f"the run could not be started ({type(exc).__name__})") from None
            s.execute(update(Schedule).where(Schedule.id == schedule_id)
                      .values(fires=Schedule.fires + 1, last_run_id=run_id, last_task_id=task_id)
                      .execution_options(synchronize_session=False))
            return True

    def _admit(self, s, row):
        agent = self.host.service("agent")
        if agent is None:
            raise ApiError(503, "agent_unavailable", "The agent is not running.")
        config = agent.parse_config({"planApproval": SANDBOX["planApproval"],
                                     "permissionMode": SANDBOX["permissionMode"]})
        run_id = self._workflows().run(row.workflow_id, json.loads(row.inputs), config, owner=row.owner,
                                       published_only=True, priority="normal", source=f"schedule:{row.id}",
                                       session=s)
        task_id = s.execute(select(Task.id).where(Task.run_id == run_id)
                            .order_by(Task.queued_at.desc()).limit(1)).scalar()
        return run_id, task_id

    def _advance(self, row, now):
        """The claim's new values: next fire (coalescing every fire that has passed), missed count, end."""
        timing = Timing(row)
        due = row.next_fire_at
        if row.immediate_pending:
            later, upcoming = timing.between(row.created_at, now)
        else:
            later, upcoming = timing.between(due, now)
        # One fire stands for all that have come; those that passed it by are counted missed,
        # and so is this one when it comes well after its time (the host was down).
        missed = later + (1 if now - due > self.grace else 0)
        values = {"immediate_pending": False, "missed_fires": Schedule.missed_fires + missed,
                  "next_fire_at": upcoming}
        if upcoming is None:
            values.update(state=COMPLETED, ended_at=now)
        elif row.expires_at is not None and upcoming > row.expires_at:
            values.update(state=EXPIRED, next_fire_at=None, ended_at=now)
        return values
