"""Shared marshmallow pieces: strict scalar fields and a base that refuses unknown fields."""
from marshmallow import RAISE, Schema, ValidationError, fields


class StrictSchema(Schema):
    class Meta:
        unknown = RAISE


class StrictBoolean(fields.Boolean):
    """Only JSON true/false (marshmallow's Boolean would take "yes" and 1)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, bool):
            raise ValidationError("Not a valid boolean.")
        return value


class StrictFloat(fields.Float):
    """Only JSON numbers, never numeric strings or booleans."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValidationError("Not a valid number.")
        return super()._deserialize(value, attr, data, **kwargs)


class QueryBoolean(fields.Boolean):
    """A query-string boolean: true/false/1/0 only."""

    truthy = {"true", "1"}
    falsy = {"false", "0"}


class StoredText(fields.String):
    """A string every backend can store: no NUL (PostgreSQL refuses it) and no lone
    surrogates (they cannot be encoded as UTF-8), refused as 400 rather than a 500."""

    def _deserialize(self, value, attr, data, **kwargs):
        text = super()._deserialize(value, attr, data, **kwargs)
        if "\x00" in text:
            raise ValidationError("Must not contain NUL characters.")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError("Must be valid Unicode text.") from None
        return text
