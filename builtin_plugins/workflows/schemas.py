"""Workflow schemas."""
from marshmallow import Schema, ValidationError, fields, validate

from core.schemas import StoredText, StrictBoolean, StrictSchema

MAX_REVISION = 2**31 - 1


def _not_blank(value):
    if not value.strip():
        raise ValidationError("Must not be blank.")


def _revision():
    return fields.Integer(strict=True, load_default=None, allow_none=True,
                          validate=validate.Range(min=1, max=MAX_REVISION))


class WorkflowIn(StrictSchema):
    name = StoredText(required=True, validate=[validate.Length(1, 200), _not_blank])
    description = StoredText(load_default="", validate=validate.Length(max=4000))
    inputSchema = fields.Dict(required=True)
    plan = fields.Dict(required=True)
    layout = fields.Dict(load_default=None, allow_none=True)
    graph = fields.Dict(load_default=None, allow_none=True)


class WorkflowPut(WorkflowIn):
    expectedRevision = _revision()


class PublishIn(StrictSchema):
    published = StrictBoolean(required=True)
    expectedRevision = _revision()


class RestoreIn(StrictSchema):
    expectedRevision = _revision()


class RunIn(StrictSchema):
    inputs = fields.Dict(load_default=dict)
    config = fields.Dict(load_default=dict)


class DefinitionOut(Schema):
    """The definition fields a draft and a published snapshot share."""

    name = fields.String()
    description = fields.String()
    inputSchema = fields.Dict()
    plan = fields.Dict()
    layout = fields.Dict(allow_none=True)
    graph = fields.Dict(allow_none=True)
    revision = fields.Integer()


class WorkflowOut(DefinitionOut):
    id = fields.String()
    published = fields.Boolean()
    activeRevision = fields.Integer(allow_none=True)
    toolName = fields.String(allow_none=True)
    createdAt = fields.String()
    updatedAt = fields.String()


class RevisionSummary(Schema):
    revision = fields.Integer()
    name = fields.String()
    publishedAt = fields.String()
    active = fields.Boolean()


class RevisionOut(DefinitionOut):
    workflowId = fields.String()
    publishedAt = fields.String()
    active = fields.Boolean()


class Deleted(Schema):
    ok = fields.Boolean()
    cancelledSchedules = fields.Integer()
    cancelledWebhookTriggers = fields.Integer()


class RunOut(Schema):
    runId = fields.String()
