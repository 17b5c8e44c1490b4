"""Webhook trigger schemas."""
from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate

from core.schemas import StoredText, StrictSchema


def _not_blank(value):
    if not value.strip():
        raise ValidationError("Must not be blank.")


class TriggerIn(StrictSchema):
    workflowId = fields.String(required=True, validate=validate.Length(1, 36))
    name = StoredText(load_default=None, validate=[validate.Length(1, 200), _not_blank])
    defaultInputs = fields.Dict(load_default=dict)
    # A webhook has nobody watching: gates release themselves unless the trigger asks for a person.
    permissionMode = fields.String(load_default="auto", validate=validate.OneOf(("ask", "auto")))


class TriggerOut(Schema):
    triggerId = fields.String()
    workflowId = fields.String()
    name = fields.String()
    defaultInputs = fields.Dict()
    permissionMode = fields.String()
    active = fields.Boolean()
    hookPath = fields.String()
    createdAt = fields.String()
    secretRotatedAt = fields.String()


class TriggerWithSecret(TriggerOut):
    """Only the create and rotate-secret answers carry the plaintext secret."""

    secret = fields.String()


class DeliveriesQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    limit = fields.Integer(load_default=20, validate=validate.Range(1, 100))


class DeliveryOut(Schema):
    deliveryId = fields.String()
    taskId = fields.String()
    runId = fields.String()
    status = fields.String()
    receivedAt = fields.String()
    startedAt = fields.String(allow_none=True)
    finishedAt = fields.String(allow_none=True)
    error = fields.String(allow_none=True)
    idempotencyKeySupplied = fields.Boolean()


class Delivered(DeliveryOut):
    """The hook's answer: 202 for a new event, 200 (``duplicate`` true) for a repeat."""

    duplicate = fields.Boolean()


class HookBody(Schema):
    """Any JSON object: overlaid on the trigger's defaultInputs, checked against the inputSchema."""

    class Meta:
        unknown = EXCLUDE


class Deleted(Schema):
    ok = fields.Boolean()
    triggerId = fields.String()
