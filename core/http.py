"""Request parsing helpers shared by every blueprint."""
import json

from flask import current_app, request

from .errors import ApiError


def current_host():
    """The Host of the app serving this request."""
    return current_app.extensions["agenthost"]


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
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "malformed_json", "The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise ApiError(400, "malformed_json", "The request body must be a JSON object.")
    return data


def query_args(schema):
    """Validate ``request.args`` with a marshmallow schema (raises ValidationError)."""
    return schema.load(request.args.to_dict())
