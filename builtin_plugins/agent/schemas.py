"""Agent request and response schemas."""
import os

from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate, validates, validates_schema

from core.schemas import StoredText, StrictSchema


class FileGrant(StrictSchema):
    path = StoredText(required=True, validate=validate.Length(1, 4096))
    access = fields.String(load_default="read", validate=validate.OneOf(("read", "read-write")))
    scope = fields.String(load_default="session", validate=validate.OneOf(("session", "persistent")))

    @validates("path")
    def _absolute(self, value, **kwargs):
        # A relative grant would depend on the host's working directory.
        if not os.path.isabs(os.path.expanduser(value)):
            raise ValidationError("Must be an absolute path.")


class AgentConfig(StrictSchema):
    planApproval = fields.String(load_default="required", validate=validate.OneOf(("required", "auto")))
    permissionMode = fields.String(load_default="ask", validate=validate.OneOf(("ask", "auto")))
    maxSteps = fields.Integer(strict=True, load_default=None, allow_none=True, validate=validate.Range(1, 256))
    model = fields.String(load_default=None, allow_none=True, validate=validate.Length(1, 200))
    plan = fields.Dict(load_default=None, allow_none=True)
    fileGrants = fields.List(fields.Nested(FileGrant), load_default=list, validate=validate.Length(max=64))


CONFIG = AgentConfig()  # reusable: a schema keeps no state between loads, and is costly to build


class RunIn(StrictSchema):
    goal = StoredText(required=True, validate=validate.Length(1, 20000))
    config = fields.Nested(AgentConfig, load_default=lambda: CONFIG.load({}))


class BatchIn(StrictSchema):
    goals = fields.List(StoredText(validate=validate.Length(1, 20000)), required=True,
                        validate=validate.Length(1, 8))
    config = fields.Nested(AgentConfig, load_default=lambda: CONFIG.load({}))


class RunOut(Schema):
    runId = fields.String()


class BatchOut(Schema):
    runIds = fields.List(fields.String())


class TicketIn(StrictSchema):
    runId = fields.String(load_default=None, allow_none=True, validate=validate.Length(1, 36))


class Ticket(Schema):
    ticket = fields.String()
    expiresIn = fields.Integer()


class StreamQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    runId = fields.String(required=True, validate=validate.Length(1, 36))
    ticket = fields.String(load_default=None)


class RunsQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    limit = fields.Integer(load_default=50, validate=validate.Range(1, 200))


class ApproveIn(Schema):
    """Optional: ``gateId``, and an edited AgentPlan (as ``plan`` or inline ``goal``/``steps``)."""

    class Meta:
        unknown = EXCLUDE

    gateId = fields.String(load_default=None, allow_none=True, validate=validate.Length(1, 100))
    plan = fields.Dict(load_default=None, allow_none=True)
    goal = fields.String(load_default=None)
    steps = fields.List(fields.Raw(), load_default=None)

    @validates("steps")
    def _steps(self, value, **kwargs):
        if value is not None and not value:
            raise ValidationError("Must not be empty.")

    @validates_schema
    def _one_plan(self, data, **kwargs):
        if data.get("plan") is not None and data.get("steps") is not None:
            raise ValidationError("Send the edited plan either as plan or as goal and steps.", "plan")
        if data.get("goal") is not None and data.get("steps") is None:
            raise ValidationError("An edited plan needs its steps.", "steps")


class Approved(Schema):
    ok = fields.Boolean()
    gateId = fields.String()
    kind = fields.String()


class Cancelled(Schema):
    ok = fields.Boolean()
    cancelled = fields.Boolean()
    status = fields.String()


class RunSummary(Schema):
    runId = fields.String()
    goal = fields.String()
    status = fields.String()
    workflowId = fields.String(allow_none=True)
    workflowRevision = fields.Integer(allow_none=True)
    parentRunId = fields.String(allow_none=True)
    error = fields.String(allow_none=True)
    createdAt = fields.String()
    updatedAt = fields.String()
    finishedAt = fields.String(allow_none=True)


class RunDetail(RunSummary):
    plan = fields.Dict(allow_none=True)
    config = fields.Dict()
    inputs = fields.Dict()
    result = fields.Raw(allow_none=True)
    steps = fields.List(fields.Dict())
    events = fields.List(fields.Dict())
