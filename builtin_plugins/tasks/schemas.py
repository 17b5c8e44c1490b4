"""Task schemas."""
from marshmallow import EXCLUDE, Schema, fields, validate


class TaskOut(Schema):
    taskId = fields.String()
    priority = fields.String()
    state = fields.String()
    phase = fields.String()
    kind = fields.String()
    source = fields.String(allow_none=True)
    runId = fields.String(allow_none=True)
    queuedAt = fields.String()
    startedAt = fields.String(allow_none=True)
    finishedAt = fields.String(allow_none=True)
    queueWaitMs = fields.Integer()
    runDurationMs = fields.Integer(allow_none=True)
    output = fields.Raw(allow_none=True)
    error = fields.String(allow_none=True)


class ListQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    limit = fields.Integer(load_default=50, validate=validate.Range(1, 200))


class WaitQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    timeoutMs = fields.Integer(load_default=0, validate=validate.Range(0, 60000))


class CancelOut(Schema):
    taskId = fields.String()
    cancelled = fields.Boolean()
    state = fields.String()


class Capacity(Schema):
    running = fields.Integer()
    queued = fields.Integer()
    maxRunning = fields.Integer()
    maxQueued = fields.Integer()
    interactive = fields.Dict()
    normal = fields.Dict()
    batch = fields.Dict()
    limits = fields.Dict()
    remaining = fields.Dict()
    owner = fields.Dict()
    activeOwners = fields.Integer()
    oldestQueueWaitMs = fields.Integer()
    oldestInteractiveQueueWaitMs = fields.Integer()
    oldestNormalQueueWaitMs = fields.Integer()
    oldestBatchQueueWaitMs = fields.Integer()
    saturated = fields.Boolean()
    schedulingPolicy = fields.String()
