"""Workflow logic: drafts with optimistic concurrency, immutable snapshots, catalog tools, runs."""
import json
import logging
import re
import threading
import unicodedata
import uuid

import jsonschema
from cachetools import LRUCache
from marshmallow import ValidationError
from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError

from core import plans
from core.db import Prepared, connection_of, isoformat, utcnow
from core.errors import ApiError, Conflict, NotFound
from core.tools import Tool, ToolError

from .models import Workflow, WorkflowRevision
from .schemas import MAX_REVISION

log = logging.getLogger("agenthost.workflows")

OWNER = "local"
MAX_DOC_BYTES = 1024 * 1024
MAX_INPUT_SCHEMA_BYTES = 256 * 1024
# A workflow tool may run workflows (itself included): nesting stops here instead of forking forever.
MAX_NESTING = 8
TRIGGER_COUNTS = {"schedules": "cancelledSchedules", "webhookTriggers": "cancelledWebhookTriggers"}


def _bad_schema(message):
    return ApiError(400, "validation_failed", "inputSchema is not a usable JSON Schema.",
                    errors={"inputSchema": [message]})


def check_input_schema(schema):
    """The inputSchema must be a valid JSON Schema for an object, with only local ``$ref``s."""
    if len(json.dumps(schema)) > MAX_INPUT_SCHEMA_BYTES:
        raise _bad_schema(f"Larger than {MAX_INPUT_SCHEMA_BYTES // 1024} KiB.")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise _bad_schema(exc.message[:300]) from None
    if schema.get("type", "object") != "object":
        raise ApiError(400, "validation_failed", "inputSchema must describe an object.",
                       errors={"inputSchema": ["Must have type object."]})
    for ref in _refs(schema):
        if not _local_ref_resolves(schema, ref):
            raise _bad_schema(f"$ref {ref[:100]!r} does not resolve inside the schema "
                              "(only local references such as #/$defs/name are supported).")


def _refs(value):
    if isinstance(value, dict):
        if isinstance(value.get("$ref"), str):
            yield value["$ref"]
        for item in value.values():
            yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def _local_ref_resolves(schema, ref):
    if not ref.startswith("#"):
        return False
    pointer = ref[1:]
    if pointer and not pointer.startswith("/"):
        return False
    node = schema
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def input_names(schema):
    properties = schema.get("properties")
    return set(properties) if isinstance(properties, dict) else set()


def input_validator(schema):
    """A compiled validator of an inputSchema (kept with a cached snapshot)."""
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def validate_inputs(schema, inputs, validator=None):
    errors = {}
    try:
        validator = validator or input_validator(schema)
        for err in validator.iter_errors(inputs):
            where = "inputs" + "".join(f".{p}" for p in err.absolute_path)
            for key, message in _per_field(err, where):
                errors.setdefault(key, []).append(message[:300])
    except jsonschema.exceptions.SchemaError:
        raise _bad_schema("The stored inputSchema cannot be applied.") from None
    except Exception:  # an unresolvable reference: the schema, not the inputs, is at fault
        raise _bad_schema("The stored inputSchema cannot be applied.") from None
    if errors:
        raise ApiError(400, "validation_failed", "The inputs do not match the workflow's inputSchema.",
                       errors=errors)


def _per_field(err, where):
    """A missing or unexpected property is reported at that property, not at its parent."""
    if err.validator == "required" and isinstance(err.instance, dict):
        missing = [p for p in err.validator_value if isinstance(p, str) and p not in err.instance]
        if missing:
            return [(f"{where}.{p}", "Missing data for required field.") for p in missing]
    if err.validator == "additionalProperties" and err.validator_value is False and isinstance(err.instance, dict):
        known = set((err.schema.get("properties") or {}))
        patterns = list((err.schema.get("patternProperties") or {}))
        extra = [p for p in err.instance if p not in known and not any(re.search(x, p) for x in patterns)]
        if extra:
            return [(f"{where}.{p}", "Unknown field.") for p in extra]
    return [(where, err.message)]


def tool_name(row_id, name):
    """``workflow_<slug>_<first 8 of the id>``: at most 58 characters, valid for model APIs."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", ascii_name).strip("_-").lower()[:40] or "workflow"
    return f"workflow_{slug}_{row_id[:8]}"


def _dumps(value):
    return None if value is None else json.dumps(value)


def _loads(value):
    return None if value is None else json.loads(value)


def view(row, active_name=None):
    """The draft as the API shows it; ``active_name`` is the active snapshot's name (its tool name)."""
    published = bool(row.published) and row.active_revision is not None
    return {
        "id": row.id, "name": row.name, "description": row.description,
        "inputSchema": json.loads(row.input_schema), "plan": json.loads(row.plan),
        "layout": _loads(row.layout), "graph": _loads(row.graph),
        "revision": row.revision, "published": published, "activeRevision": row.active_revision,
        "toolName": tool_name(row.id, active_name or row.name) if published else None,
        "createdAt": isoformat(row.created_at), "updatedAt": isoformat(row.updated_at),
    }


def snapshot_view(snap, active_revision):
    return {
        "workflowId": snap.workflow_id, "revision": snap.revision, "name": snap.name,
        "description": snap.description, "inputSchema": json.loads(snap.input_schema),
        "plan": json.loads(snap.plan), "layout": _loads(snap.layout), "graph": _loads(snap.graph),
        "publishedAt": isoformat(snap.published_at), "active": snap.revision == active_revision,
    }


def _stale(current, expected):
    return Conflict("stale_revision", f"The draft is at revision {current}, not {expected}.",
                    currentRevision=current)


_W, _V = Workflow.__table__, WorkflowRevision.__table__
_PUBLISHED_STATE = Prepared(select(_W.c.owner, _W.c.published, _W.c.active_revision)
                            .where(_W.c.id == bindparam("workflow_id")))
_REVISION = select(_V).where(_V.c.workflow_id == bindparam("workflow_id"), _V.c.revision == bindparam("revision"))
SNAPSHOT_CACHE = 256  # published revisions kept parsed, with their compiled input validators


class Workflows:
    """The workflows service (``host.service("workflows")``)."""

    def __init__(self, host):
        self.host = host
        # (workflow id, revision) -> (snapshot view, input validator). Revisions are
        # immutable, so an entry never goes stale; the workflow row is still read on
        # every run, so unpublishing, deleting or restoring takes effect at once.
        self._snapshots = LRUCache(SNAPSHOT_CACHE)
        self._tools = {}  # workflow id -> tool name
        # Reading the published state and changing the catalog happen as one step, so the
        # catalog always ends up matching the last committed state.
        self._catalog_lock = threading.RLock()

    # -- validation ----------------------------------------------------------------------

    def _validated(self, data):
        check_input_schema(data["inputSchema"])
        for key in ("layout", "graph"):
            if data.get(key) is not None and len(json.dumps(data[key])) > MAX_DOC_BYTES:
                raise ApiError(400, "validation_failed", f"{key} is too large.", errors={key: ["Over 1 MiB."]})
        self._check_plan(data["plan"], data["inputSchema"])
        return data

    def _check_plan(self, plan, input_schema):
        try:
            plans.validate(plan, tools=self.host.tools, input_names=input_names(input_schema))
        except plans.PlanError as exc:
            raise ApiError(400, "invalid_plan", f"The plan is invalid: {exc}",
                           errors={k if k == "plan" else f"plan.{k}": v for k, v in exc.errors.items()}) from None

    # -- drafts --------------------------------------------------------------------------

    def create(self, data, owner=OWNER):
        data = self._validated(data)
        now = utcnow()
        row = Workflow(id=str(uuid.uuid4()), owner=owner, name=data["name"], description=data["description"],
                       input_schema=json.dumps(data["inputSchema"]), plan=json.dumps(data["plan"]),
                       layout=_dumps(data.get("layout")), graph=_dumps(data.get("graph")), revision=1,
                       published=False, active_revision=None, created_at=now, updated_at=now)
        with self.host.db.session() as s:
            s.add(row)
        return view(row)

    def list(self, owner=OWNER):
        with self.host.db.session() as s:
            rows = s.execute(select(Workflow).where(Workflow.owner == owner)
                             .order_by(Workflow.updated_at.desc(), Workflow.id)).scalars().all()
            return [self._view(s, r) for r in rows]

    def _row(self, s, workflow_id, owner, *, lock=False):
        query = select(Workflow).where(Workflow.id == workflow_id).execution_options(populate_existing=True)
        row = s.execute(query.with_for_update() if lock else query).scalar_one_or_none()
        if row is None or row.owner != owner:
            raise NotFound("workflow")
        return row

    def _view(self, s, row):
        name = None
        if row.published and row.active_revision is not None:
            name = s.execute(select(WorkflowRevision.name).where(
                WorkflowRevision.workflow_id == row.id,
                WorkflowRevision.revision == row.active_revision)).scalar_one_or_none()
        return view(row, name)

    def get(self, workflow_id, owner=OWNER):
        with self.host.db.session() as s:
            return self._view(s, self._row(s, workflow_id, owner))

    def replace(self, workflow_id, data, expected=None, owner=OWNER):
        data = self._validated(data)
        return self._write_draft(workflow_id, owner, expected, {
            "name": data["name"], "description": data["description"],
            "input_schema": json.dumps(data["inputSchema"]), "plan": json.dumps(data["plan"]),
            "layout": _dumps(data.get("layout")), "graph": _dumps(data.get("graph"))})

    def _write_draft(self, workflow_id, owner, expected, values):
        """One conditional UPDATE: concurrent writers with the same expectedRevision -> one wins, the rest 409."""
        with self.host.db.session() as s:
            row = self._row(s, workflow_id, owner)
            current = row.revision
            if expected is not None and expected != current:
                raise _stale(current, expected)
            result = s.execute(update(Workflow).where(Workflow.id == workflow_id, Workflow.revision == current)
                               .values(revision=current + 1, updated_at=utcnow(), **values)
                               .execution_options(synchronize_session=False))
            if result.rowcount != 1:
                raise Conflict("stale_revision", "The draft changed meanwhile; reload it.")
            # Answer what this transaction wrote, not whatever a later writer committed.
            return self._view(s, self._row(s, workflow_id, owner))

    # -- publishing ----------------------------------------------------------------------

    def publish(self, workflow_id, published, expected=None, owner=OWNER):
        result = self._publish(workflow_id, published, expected, owner)
        self._sync_tool(workflow_id)
        return result

    def _publish(self, workflow_id, published, expected, owner):
        with self.host.db.session() as s:
            row = self._row(s, workflow_id, owner)
            current = row.revision
            if expected is not None and expected != current:
                raise _stale(current, expected)
            if published:
                # The catalog may have changed since the draft was saved: a snapshot must be runnable.
                self._check_plan(json.loads(row.plan), json.loads(row.input_schema))
                values = {"published": True, "active_revision": current}
            else:
                values = {"published": False, "active_revision": None}
            # The row lock taken by this UPDATE orders concurrent publishes, edits and deletes.
            result = s.execute(update(Workflow).where(Workflow.id == workflow_id, Workflow.revision == current)
                               .values(updated_at=utcnow(), **values).execution_options(synchronize_session=False))
            if result.rowcount != 1:
                raise Conflict("stale_revision", "The draft changed meanwhile; reload it.")
            if published and s.get(WorkflowRevision, (workflow_id, current)) is None:
                try:
                    with s.begin_nested():
                        s.add(WorkflowRevision(workflow_id=workflow_id, revision=current, name=row.name,
                                               description=row.description, input_schema=row.input_schema,
                                               plan=row.plan, layout=row.layout, graph=row.graph,
                                               published_at=utcnow()))
                except IntegrityError:
                    pass  # a concurrent publish of this revision won: snapshots are immutable, reuse it
            return self._view(s, self._row(s, workflow_id, owner))

    def revisions(self, workflow_id, owner=OWNER):
        with self.host.db.session() as s:
            row = self._row(s, workflow_id, owner)
            snaps = s.execute(select(WorkflowRevision).where(WorkflowRevision.workflow_id == workflow_id)
                              .order_by(WorkflowRevision.revision.desc())).scalars().all()
            return [{"revision": x.revision, "name": x.name, "publishedAt": isoformat(x.published_at),
                     "active": x.revision == row.active_revision} for x in snaps]

    def revision(self, workflow_id, revision, owner=OWNER):
        with self.host.db.session() as s:
            row = self._row(s, workflow_id, owner)
            snap = s.get(WorkflowRevision, (workflow_id, revision)) if 1 <= revision <= MAX_REVISION else None
            if snap is None:
                raise NotFound("revision")
            return snapshot_view(snap, row.active_revision)

    def restore(self, workflow_id, revision, expected=None, owner=OWNER):
        snap = self.revision(workflow_id, revision, owner)
        return self._write_draft(workflow_id, owner, expected, {
            "name": snap["name"], "description": snap["description"],
            "input_schema": json.dumps(snap["inputSchema"]), "plan": json.dumps(snap["plan"]),
            "layout": _dumps(snap["layout"]), "graph": _dumps(snap["graph"])})

    def delete(self, workflow_id, owner=OWNER):
        """Delete with everything that triggers the workflow, or nothing at all.

        Every ``workflow_deleting`` implementation cancels its triggers through
        this transaction's session. One that raises (or answers something other
        than counts) rolls the whole delete back: a deleted workflow must never
        keep a live schedule or webhook trigger.
        """
        counts = dict.fromkeys(TRIGGER_COUNTS, 0)
        with self.host.db.session() as s:
            self._row(s, workflow_id, owner, lock=True)
            for impl in self.host.plugins.hookimpls("workflow_deleting"):
                name = impl.plugin_name
                if not self.host.plugins.is_active(name):
                    continue
                args = {"host": self.host, "workflow_id": workflow_id, "session": s}
                try:
                    answer = impl.function(*[args[a] for a in impl.argnames])
                    for key, value in _trigger_counts(answer).items():
                        counts[key] += value
                except Exception:
                    log.exception("plugin %s failed to cancel the triggers of workflow %s; delete rolled back",
                                  name, workflow_id)
                    raise ApiError(500, "workflow_delete_failed",
                                   "The workflow was not deleted: cancelling its schedules or webhook triggers "
                                   f"failed in the plugin {name!r}.") from None
            s.execute(WorkflowRevision.__table__.delete().where(WorkflowRevision.workflow_id == workflow_id))
            s.execute(Workflow.__table__.delete().where(Workflow.id == workflow_id))
        self._sync_tool(workflow_id)
        return {"ok": True, **{TRIGGER_COUNTS[k]: v for k, v in counts.items()}}

    # -- running -------------------------------------------------------------------------

    def runnable(self, workflow_id, owner=OWNER, *, published_only=False):
        """The snapshot a run uses: the active published revision, else (unless published_only) the draft."""
        return self._runnable(workflow_id, owner, published_only)[0]

    def _runnable(self, workflow_id, owner, published_only, conn=None):
        """(snapshot, its compiled input validator or None); read on ``conn`` when given."""
        if conn is None:
            with self.host.db.engine.connect() as own:
                return self._runnable(workflow_id, owner, published_only, own)
        state = _PUBLISHED_STATE.first(conn, {"workflow_id": workflow_id})
        if state is None or state.owner != owner:
            raise NotFound("workflow")
        if state.published and state.active_revision is not None:
            cached = self._published(conn, workflow_id, state.active_revision)
            if cached is not None:
                return dict(cached[0]), cached[1]
        return self._draft_or_conflict(workflow_id, owner, published_only), None

    def _published(self, conn, workflow_id, revision):
        key = (workflow_id, revision)
        cached = self._snapshots.get(key)
        if cached is None:
            snap = conn.execute(_REVISION, {"workflow_id": workflow_id, "revision": revision}).one_or_none()
            if snap is None:
                return None
            view_ = snapshot_view(snap, revision)
            try:
                validator = input_validator(view_["inputSchema"])
            except Exception:  # validate_inputs reports an unusable schema as a 400
                validator = None
            cached = self._snapshots[key] = (view_, validator)
        return cached

    def _draft_or_conflict(self, workflow_id, owner, published_only):
        """The draft (no published revision to run), or 409 when only a published one will do."""
        if published_only:
            raise ApiError(409, "workflow_not_published", "The workflow is not published.")
        with self.host.db.session() as s:
            row = self._row(s, workflow_id, owner)
            return {**view(row), "workflowId": row.id, "revision": row.revision}

    def check_inputs(self, workflow_id, inputs, owner=OWNER, published_only=True):
        """The snapshot a run would use, after checking ``inputs`` against its inputSchema
        exactly as a run does (400 with per-field errors). For areas that schedule runs."""
        snap, validator = self._runnable(workflow_id, owner, published_only)
        validate_inputs(snap["inputSchema"], inputs, validator)
        return snap

    def run(self, workflow_id, inputs, config, owner=OWNER, parent_run_id=None, published_only=False,
            **task_options):
        """Start a run of the active snapshot (else the draft); returns its run id.

        ``task_options`` go to the agent's task admission: ``priority`` (interactive for a
        person, normal for schedules and webhooks), ``source``, ``session`` to admit
        inside the caller's transaction, and ``task_id`` to name the task.
        """
        if config.get("plan") is not None:
            raise ValidationError({"config": {"plan": ["A workflow run uses the workflow's own plan."]}})
        session = task_options.get("session")  # admitting in the caller's transaction: read in it too
        snap, validator = self._runnable(workflow_id, owner, published_only,
                                         connection_of(session) if session is not None else None)
        validate_inputs(snap["inputSchema"], inputs, validator)
        agent = self.host.service("agent")
        if agent is None:
            raise ApiError(503, "agent_unavailable", "The agent is not running.")
        return agent.start_run(f"Workflow: {snap['name']}", config, owner=owner, plan=snap["plan"], inputs=inputs,
                               workflow_id=workflow_id, workflow_revision=snap["revision"],
                               parent_run_id=parent_run_id, **task_options)

    def run_and_wait(self, workflow_id, inputs, ctx, timeout=600):
        """Run as a child of the calling run and wait for its end (the workflow tools).

        The child's plan needs no second review (the parent's step called it),
        but its step gates keep the parent's permissionMode: a workflow tool
        never turns an ``ask`` run into an ``auto`` one.
        """
        agent = self.host.service("agent")
        if agent is None:
            raise ToolError("the agent is not running")
        permission = "ask"  # no calling run to inherit from: a person approves the gates
        if ctx.run_id is not None:
            permission, depth = self._parent_chain(agent, ctx.run_id, ctx.owner)
            if depth >= MAX_NESTING:
                raise ToolError(f"workflows nest deeper than {MAX_NESTING} runs; stopping here")
        config = agent.parse_config({"planApproval": "auto", "permissionMode": permission})
        run_id = self.run(workflow_id, inputs, config, owner=ctx.owner, parent_run_id=ctx.run_id,
                          published_only=True)
        return agent.wait(run_id, timeout=timeout, cancelled=ctx.cancelled)

    @staticmethod
    def _parent_chain(agent, run_id, owner):
        """(permissionMode of the calling run, how many runs it is nested in)."""
        try:
            run = agent.run_detail(run_id, owner)
        except ApiError:
            return "ask", 0
        permission = (run.get("config") or {}).get("permissionMode", "ask")
        depth, parent = 0, run.get("parentRunId")
        while parent and depth < MAX_NESTING:
            depth += 1
            try:
                parent = agent.run_detail(parent, owner).get("parentRunId")
            except ApiError:
                break
        return permission, depth

    # -- the catalog ---------------------------------------------------------------------

    def load_tools(self):
        with self.host.db.session() as s:
            ids = [r for r in s.execute(select(Workflow.id).where(Workflow.published.is_(True))).scalars()]
        for workflow_id in ids:
            self._sync_tool(workflow_id)

    def unload_tools(self):
        with self._catalog_lock:
            for workflow_id in list(self._tools):
                self.host.tools.remove_source(f"workflow:{workflow_id}")
            self._tools.clear()

    def _sync_tool(self, workflow_id):
        """Make the catalog match the committed state: the active snapshot's tool, or none."""
        with self._catalog_lock:
            with self.host.db.session() as s:
                row = s.get(Workflow, workflow_id)
                snap = None
                if row is not None and row.published and row.active_revision is not None:
                    snap = s.get(WorkflowRevision, (workflow_id, row.active_revision))
            source = f"workflow:{workflow_id}"
            self.host.tools.remove_source(source)
            self._tools.pop(workflow_id, None)
            if snap is None:
                return
            name = tool_name(workflow_id, snap.name)

            def handler(arguments, ctx):
                try:
                    return self.run_and_wait(workflow_id, arguments, ctx)
                except ApiError as exc:
                    raise ToolError(exc.detail or exc.code) from None

            try:
                tool = Tool(name, snap.description or f"Run the workflow {snap.name}",
                            json.loads(snap.input_schema), handler, source=source)
                self.host.tools.add(tool)
            except ValueError as exc:  # the name is taken by another tool
                log.error("published workflow %s stays out of the tool catalog: %s", workflow_id, exc)
                return
            self._tools[workflow_id] = name


def _trigger_counts(answer):
    """A ``workflow_deleting`` answer: None, or ``{"schedules": n, "webhookTriggers": m}``."""
    if answer is None:
        return {}
    if not isinstance(answer, dict) or set(answer) - set(TRIGGER_COUNTS):
        raise TypeError(f"workflow_deleting must return counts, not {answer!r:.100}")
    for key, value in answer.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TypeError(f"workflow_deleting count {key} must be a non-negative integer")
    return answer
