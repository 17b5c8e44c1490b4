"""Setup wizard request and response schemas."""
from marshmallow import ValidationError, fields, post_load, validate

from core import datasource as ds_file
from core.schemas import StrictSchema


def _sqlite_path(value):
    """A file name inside the data directory: no absolute path, no ``..``, no host file."""
    if value is None:
        return
    try:
        ds_file.sqlite_path(".", {"path": value})
    except ds_file.DatasourceError as exc:
        raise ValidationError(str(exc)) from None


def _no_control_chars(value):
    if value is not None and any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValidationError("Control characters are not allowed.")


class SqliteParams(StrictSchema):
    path = fields.String(load_default=None, allow_none=True,
                         validate=[validate.Length(1, 255), _sqlite_path])


class ServerParams(StrictSchema):
    host = fields.String(load_default="127.0.0.1",
                         validate=[validate.Length(1, 255), _no_control_chars])
    port = fields.Integer(strict=True, load_default=None, allow_none=True,
                          validate=validate.Range(1, 65535))
    database = fields.String(required=True, validate=[validate.Length(1, 128), _no_control_chars])
    user = fields.String(required=True, validate=[validate.Length(1, 128), _no_control_chars])
    password = fields.String(load_default=None, allow_none=True, validate=validate.Length(max=1024))


PARAMS = {"sqlite": SqliteParams, "postgresql": ServerParams, "mysql": ServerParams}


class DatasourceIn(StrictSchema):
    type = fields.String(required=True, validate=validate.OneOf(ds_file.SUPPORTED_TYPES))
    params = fields.Dict(load_default=dict)

    @post_load
    def _params(self, data, **kwargs):
        try:
            data["params"] = PARAMS[data["type"]]().load(data.get("params") or {})
        except ValidationError as exc:
            raise ValidationError({"params": exc.messages}) from None
        return data


class SetupStatus(StrictSchema):
    initialized = fields.Boolean()
    supportedTypes = fields.List(fields.String())
    embeddedTypes = fields.List(fields.String())


class TestResult(StrictSchema):
    ok = fields.Boolean()
    type = fields.String()
    message = fields.String(allow_none=True)
    latencyMs = fields.Integer(allow_none=True)
