"""Setup wizard request and response schemas."""
from marshmallow import Schema, ValidationError, fields, post_load, validate

from core import datasource as ds_file


class SqliteParams(Schema):
    path = fields.String(load_default=None, allow_none=True, validate=validate.Length(1, 255))


class ServerParams(Schema):
    host = fields.String(load_default="127.0.0.1", validate=validate.Length(1, 255))
    port = fields.Integer(strict=True, load_default=None, allow_none=True, validate=validate.Range(1, 65535))
    database = fields.String(required=True, validate=validate.Length(1, 128))
    user = fields.String(required=True, validate=validate.Length(1, 128))
    password = fields.String(load_default=None, allow_none=True, validate=validate.Length(max=1024))


PARAMS = {"sqlite": SqliteParams, "postgresql": ServerParams, "mysql": ServerParams}


class DatasourceIn(Schema):
    type = fields.String(required=True, validate=validate.OneOf(ds_file.SUPPORTED_TYPES))
    params = fields.Dict(load_default=dict)

    @post_load
    def _params(self, data, **kwargs):
        try:
            data["params"] = PARAMS[data["type"]]().load(data.get("params") or {})
        except ValidationError as exc:
            raise ValidationError({"params": exc.messages}) from None
        return data


class SetupStatus(Schema):
    initialized = fields.Boolean()
    supportedTypes = fields.List(fields.String())
    embeddedTypes = fields.List(fields.String())


class TestResult(Schema):
    ok = fields.Boolean()
    type = fields.String()
    message = fields.String(allow_none=True)
    latencyMs = fields.Integer(allow_none=True)
