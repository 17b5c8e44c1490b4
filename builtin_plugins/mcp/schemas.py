"""MCP endpoint schemas: server definitions in, masked views out."""
import re
from urllib.parse import urlsplit

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from core.schemas import StoredText, StrictFloat, StrictSchema

TRANSPORTS = ("STDIO", "SSE", "STREAMABLE_HTTP")
HTTP_TRANSPORTS = ("SSE", "STREAMABLE_HTTP")
STDIO_FIELDS = ("command", "args", "env", "cwd")
HTTP_FIELDS = ("url", "headers")

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}\Z")
# The MCP client sets these itself; a user's value would break the protocol or the framing.
RESERVED_HEADERS = frozenset({"host", "content-length", "content-type", "transfer-encoding", "connection",
                              "accept", "mcp-session-id", "mcp-protocol-version", "last-event-id"})
CONTROL = re.compile(r"[\x00-\x1f\x7f]")

MAX_ARGS = 100
MAX_ENV = 100
MAX_HEADERS = 50


def _name(value):
    if CONTROL.search(value):
        raise ValidationError("Must not contain control characters.")
    if value != value.strip():
        raise ValidationError("Must not start or end with spaces.")


def _env(value):
    errors = {}
    for key, item in value.items():
        if not ENV_NAME.match(key):
            errors[key] = ["Environment variable names are letters, digits and _, not starting with a digit "
                           "(at most 128)."]
        elif len(item) > 16384:
            errors[key] = ["Longer than maximum length 16384."]
    if errors:
        raise ValidationError(errors)


def _headers(value):
    errors = {}
    for key, item in value.items():
        if not HEADER_NAME.match(key):
            errors[key] = ["Not a valid HTTP header name."]
        elif key.lower() in RESERVED_HEADERS:
            errors[key] = ["This header is set by the MCP client."]
        elif CONTROL.search(item.replace("\t", " ")):
            errors[key] = ["Header values must not contain control characters."]
        elif len(item) > 8192:
            errors[key] = ["Longer than maximum length 8192."]
    if errors:
        raise ValidationError(errors)


def _url(value):
    try:
        parts = urlsplit(value)
        port = parts.port  # raises on a non-numeric or out-of-range port
    except ValueError:
        raise ValidationError("Not a valid URL.") from None
    if parts.scheme not in ("http", "https"):
        raise ValidationError("The URL must use http or https.")
    if not parts.hostname:
        raise ValidationError("The URL must name a host.")
    if parts.username is not None or parts.password is not None:
        raise ValidationError("Put credentials in headers, not in the URL.")
    if CONTROL.search(value) or " " in value:
        raise ValidationError("Not a valid URL.")
    if port == 0:
        raise ValidationError("Not a valid port.")


def _cwd(value):
    if not value.startswith("/") and not re.match(r"^[A-Za-z]:[\\/]", value):
        raise ValidationError("Must be an absolute path.")


def _arg(value):
    if len(value) > 4096:
        raise ValidationError("Longer than maximum length 4096.")


class ServerIn(StrictSchema):
    """A server definition (POST creates one, PUT replaces one).

    STDIO takes ``command`` (required), ``args``, ``env`` and ``cwd``; SSE and
    STREAMABLE_HTTP take ``url`` (required, http or https) and ``headers``. Fields
    of the other transport are refused. On PUT, an ``env`` or ``headers`` value of
    ``***`` keeps the stored value of that name.
    """

    name = StoredText(required=True, validate=[validate.Length(1, 64), _name])
    transport = fields.String(required=True, validate=validate.OneOf(TRANSPORTS))
    command = StoredText(validate=[validate.Length(1, 4096)])
    args = fields.List(StoredText(validate=_arg), validate=validate.Length(max=MAX_ARGS))
    env = fields.Dict(keys=StoredText(), values=StoredText(), validate=[validate.Length(max=MAX_ENV), _env])
    cwd = StoredText(validate=[validate.Length(1, 4096), _cwd])
    url = StoredText(validate=[validate.Length(1, 2048), _url])
    headers = fields.Dict(keys=StoredText(), values=StoredText(),
                          validate=[validate.Length(max=MAX_HEADERS), _headers])
    callTimeoutSeconds = StrictFloat(allow_none=True, validate=validate.Range(0.05, 3600))

    @validates_schema
    def _fit_transport(self, data, **kwargs):
        transport = data.get("transport")
        if transport not in TRANSPORTS:
            return
        errors = {}
        if transport == "STDIO":
            if not data.get("command"):
                errors["command"] = ["Required for the STDIO transport."]
            for name in HTTP_FIELDS:
                if name in data:
                    errors[name] = ["Not used by the STDIO transport."]
        else:
            if not data.get("url"):
                errors["url"] = [f"Required for the {transport} transport."]
            for name in STDIO_FIELDS:
                if name in data:
                    errors[name] = [f"Not used by the {transport} transport."]
        if errors:
            raise ValidationError(errors)


class CallIn(StrictSchema):
    tool = StoredText(required=True, validate=validate.Length(1, 256))
    arguments = fields.Dict(keys=fields.String(), load_default=dict)


class Retry(Schema):
    attempt = fields.Integer()
    inMs = fields.Integer(allow_none=True)


class ServerInfo(Schema):
    name = fields.String()
    version = fields.String()


class ServerOut(Schema):
    id = fields.String()
    name = fields.String()
    transport = fields.String()
    command = fields.String(allow_none=True)
    args = fields.List(fields.String(), allow_none=True)
    cwd = fields.String(allow_none=True)
    url = fields.String(allow_none=True)
    env = fields.Dict(keys=fields.String(), values=fields.String(),
                      metadata={"description": "Names only; every value is ***."})
    headers = fields.Dict(keys=fields.String(), values=fields.String(),
                          metadata={"description": "Names only; every value is ***."})
    callTimeoutSeconds = fields.Float(allow_none=True)
    state = fields.String(metadata={"description": "connecting, connected, failed or closed"})
    lastError = fields.String(allow_none=True)
    tools = fields.List(fields.String(), metadata={"description": "Tool names the server listed."})
    catalogTools = fields.List(fields.String(), metadata={"description": "Their names in the tool catalog."})
    pid = fields.Integer(allow_none=True)
    serverInfo = fields.Nested(ServerInfo, allow_none=True)
    protocolVersion = fields.String(allow_none=True)
    connectedAt = fields.String(allow_none=True)
    retry = fields.Nested(Retry, allow_none=True)
    createdAt = fields.String()
    updatedAt = fields.String()


class ConnectionSummary(Schema):
    id = fields.String()
    name = fields.String()
    transport = fields.String()
    state = fields.String()
    toolCount = fields.Integer()


class StatusOut(Schema):
    servers = fields.Integer(metadata={"description": "Configured connections."})
    connected = fields.Integer()
    connecting = fields.Integer()
    failed = fields.Integer()
    tools = fields.Integer(metadata={"description": "Tools discovered on connected servers."})
    connections = fields.List(fields.Nested(ConnectionSummary))


class TestResult(Schema):
    ok = fields.Boolean()
    state = fields.String()
    error = fields.String(allow_none=True)
    tools = fields.List(fields.String())
    serverInfo = fields.Nested(ServerInfo, allow_none=True)
    protocolVersion = fields.String(allow_none=True)
    elapsedMs = fields.Integer()


class CallOut(Schema):
    tool = fields.String()
    isError = fields.Boolean()
    error = fields.String(allow_none=True, metadata={"description": "The tool's error text when isError."})
    content = fields.List(fields.Dict())
    structuredContent = fields.Raw(allow_none=True)


class PromptArgument(Schema):
    name = fields.String()
    description = fields.String(allow_none=True)
    required = fields.Boolean(allow_none=True)


class PromptOut(Schema):
    name = fields.String()
    title = fields.String(allow_none=True)
    description = fields.String(allow_none=True)
    arguments = fields.List(fields.Nested(PromptArgument))


class ResourceOut(Schema):
    uri = fields.String()
    name = fields.String()
    title = fields.String(allow_none=True)
    description = fields.String(allow_none=True)
    mimeType = fields.String(allow_none=True)
    size = fields.Integer(allow_none=True)


class Deleted(Schema):
    ok = fields.Boolean()
    id = fields.String()
