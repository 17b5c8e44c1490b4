"""Request parsing helpers shared by every blueprint."""
import json
import math

from flask import current_app, request

from .errors import ApiError


def current_host():
    """The Host of the app serving this request."""
    return current_app.extensions["agenthost"]


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses to inf: not a number any JSON peer can read back
        raise ValueError("number out of range")
    return value


def parse_json(raw):
    """Strict JSON: no NaN/Infinity, no overflowing numbers (they could never be answered back)."""
    return json.loads(raw, parse_constant=_no_constant, parse_float=_finite_float)


def request_json(*, required=True, allow_empty=False):
    """The request body as a JSON object, or a 400/415 problem.

    ``allow_empty`` treats a missing body as ``{}`` (for endpoints whose body
    is optional, like approve).
    """
    raw = request.get_data(cache=True)
    if not raw.strip():
        if allow_empty or not required:
            return {}
        raise ApiError(400, "body_required", "A JSON object body is required.")
    mimetype = request.mimetype or ""
    if mimetype != "application/json" and not mimetype.endswith("+json"):
        raise ApiError(415, "unsupported_media_type", "Send the body as application/json.")
    try:
        data = parse_json(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ApiError(400, "malformed_json", "The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise ApiError(400, "malformed_json", "The request body must be a JSON object.")
    return data


def query_args(schema):
    """Validate ``request.args`` with a marshmallow schema (raises ValidationError)."""
    return schema.load(request.args.to_dict())
