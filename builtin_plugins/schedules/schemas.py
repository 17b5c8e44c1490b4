"""Schedule schemas."""
from marshmallow import Schema, ValidationError, fields, validate

from core.schemas import StoredText, StrictBoolean, StrictSchema


class StrictInteger(fields.Integer):
    """Only JSON integers (marshmallow's strict Integer still takes true as 1)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError("Not a valid integer.")
        return super()._deserialize(value, attr, data, **kwargs)


class ScheduleIn(StrictSchema):
    workflowId = StoredText(required=True, validate=validate.Length(1, 36))
    inputs = fields.Dict(load_default=dict)
    intervalSeconds = StrictInteger(load_default=None, allow_none=True)
    recurring = StrictBoolean(load_default=True)
    fireImmediately = StrictBoolean(load_default=False)
    # Checked field by field by the service (zone lookups, per-frequency rules): see calendar.py.
    calendar = fields.Raw(load_default=None, allow_none=True)


class CalendarOut(Schema):
    frequency = fields.String()
    time = fields.String()
    zoneId = fields.String()
    weekdays = fields.List(fields.Integer())
    monthDay = fields.Integer()


class ScheduleOut(Schema):
    id = fields.String()
    workflowId = fields.String()
    inputs = fields.Dict()
    intervalSeconds = fields.Integer(allow_none=True)
    recurring = fields.Boolean()
    calendar = fields.Nested(CalendarOut, allow_none=True)
    fireImmediately = fields.Boolean()
    state = fields.String()
    active = fields.Boolean()
    nextFireAt = fields.String(allow_none=True)
    fires = fields.Integer()
    missedFires = fields.Integer()
    lastTaskId = fields.String(allow_none=True)
    lastRunId = fields.String(allow_none=True)
    lastError = fields.String(allow_none=True)
    lastFiredAt = fields.String(allow_none=True)
    expiresAt = fields.String(allow_none=True)
    sandbox = fields.Dict()
    createdAt = fields.String()
    endedAt = fields.String(allow_none=True)
