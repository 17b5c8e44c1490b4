"""Workflow logic: drafts with optimistic concurrency, immutable snapshots, catalog tools, runs."""
import json
import re
import uuid

import jsonschema
from sqlalchemy import select, update

from core import plans
from core.db import isoformat, utcnow
from core.errors import ApiError, Conflict, NotFound
from core.tools import Tool, ToolError

from .models import Workflow, WorkflowRevision

OWNER = "local"
MAX_DOC_BYTES = 1024 * 1024


def check_input_schema(schema):
    """The inputSchema must be a valid JSON Schema for an object."""
    try:
        jsonschema.validators.validator_for(schema)(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ApiError(400, "validation_failed", "inputSchema is not a valid JSON Schema.",
                       errors={"inputSchema": [exc.message[:300]]}) from None
    if schema.get("type", "object") != "object":
        raise ApiError(400, "validation_failed", "inputSchema must describe an object.",
                       errors={"inputSchema": ["Must have type object."]})


def input_names(schema):
    return set((schema.get("properties") or {}).keys())


def validate_inputs(schema, inputs):
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = {}
    for err in validator.iter_errors(inputs):
        key = "inputs" + "".join(f".{p}" for p in err.path)
        errors.setdefault(key, []).append(err.message[:300])
    if errors:
        raise ApiError(400, "validation_failed", "The inputs do not match the workflow's inputSchema.",
                       errors=errors)


def tool_name(row_id, name):
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_").lower()[:40] or "workflow"
    return f"workflow_{slug}_{row_id[:8]}"


def _dumps(value):
    return None if value is None else json.dumps(value)


def _loads(value):
    return None if value is None else json.loads(value)


def view(row):
    return {
        "id": row.id, "name": row.name, "description": row.description,
        "inputSchema": json.loads(row.input_schema), "plan": json.loads(row.plan),
        "layout": _loads(row.layout), "graph": _loads(row.graph),
        "revision": row.revision, "published": bool(row.published), "activeRevision": row.active_revision,
        "toolName": tool_name(row.id, row.name) if row.published else None,
        "createdAt": isoformat(row.created_at), "updatedAt": isoformat(row.updated_at),
    }


def snapshot_view(snap, active_revision):
    return {
        "workflowId": snap.workflow_id, "revision": snap.revision, "name": snap.name,
        "description": snap.description, "inputSchema": json.loads(snap.input_schema),
        "plan": json.loads(snap.plan), "layout": _loads(snap.layout), "graph": _loads(snap.graph),
        "publishedAt": isoformat(snap.published_at), "active": snap.revision == active_revision,
    }


class Workflows:
    """The workflows service (``host.service("workflows")``)."""

    def __init__(self, host):
        self.host = host
        self._tools = {}  # workflow id -> tool name

    # -- validation ----------------------------------------------------------------------

    def _validated(self, data):
        check_input_schema(data["inputSchema"])
        for key in ("layout", "graph"):
            if data.get(key) is not None and len(json.dumps(data[key])) > MAX_DOC_BYTES:
                raise ApiError(400, "validation_failed", f"{key} is too large.", errors={key: ["Over 1 MiB."]})
        try:
            plans.validate(data["plan"], tools=self.host.tools, input_names=input_names(data["inputSchema"]))
        except plans.PlanError as exc:
            raise ApiError(400, "invalid_plan", f"The plan is invalid: {exc}",
                           errors={f"plan.{k}": v for k, v in exc.errors.items()}) from None
        return data

    # -- drafts --------------------------------------------------------------------------

    def create(self, data, owner=OWNER):
        data = self._validated(data)
        now = utcnow()
        row = Workflow(id=str(uuid.uuid4()), owner=owner, name=data["name"], description=data["description"],
                       input_schema=json.dumps(data["inputSchema"]), plan=json.dumps(data["plan"]),
                       layout=_dumps(data.get("layout")), graph=_dumps(data.get("graph")), revision=1,
                       published=False, created_at=now, updated_at=now)
        with self.host.db.session() as s:
            s.add(row)
        return view(row)

    def list(self, owner=OWNER):
        with self.host.db.session() as s:
            rows = s.execute(select(Workflow).where(Workflow.owner == owner)
                             .order_by(Workflow.updated_at.desc(), Workflow.id)).scalars().all()
            return [view(r) for r in rows]

    def _row(self, s, workflow_id, owner):
        row = s.get(Workflow, workflow_id)
        if row is None or row.owner != owner:
            raise NotFound("workflow")
        return row

    def get(self, workflow_id, owner=OWNER):
        with self.host.db.session() as s:
            return view(self._row(s, workflow_id, owner))

    def replace(self, workflow_id, data, expected=None, owner=OWNER):
        data = self._validated(data)
        return self._write_draft(workflow_id, owner, expected, {
            "name": data["name"], "description": data["description"],
            "input_schema": json.dumps(data["inputSchema"]), "plan": json.dumps(data["plan"]),
            "layout": _dumps(data.get("layout")), "graph": _dumps(data.get("graph"))})

    def _write_draft(self, workflow_id, owner, expected, values):
        """One conditional UPDATE: concurrent writers with the same expectedRevision -> one wins, one 409."""
        with self.host.db.session() as s:
            row = self._row(s, workflow_id, owner)
            current = row.revision
            if expected is not None and expected != current:
                raise Conflict("stale_revision", f"The draft is at revision {current}, not {expected}.",
                               currentRevision=current)
            result = s.execute(update(Workflow).where(Workflow.id == workflow_id, Workflow.revision == current)
                               .values(revision=current + 1, updated_at=utcnow(), **values)
                               .execution_options(synchronize_session=False))
            if result.rowcount != 1:
                raise Conflict("stale_revision", "The draft changed meanwhile; reload it.")
        return self.get(workflow_id, owner)

    # -- publishing ----------------------------------------------------------------------

    def publish(self, workflow_id, published, expected=None, owner=OWNER):
        with self.host.db.session() as s:
            row = self._row(s, workflow_id, owner)
            current = row.revision
            if expected is not None and expected != current:
                raise Conflict("stale_revision", f"The draft is at revision {current}, not {expected}.",
                               currentRevision=current)
            if published:
                if s.get(WorkflowRevision, (workflow_id, current)) is None:
                    s.add(WorkflowRevision(workflow_id=workflow_id, revision=current, name=row.name,
                                           description=row.description, input_schema=row.input_schema,
                                           plan=row.plan, layout=row.layout, graph=row.graph,
                                           published_at=utcnow()))
                values = {"published": True, "active_revision": current}
            else:
                values = {"published": False, "active_revision": None}
            result = s.execute(update(Workflow).where(Workflow.id == workflow_id, Workflow.revision == current)
                               .values(updated_at=utcnow(), **values).execution_options(synchronize_session=False))
            if result.rowcount != 1:
                raise Conflict("stale_revision", "The draft changed meanwhile; reload it.")
        self._sync_tool(workflow_id)
        return self.get(workflow_id, owner)

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
            snap = s.get(WorkflowRevision, (workflow_id, revision))
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
        cancelled = {"schedules": 0, "webhookTriggers": 0}
        with self.host.db.session() as s:
            row = self._row(s, workflow_id, owner)
            # Triggers are cancelled in this same transaction by whoever owns them.
            for _name, counts in self.host.plugins.call_each("workflow_deleting", host=self.host,
                                                             workflow_id=workflow_id, session=s):
                for key in cancelled:
                    cancelled[key] += int((counts or {}).get(key, 0))
            s.execute(WorkflowRevision.__table__.delete().where(WorkflowRevision.workflow_id == workflow_id))
            s.delete(row)
        self._drop_tool(workflow_id)
        return {"ok": True, "cancelledSchedules": cancelled["schedules"],
                "cancelledWebhookTriggers": cancelled["webhookTriggers"]}

    # -- running -------------------------------------------------------------------------

    def runnable(self, workflow_id, owner=OWNER, *, published_only=False):
        """The snapshot a run uses: the active published revision, else (unless published_only) the draft."""
        with self.host.db.session() as s:
            row = self._row(s, workflow_id, owner)
            if row.published and row.active_revision is not None:
                snap = s.get(WorkflowRevision, (workflow_id, row.active_revision))
                return snapshot_view(snap, row.active_revision)
            if published_only:
                raise ApiError(409, "workflow_not_published", "The workflow is not published.")
            return {**view(row), "workflowId": row.id, "revision": row.revision}

    def run(self, workflow_id, inputs, config, owner=OWNER, parent_run_id=None, published_only=False):
        snap = self.runnable(workflow_id, owner, published_only=published_only)
        validate_inputs(snap["inputSchema"], inputs)
        agent = self.host.service("agent")
        if agent is None:
            raise ApiError(503, "agent_unavailable", "The agent is not running.")
        return agent.start_run(f"Workflow: {snap['name']}", config, owner=owner, plan=snap["plan"], inputs=inputs,
                               workflow_id=workflow_id, workflow_revision=snap["revision"],
                               parent_run_id=parent_run_id)

    def run_and_wait(self, workflow_id, inputs, ctx, timeout=600):
        """Run as a child of the calling run and wait for its end (the workflow tools)."""
        agent = self.host.service("agent")
        config = {"planApproval": "auto", "permissionMode": "auto"}
        run_id = self.run(workflow_id, inputs, config, owner=ctx.owner, parent_run_id=ctx.run_id,
                          published_only=True)
        return agent.wait(run_id, timeout=timeout, cancelled=ctx.cancelled)

    # -- the catalog ---------------------------------------------------------------------

    def load_tools(self):
        with self.host.db.session() as s:
            ids = [r for r in s.execute(select(Workflow.id).where(Workflow.published.is_(True))).scalars()]
        for workflow_id in ids:
            self._sync_tool(workflow_id)

    def unload_tools(self):
        for workflow_id in list(self._tools):
            self._drop_tool(workflow_id)

    def _drop_tool(self, workflow_id):
        name = self._tools.pop(workflow_id, None)
        if name:
            self.host.tools.remove(name)

    def _sync_tool(self, workflow_id):
        self._drop_tool(workflow_id)
        with self.host.db.session() as s:
            row = s.get(Workflow, workflow_id)
            if row is None or not row.published or row.active_revision is None:
                return
            snap = s.get(WorkflowRevision, (workflow_id, row.active_revision))
            name, schema, description = tool_name(row.id, snap.name), json.loads(snap.input_schema), snap.description

        def handler(arguments, ctx):
            try:
                return self.run_and_wait(workflow_id, arguments, ctx)
            except ApiError as exc:
                raise ToolError(exc.detail or exc.code) from None

        self.host.tools.add(Tool(name, description or f"Run the workflow {snap.name}", schema, handler,
                                 source=f"workflow:{workflow_id}"))
        self._tools[workflow_id] = name
