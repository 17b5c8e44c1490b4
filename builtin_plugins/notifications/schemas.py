"""Notification schemas."""
from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate

from core.schemas import StoredText, QueryBoolean, StrictSchema

LEVELS = ("info", "success", "warning", "error")
# \Z, not $: "$" also matches before a trailing newline, which let "host\n" through.
SOURCE_RE = r"(?:host|agent|plugin:[a-z0-9][a-z0-9._-]{1,63})\Z"


class NotificationIn(StrictSchema):
    source = StoredText(required=True, validate=validate.Regexp(
        SOURCE_RE, error="Must be host, agent or plugin:<plugin id>."))
    level = StoredText(required=True, validate=validate.OneOf(LEVELS))
    title = StoredText(required=True, validate=validate.Length(1, 200))
    body = StoredText(load_default=None, allow_none=True, validate=validate.Length(max=4000))
    link = StoredText(load_default=None, allow_none=True, validate=validate.Length(max=2048))


class NotificationOut(Schema):
    id = fields.Integer()
    source = fields.String()
    level = fields.String()
    title = fields.String()
    body = fields.String(allow_none=True)
    link = fields.String(allow_none=True)
    read = fields.Boolean()
    createdAt = fields.String()
    readAt = fields.String(allow_none=True)


class ListQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    limit = fields.Integer(load_default=50, validate=validate.Range(1, 100))
    unreadOnly = QueryBoolean(load_default=False)


class UnreadCount(Schema):
    count = fields.Integer()


class ReadAll(Schema):
    ok = fields.Boolean()
    updated = fields.Integer()


class Deleted(Schema):
    ok = fields.Boolean()
    id = fields.Integer()


class Ticket(Schema):
    ticket = fields.String()
    expiresIn = fields.Integer()
