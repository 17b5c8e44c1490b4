"""Runtime plugin schemas."""
from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate

from core.schemas import QueryBoolean, StrictBoolean, StrictSchema


def _call_id(value):
    # marshmallow 4 ignores a validator's return value: refusing means raising.
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValidationError("Must be a string or an integer.")
    if isinstance(value, str) and not 1 <= len(value) <= 128:
        raise ValidationError("Must be 1 to 128 characters.")
    if isinstance(value, int) and not -2**53 < value < 2**53:
        raise ValidationError("Must be a safe integer.")


def _params(value):
    if not isinstance(value, (dict, list)):
        raise ValidationError("Must be an object or an array (JSON-RPC params).")


class InvokeIn(StrictSchema):
    callId = fields.Raw(load_default=None, allow_none=True, validate=_call_id)
    method = fields.String(required=True, validate=validate.Length(1, 200))
    params = fields.Raw(load_default=None, allow_none=True, validate=_params)


class EnabledIn(StrictSchema):
    enabled = StrictBoolean(required=True)


class NativePackageIn(StrictSchema):
    path = fields.String(required=True, validate=validate.Length(1, 4096))
    confirmPermissions = StrictBoolean(load_default=False)
    sha256 = fields.String(load_default=None, allow_none=True, validate=validate.Regexp(r"^[0-9a-fA-F]{64}$"))


class NativeInspectIn(StrictSchema):
    path = fields.String(required=True, validate=validate.Length(1, 4096))


class UninstallQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    deleteData = QueryBoolean(load_default=False)


class LogsQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    limit = fields.Integer(load_default=200, validate=validate.Range(1, 500))


class UploadForm(Schema):
    class Meta:
        unknown = EXCLUDE

    sha256 = fields.String(load_default=None, validate=validate.Regexp(r"^[0-9a-fA-F]{64}$"))
    confirmPermissions = QueryBoolean(load_default=False)


class Descriptor(Schema):
    id = fields.String()
    name = fields.String()
    version = fields.String()
    description = fields.String()
    runtime = fields.String()
    permissions = fields.List(fields.String())
    category = fields.String()
    enabled = fields.Boolean()
    ui = fields.Dict(allow_none=True)
    installedAt = fields.String()
    updatedAt = fields.String()


class WorkerStatus(Schema):
    pluginId = fields.String()
    state = fields.String()
    fault = fields.Dict(allow_none=True)
    runtime = fields.String()
    pid = fields.Integer(allow_none=True)
    restarts = fields.Integer()
    backoff = fields.Dict()
    sandbox = fields.Dict()
    tools = fields.List(fields.String())


class Inspection(Schema):
    id = fields.String()
    name = fields.String()
    version = fields.String()
    description = fields.String()
    runtime = fields.String()
    permissions = fields.List(fields.String())
    addedPermissions = fields.List(fields.String())
    category = fields.String()
    action = fields.String()
    installedVersion = fields.String(allow_none=True)
    versionStep = fields.String(allow_none=True)
    sha256 = fields.String()
    installed = fields.Boolean()
    enabled = fields.Boolean()


class LogEvent(Schema):
    timestamp = fields.String()
    level = fields.String()
    logger = fields.String(allow_none=True)
    thread = fields.String(allow_none=True)
    message = fields.String()
    sequence = fields.Integer()
