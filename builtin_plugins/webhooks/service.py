"""Webhook trigger logic: secrets, the creation rules, and delivery admission with its event-id claim."""
import collections
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
import uuid
from dataclasses import dataclass

import jsonschema
from cachetools import LRUCache
from gevent.event import Event
from gevent.lock import BoundedSemaphore
from sqlalchemy import and_, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError, OperationalError

from core import plans
from core.db import Prepared, isoformat, utcnow
from core.errors import ApiError, NotFound
from core.tasks import CapacityError, Task
from core.write_groups import WriteGroup

from .models import WebhookDelivery, WebhookTrigger

log = logging.getLogger("agenthost.webhooks")

OWNER = "local"
SECRET_HEADER = "X-Service-Webhook-Secret"
EVENT_ID_HEADER = "X-Service-Event-Id"
MAX_BODY_BYTES = 256 * 1024
MAX_EVENT_ID = 200
MAX_DEFAULT_INPUTS_BYTES = 256 * 1024
SECRET_BYTES = 32
# The builtin tools that only work inside paths granted to a run. A webhook run has no
# person to grant them, so a workflow that uses them cannot be a webhook's target.
FILE_TOOLS = frozenset({"read_file", "write_file", "list_directory"})
MAX_NESTING = 8
TRIGGER_CACHE_SIZE = 1024  # triggers remembered by authenticate
RECENT_EVENTS = 4096  # event ids this host admitted lately (a repeat is answered at once while the queue is full)
# Compared against when the trigger is unknown or disabled, so every 401 costs the same.
_NO_SECRET = hashlib.sha256(b"agenthost: no trigger").hexdigest()


def hash_secret(secret):
    """sha256 hex of a header value: enough for a 256-bit random secret (see docs/webhooks.md)."""
    try:
        raw = secret.encode("latin-1")  # WSGI hands header bytes over as latin-1 text
    except UnicodeEncodeError:
        raw = secret.encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()


def event_key(event_id):
    """What the claim stores for an event id: its sha256, never the id."""
    return hashlib.sha256(event_id.encode("utf-8", "surrogatepass")).hexdigest()


def unauthorized():
    # One answer for a missing or wrong secret, an unknown trigger and a deleted one:
    # trigger ids cannot be probed.
    return ApiError(401, "invalid_webhook_secret",
                    f"The {SECRET_HEADER} header is missing or does not match an active trigger.",
                    headers={"WWW-Authenticate": "Service-Webhook-Secret"})


def hook_path(trigger_id):
    return f"/api/workflow-hooks/{trigger_id}"


def trigger_view(row):
    return {
        "triggerId": row.id, "workflowId": row.workflow_id, "name": row.name,
        "defaultInputs": json.loads(row.default_inputs), "permissionMode": row.permission_mode,
        "active": bool(row.active), "hookPath": hook_path(row.id),
        "createdAt": isoformat(row.created_at), "secretRotatedAt": isoformat(row.secret_rotated_at),
    }


def delivery_view(row):
    """A delivery row with its task's live state; never the payload, secret, event id or hash."""
    return {
        "deliveryId": row.delivery_id, "taskId": row.task_id, "runId": row.run_id,
        "status": row.state or "unknown", "receivedAt": isoformat(row.received_at),
        "startedAt": isoformat(row.started_at), "finishedAt": isoformat(row.finished_at),
        "error": row.error, "idempotencyKeySupplied": bool(row.idempotency_key_supplied),
    }


_T, _D, _K = WebhookTrigger.__table__, WebhookDelivery.__table__, Task.__table__
# A delivery joined with its task, labelled for delivery_view.
_DELIVERY_COLUMNS = (_D.c.id.label("delivery_id"), _D.c.task_id, _D.c.run_id, _D.c.received_at,
                     _D.c.idempotency_key_supplied, _K.c.state, _K.c.started_at, _K.c.finished_at, _K.c.error)
_TRIGGER_COLUMNS = (_T.c.id, _T.c.owner, _T.c.workflow_id, _T.c.default_inputs, _T.c.permission_mode,
                    _T.c.secret_hash, _T.c.active)
_WITH_TASK = _D.outerjoin(_K, _K.c.id == _D.c.task_id)

# The statements of the delivery path, built once: SQLAlchemy then reuses their cache keys
# and compiled forms instead of rebuilding them per request (a third of the hook's time).
_AUTH = Prepared(select(*_TRIGGER_COLUMNS).where(_T.c.id == bindparam("trigger_id")))
# A trigger's secret and state with the delivery that claimed an event id, if one did.
_AUTH_AND_CLAIM = Prepared(
    select(_T.c.secret_hash, _T.c.active, *_DELIVERY_COLUMNS)
    .select_from(_T.outerjoin(_D, and_(_D.c.trigger_id == _T.c.id, _D.c.event_key == bindparam("key")))
                 .outerjoin(_K, _K.c.id == _D.c.task_id))
    .where(_T.c.id == bindparam("trigger_id")))
_CLAIMED = Prepared(select(*_DELIVERY_COLUMNS).select_from(_WITH_TASK).where(
    _D.c.trigger_id == bindparam("trigger_id"), _D.c.event_key == bindparam("key")))
# A shared lock on the trigger row: a delete or rotate commits before (and the delivery is
# refused) or after the delivery's transaction, never across it.
_CURRENT_SECRET = Prepared(select(_T.c.secret_hash, _T.c.active).where(_T.c.id == bindparam("trigger_id"))
                           .with_for_update(read=True))
_CLAIM = Prepared(insert(_D))


@dataclass(frozen=True)
class Caller:
    """An authenticated delivery: its trigger, the secret it matched and its event id's key."""

    trigger_id: str
    owner: str
    workflow_id: str
    default_inputs: dict
    permission_mode: str
    secret_hash: str
    event_key: str | None


def _per_field(err, where):
    """An unexpected property is reported at that property (as the workflow's own checks do)."""
    if err.validator == "additionalProperties" and err.validator_value is False and isinstance(err.instance, dict):
        known = set(err.schema.get("properties") or {})
        patterns = list(err.schema.get("patternProperties") or {})
        extra = [p for p in err.instance if p not in known and not any(re.search(x, p) for x in patterns)]
        if extra:
            return [(f"{where}.{p}", "Unknown field.") for p in extra]
    return [(where, err.message)]


def _retryable(exc):
    """A lock conflict the database resolved by failing one side: the attempt may be repeated."""
    orig = getattr(exc, "orig", None)
    code = getattr(orig, "sqlstate", None)
    if code in ("40001", "40P01"):  # PostgreSQL serialization failure / deadlock
        return True
    args = getattr(orig, "args", ())
    if args and args[0] in (1205, 1213):  # MySQL lock wait timeout / deadlock
        return True
    return "database is locked" in str(orig)


class Webhooks:
    """The webhook triggers service (``host.service("webhooks")``)."""

    def __init__(self, host):
        self.host = host
        # Admission is serialised by the task queue's lock anyway; bounding the transactions
        # in flight keeps a burst of deliveries from taking every pooled connection (each
        # admission briefly needs two: its own and the workflow read).
        self._admitting = BoundedSemaphore(int(host.config.get("webhooks.max-concurrent-admissions", 8)))
        self._configs = {}  # permission mode -> parsed run config
        self._triggers = LRUCache(TRIGGER_CACHE_SIZE)  # trigger id -> its row as last read (see authenticate)
        # Load shedding: after a 429, further deliveries of that owner skip the admitting
        # transaction (it would fail the same way) until a queued place frees or this many
        # seconds pass. Under a flood this keeps the CPU for the tasks that drain the queue.
        self._full_for = float(host.config.get("webhooks.queue-full-memo-ms", 50)) / 1000
        self._full = {}  # owner -> (monotonic deadline, capacityScope, capacityPriority)
        # Backpressure: a delivery that meets a full queue waits up to this long for a place
        # (first come, first served; one waiter is woken per place that frees) before it is
        # answered 429. A short flood is absorbed instead of bounced, and waiting senders
        # cost nothing, where an immediate 429 invites an immediate retry.
        self._wait_for = float(host.config.get("webhooks.admission-wait-ms", 300)) / 1000
        self._max_waiters = int(host.config.get("webhooks.max-waiting-deliveries", 256))
        self._waiters = collections.deque()  # gevent Events, oldest first
        # Deliveries ready at the same moment (woken by the same claim, or arrived in one turn of
        # the event loop) are admitted in one transaction, at most this many; if any of them
        # fails there (a 429, a 400, a racing duplicate) each is admitted alone.
        self._group = WriteGroup(lambda: self.db.engine, int(host.config.get("webhooks.admission-group", 16)))
        self._recent = LRUCache(RECENT_EVENTS)  # (trigger id, event key) -> None: this host admitted it lately
        if host.tasks is not None:
            host.tasks.capacity_listeners.append(self._capacity_freed)

    def _capacity_freed(self):
        self._full.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.is_set():
                waiter.set()
                return

    def _known_full(self, owner):
        """The CapacityError of a recent refusal of this owner that still stands, else None."""
        memo = self._full.get(owner)
        if memo is None:
            return None
        if memo[0] > time.monotonic():
            return CapacityError(memo[1], memo[2])
        self._full.pop(owner, None)
        return None

    def _wait_for_place(self, deadline):
        """Queue for the next freed place; True when woken before ``deadline`` (monotonic)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0 or len(self._waiters) >= self._max_waiters:
            return False
        self.host.tasks.wake()  # the queue is full: make sure the dispatcher is draining it
        waiter = Event()
        self._waiters.append(waiter)
        try:
            return waiter.wait(remaining)
        finally:
            if not waiter.is_set():
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass

    @property
    def db(self):
        return self.host.db

    def _workflows(self):
        service = self.host.service("workflows")
        if service is None:
            raise ApiError(503, "workflows_unavailable", "Workflows are not available.")
        return service

    # -- the target workflow -------------------------------------------------------------

    def _snapshot(self, workflow_id, owner):
        """The published snapshot a trigger runs: 404 unknown, 409 unpublished or needing file grants."""
        snap = self._workflows().runnable(workflow_id, owner, published_only=True)
        steps = self._file_steps(snap, owner, seen={workflow_id}, depth=0)
        if steps:
            raise ApiError(409, "workflow_needs_file_grants",
                           "The workflow uses file tools, which need file grants that a webhook run cannot hold: "
                           + ", ".join(steps[:10]) + ".", steps=steps[:50])
        return snap

    def _file_steps(self, snap, owner, seen, depth):
        """Where a snapshot (or a published workflow it calls) uses a file tool."""
        found = []
        for index, step in enumerate(snap["plan"].get("steps") or []):
            where = f"steps.{index}" + (f" ({step['id']})" if isinstance(step.get("id"), str) else "")
            tool = step.get("tool")
            if tool in FILE_TOOLS:
                found.append(f"{where}: {tool}")
                continue
            child = self._called_workflow(step)
            if child is None or child in seen or depth >= MAX_NESTING:
                continue
            seen.add(child)
            try:
                child_snap = self._workflows().runnable(child, owner, published_only=True)
            except ApiError:
                continue  # it fails on its own at run time; no grant is involved
            if self._file_steps(child_snap, owner, seen, depth + 1):
                found.append(f"{where}: {tool} runs a workflow that uses file tools")
        return found

    def _called_workflow(self, step):
        """The workflow id a step runs, when it is known before the run."""
        tool = self.host.tools.get(step.get("tool") or "")
        if tool is not None and tool.source.startswith("workflow:"):
            return tool.source.split(":", 1)[1]
        if step.get("tool") == "run_workflow":
            target = (step.get("arguments") or {}).get("workflowId")
            if isinstance(target, str) and not plans.placeholders(target):
                return target
        return None

    def _check_defaults(self, schema, defaults):
        if len(json.dumps(defaults)) > MAX_DEFAULT_INPUTS_BYTES:
            raise ApiError(400, "validation_failed", "defaultInputs is too large.",
                           errors={"defaultInputs": [f"Over {MAX_DEFAULT_INPUTS_BYTES // 1024} KiB."]})
        # Defaults alone need not be complete (the delivery's body adds the rest), but what
        # they do say must fit the schema.
        partial = {k: v for k, v in schema.items() if k != "required"}
        cls = jsonschema.validators.validator_for(partial)
        errors = {}
        try:
            for err in cls(partial, format_checker=cls.FORMAT_CHECKER).iter_errors(defaults):
                where = "defaultInputs" + "".join(f".{p}" for p in err.absolute_path)
                for key, message in _per_field(err, where):
                    errors.setdefault(key, []).append(message[:300])
        except Exception:  # the published schema was checked at publish; never a 500 here
            errors = {"defaultInputs": ["The workflow's inputSchema cannot be applied."]}
        if errors:
            raise ApiError(400, "validation_failed", "defaultInputs do not match the workflow's inputSchema.",
                           errors=errors)

    # -- triggers ------------------------------------------------------------------------

    def create(self, data, owner=OWNER):
        """A new trigger; the answer carries the plaintext secret, which is never shown again."""
        snap = self._snapshot(data["workflowId"], owner)
        defaults = data.get("defaultInputs") or {}
        self._check_defaults(snap["inputSchema"], defaults)
        secret = secrets.token_urlsafe(SECRET_BYTES)
        now = utcnow()
        row = WebhookTrigger(id=str(uuid.uuid4()), owner=owner, workflow_id=data["workflowId"],
                             name=data.get("name") or snap["name"], default_inputs=json.dumps(defaults),
                             permission_mode=data.get("permissionMode") or "auto",
                             secret_hash=hash_secret(secret), active=True, created_at=now,
                             secret_rotated_at=now)
        with self.db.session() as s:
            s.add(row)
        return {**trigger_view(row), "secret": secret}

    def list(self, owner=OWNER):
        with self.db.session() as s:
            rows = s.execute(select(WebhookTrigger)
                             .where(WebhookTrigger.owner == owner, WebhookTrigger.active.is_(True))
                             .order_by(WebhookTrigger.created_at.desc(), WebhookTrigger.id)).scalars().all()
            return [trigger_view(r) for r in rows]

    def _owned(self, s, trigger_id, owner):
        row = s.get(WebhookTrigger, trigger_id) if len(trigger_id) <= 36 else None
        if row is None or row.owner != owner or not row.active:
            raise NotFound("webhook trigger")
        return row

    def rotate_secret(self, trigger_id, owner=OWNER):
        """A new secret, effective at once: the old one stops working when this commits."""
        secret = secrets.token_urlsafe(SECRET_BYTES)
        with self.db.session() as s:
            self._owned(s, trigger_id, owner)
            changed = s.execute(update(WebhookTrigger)
                                .where(WebhookTrigger.id == trigger_id, WebhookTrigger.owner == owner,
                                       WebhookTrigger.active.is_(True))
                                .values(secret_hash=hash_secret(secret), secret_rotated_at=utcnow())
                                .execution_options(synchronize_session=False)).rowcount
            if changed != 1:
                raise NotFound("webhook trigger")  # deleted meanwhile
            row = s.execute(select(WebhookTrigger).where(WebhookTrigger.id == trigger_id)
                            .execution_options(populate_existing=True)).scalar_one()
        self._triggers.pop(trigger_id, None)
        return {**trigger_view(row), "secret": secret}

    def delete(self, trigger_id, owner=OWNER):
        """Disable for good: the row stays (its delivery history and claims), the secret is erased."""
        with self.db.session() as s:
            self._owned(s, trigger_id, owner)
            if _disable(s, WebhookTrigger.id == trigger_id, "deleted") != 1:
                raise NotFound("webhook trigger")
        self._triggers.pop(trigger_id, None)
        return {"ok": True, "triggerId": trigger_id}

    def deliveries(self, trigger_id, owner=OWNER, limit=20):
        with self.db.session() as s:
            self._owned(s, trigger_id, owner)
            rows = s.execute(select(*_DELIVERY_COLUMNS).select_from(_WITH_TASK)
                             .where(_D.c.trigger_id == trigger_id)
                             .order_by(_D.c.received_at.desc(), _D.c.id.desc()).limit(limit)).all()
            return [delivery_view(r) for r in rows]

    # -- deliveries ----------------------------------------------------------------------

    def authenticate(self, trigger_id, secret, event_id=None):
        """The active trigger this secret opens, else the one 401 for every reason.

        A trigger's owner, workflow, defaults and permission mode never change, so they
        are remembered per trigger; its secret and state can, so a delivery's admitting
        transaction checks them again. A secret that does not match the remembered one is
        looked up afresh (it may have been rotated by another host sharing the database).
        """
        given = hash_secret(secret)
        key = event_key(event_id) if event_id is not None else None
        row = self._triggers.get(trigger_id)
        if row is None or not hmac.compare_digest(given, row.secret_hash):
            row = None
            if len(trigger_id) <= 36:
                with self.db.engine.connect() as conn:
                    row = _AUTH.first(conn, {"trigger_id": trigger_id})
            self._remember(trigger_id, row)
        live = row is not None and row.active
        matches = hmac.compare_digest(given, row.secret_hash if live else _NO_SECRET)
        if not (live and matches):
            raise unauthorized()
        return Caller(row.id, row.owner, row.workflow_id, json.loads(row.default_inputs), row.permission_mode,
                      row.secret_hash, key)

    def _remember(self, trigger_id, row):
        if row is None or not row.active:
            self._triggers.pop(trigger_id, None)
            return
        self._triggers[trigger_id] = row

    def deliver(self, caller, overlay):
        """Admit one delivery: ``(True, delivery)`` for a new event, ``(False, original)`` for a duplicate.

        The event-id claim (a unique row) and the run's task are written in one
        transaction, so a 429 from the queue rolls the claim back and a retry is admitted.
        The inputs (``defaultInputs`` overlaid by the body) are validated by the workflow
        run inside that transaction (400 with per-field errors).
        """
        inputs = {**caller.default_inputs, **overlay}
        agent = self.host.service("agent")
        if agent is None:
            raise ApiError(503, "agent_unavailable", "The agent is not running.")
        config = self._config(agent, caller.permission_mode)
        key = caller.event_key
        deadline = time.monotonic() + self._wait_for
        attempt, woken, unclaimed = 0, False, False
        if key is not None and (caller.trigger_id, key) in self._recent:
            # A repeat of an event this host admitted lately: one read answers it, and it
            # needs no place in the queue. Any other repeat is found in the admitting
            # transaction, or at the end of a wait for a place, so that new events (and
            # deliveries waiting while the queue is full) need no read of their own.
            original = self._repeated(caller)
            if original is not None:
                return False, original
            unclaimed = True  # the admission need not look again (a racing claim fails its insert)
        while True:
            if not woken:
                # Known full, or others already wait for a place: queue behind them.
                full = self._known_full(caller.owner)
                if full is not None or self._waiters:
                    if self._wait_for_place(deadline):
                        woken = True
                        continue
                    if key is not None:
                        original = self._repeated(caller)
                        if original is not None:
                            return False, original
                    if full is not None:
                        raise full
            woken = False
            try:
                look = not unclaimed
                delivery = self._group.run(lambda conn: self._admit_on(conn, caller, inputs, config, look),
                                           alone=lambda: self._admit_alone(caller, inputs, config, look))
                if delivery.get("duplicate"):
                    # The event id names the event: a repeat answers with the first copy, whatever it carries.
                    return False, delivery
                break
            except IntegrityError:
                if key is None:
                    raise
                log.debug("trigger %s: a concurrent delivery claimed the event id first", caller.trigger_id)
                # Another delivery of this event id holds the claim. Read it in a fresh
                # transaction (MySQL's repeatable read would still show the old snapshot).
                original = self._claimed(caller.trigger_id, key)
                if original is not None:
                    return False, original
                # Its transaction rolled back (a 429): the claim is free again; try once more.
            except OperationalError as exc:
                if not _retryable(exc) or attempt >= 2:
                    raise
            except CapacityError as exc:
                if self._full_for > 0:
                    self._full[caller.owner] = (time.monotonic() + self._full_for, exc.extra.get("capacityScope"),
                                                exc.extra.get("capacityPriority"))
                if self._wait_for_place(deadline):
                    woken = True
                    continue
                raise
            attempt += 1
            if attempt >= 3:
                raise ApiError(503, "delivery_contended", "The delivery could not be admitted; retry shortly.",
                               headers={"Retry-After": "1"})
        if key is not None:
            self._recent[(caller.trigger_id, key)] = None
        self.host.tasks.wake()
        return True, delivery

    def _config(self, agent, permission_mode):
        """The run config of a delivery (checked once per permission mode, then reused)."""
        config = self._configs.get(permission_mode)
        if config is None:
            config = self._configs[permission_mode] = agent.parse_config(
                {"planApproval": "auto", "permissionMode": permission_mode})
        return dict(config)

    def _admit_alone(self, caller, inputs, config, look_for_claim=True):
        with self._admitting:
            with self.db.engine.begin() as conn:
                return self._admit_on(conn, caller, inputs, config, look_for_claim)

    def _admit_on(self, conn, caller, inputs, config, look_for_claim=True):
        """One delivery's admission on ``conn`` (the caller commits): its delivery, or the
        original one when ``look_for_claim`` finds the event id already claimed."""
        self._current(conn, caller)
        if look_for_claim and caller.event_key is not None:
            claimed = _CLAIMED.first(conn, {"trigger_id": caller.trigger_id, "key": caller.event_key})
            if claimed is not None:
                return {**delivery_view(claimed), "duplicate": True}
        delivery_id, task_id, received = str(uuid.uuid4()), str(uuid.uuid4()), utcnow()
        run_id = self._workflows().run(caller.workflow_id, inputs, config, owner=caller.owner,
                                       published_only=True, priority="normal",
                                       source=f"webhook:{caller.trigger_id}", session=conn, task_id=task_id)
        # The claim, written last so that it names its run and task: a concurrent delivery
        # of the same event id waits on the unique key here, then fails and reads this one.
        # A 429 above raised before it, so the refused event id stays unclaimed.
        _CLAIM.execute(conn, {"id": delivery_id, "trigger_id": caller.trigger_id, "event_key": caller.event_key,
                              "received_at": received, "idempotency_key_supplied": caller.event_key is not None,
                              "task_id": task_id, "run_id": run_id})
        return {"deliveryId": delivery_id, "taskId": task_id, "runId": run_id, "status": "queued",
                "receivedAt": isoformat(received), "startedAt": None, "finishedAt": None, "error": None,
                "idempotencyKeySupplied": caller.event_key is not None, "duplicate": False}

    def _current(self, conn, caller):
        """Check the caller's secret against the trigger's row as it is now (401 if it changed)."""
        self._still_open(caller, _CURRENT_SECRET.first(conn, {"trigger_id": caller.trigger_id}))

    def _repeated(self, caller):
        """The original delivery of a repeated event id, or None; one read, which also checks
        the caller's secret against the trigger as it is now (401 if it changed)."""
        with self.db.engine.connect() as conn:
            row = _AUTH_AND_CLAIM.first(conn, {"trigger_id": caller.trigger_id, "key": caller.event_key})
        self._still_open(caller, row)
        return None if row.delivery_id is None else {**delivery_view(row), "duplicate": True}

    def _still_open(self, caller, row):
        """401 unless ``row`` (the trigger as just read) is active with the secret the caller matched."""
        live = row is not None and row.active
        if not (live and hmac.compare_digest(row.secret_hash, caller.secret_hash)):
            self._triggers.pop(caller.trigger_id, None)  # whatever changed, read it afresh next time
            raise unauthorized()

    def _claimed(self, trigger_id, key):
        """The delivery that holds an event id's claim, with its task's live state, or None."""
        with self.db.engine.connect() as conn:
            row = _CLAIMED.first(conn, {"trigger_id": trigger_id, "key": key})
        return None if row is None else {**delivery_view(row), "duplicate": True}


def disable_for_workflow(session, workflow_id):
    """The ``workflow_deleting`` hook: disable the workflow's triggers in the deleting transaction."""
    return _disable(session, WebhookTrigger.workflow_id == workflow_id, "workflow_deleted")


def _disable(session, where, reason):
    return session.execute(update(WebhookTrigger).where(where, WebhookTrigger.active.is_(True))
                           .values(active=False, secret_hash="", disabled_at=utcnow(), disabled_reason=reason)
                           .execution_options(synchronize_session=False)).rowcount
