"""RFC 9457 problem responses and the app-wide error handlers."""
import json
import logging

from flask import Response
from marshmallow import ValidationError
from werkzeug.exceptions import HTTPException

log = logging.getLogger("agenthost.errors")

PROBLEM_TYPE = "urn:agenthost:problem:"

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    410: "gone",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "unprocessable",
    429: "too_many_requests",
    500: "internal_error",
    503: "service_unavailable",
}


class ApiError(Exception):
    """An error that becomes a problem response. Raise it from services too."""

    def __init__(self, status, code=None, detail=None, *, title=None, headers=None, **extra):
        super().__init__(detail or code)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.detail = detail
        self.title = title
        self.headers = headers or {}
        self.extra = extra


class NotFound(ApiError):
    def __init__(self, what="resource", detail=None):
        super().__init__(404, "not_found", detail or f"No such {what}.")


class Conflict(ApiError):
    def __init__(self, code="conflict", detail=None, **extra):
        super().__init__(409, code, detail, **extra)


def problem(status, code=None, detail=None, *, title=None, headers=None, **extra):
    """Build an ``application/problem+json`` response."""
    from werkzeug.http import HTTP_STATUS_CODES

    code = code or _CODES.get(status, "error")
    body = {
        "type": PROBLEM_TYPE + code,
        "title": title or HTTP_STATUS_CODES.get(status, "Error"),
        "status": status,
        "detail": detail or HTTP_STATUS_CODES.get(status, "Error"),
        "code": code,
    }
    body.update(extra)
    # default=str: an odd extension value must not turn a problem into an HTML 500.
    resp = Response(json.dumps(body, default=str), status=status, mimetype="application/problem+json")
    for name, value in (headers or {}).items():
        resp.headers[name] = value
    return resp


def _validation_errors(messages):
    # marshmallow nests {"field": ["msg"]}; schema-level errors come as "_schema"
    if isinstance(messages, list):
        return {"_schema": messages}
    return messages


def install_error_handlers(app):
    @app.errorhandler(ApiError)
    def _api_error(exc):
        return problem(exc.status, exc.code, exc.detail, title=exc.title,
                       headers=exc.headers, **exc.extra)

    @app.errorhandler(ValidationError)
    def _validation(exc):
        return problem(400, "validation_failed", "The request has invalid fields.",
                       errors=_validation_errors(exc.messages))

    @app.errorhandler(HTTPException)
    def _http(exc):
        if exc.response is not None:
            return exc.response  # abort(response): the view chose its own answer
        # Keep meaningful headers (Allow, Retry-After, WWW-Authenticate); the body is ours.
        headers = {name: value for name, value in exc.get_headers()
                   if name.lower() not in ("content-type", "content-length")}
        if exc.code == 405 and getattr(exc, "valid_methods", None):
            headers["Allow"] = ", ".join(sorted(exc.valid_methods))
        detail = {
            404: "No such resource.",
            405: "This method is not allowed on this resource.",
            413: "The request body is too large.",
            500: "The service hit an unexpected error.",
        }.get(exc.code, exc.description)
        return problem(exc.code or 500, None, detail, headers=headers)

    @app.errorhandler(Exception)
    def _unexpected(exc):
        # The log keeps the traceback; the response never carries internals.
        log.exception("unhandled error")
        return problem(500, "internal_error", "The service hit an unexpected error.")
