"""Webhook trigger endpoints (token) and the hook itself (the trigger's secret, no token)."""
from flask import Blueprint, jsonify, request

from core.auth import secret_auth
from core.errors import ApiError
from core.http import current_host, parse_json, query_args, request_json
from core.openapi import doc

from .schemas import (Deleted, DeliveriesQuery, Delivered, DeliveryOut, HookBody, TriggerIn, TriggerOut,
                      TriggerWithSecret)
from .service import EVENT_ID_HEADER, MAX_BODY_BYTES, MAX_EVENT_ID, SECRET_HEADER, unauthorized

triggers = Blueprint("webhook_triggers", __name__, url_prefix="/api/agent/webhook-triggers")
hooks = Blueprint("workflow_hooks", __name__, url_prefix="/api/workflow-hooks")
TR = "<string(maxlength=36):trigger_id>"
DELIVERED = Delivered()  # the hook's answer schema, built once: it is on every delivery's path


def webhooks():
    service = current_host().service("webhooks")
    if service is None:
        raise ApiError(503, "service_in_setup_mode", "Webhook triggers are not available.")
    return service


@triggers.get("")
@doc(response=TriggerOut(many=True))
def list_triggers():
    """The current user's active triggers (never a secret)."""
    return jsonify(TriggerOut(many=True).dump(webhooks().list()))


@triggers.post("")
@doc(body=TriggerIn, response=TriggerWithSecret, status=201,
     responses={404: "No such workflow", 409: "The workflow is not published or needs file grants"})
def create():
    """Create a trigger for a published workflow; the answer shows the secret this once."""
    data = TriggerIn().load(request_json())
    return TriggerWithSecret().dump(webhooks().create(data)), 201


@triggers.get(f"/{TR}/deliveries")
@doc(query=DeliveriesQuery, response=DeliveryOut(many=True), responses={404: "No such active trigger"})
def deliveries(trigger_id):
    """Recent deliveries, newest first, with their tasks' live state (no payloads, secrets or event ids)."""
    args = query_args(DeliveriesQuery())
    return jsonify(DeliveryOut(many=True).dump(webhooks().deliveries(trigger_id, limit=args["limit"])))


@triggers.post(f"/{TR}/rotate-secret")
@doc(response=TriggerWithSecret, responses={404: "No such active trigger"})
def rotate_secret(trigger_id):
    """Replace the secret: the old one stops working at once; the new one is shown this once."""
    return TriggerWithSecret().dump(webhooks().rotate_secret(trigger_id))


@triggers.delete(f"/{TR}")
@doc(response=Deleted, responses={404: "No such active trigger"})
def delete(trigger_id):
    """Disable the trigger for good; its hook answers 401 from now on."""
    return Deleted().dump(webhooks().delete(trigger_id))


def _event_id():
    value = request.headers.get(EVENT_ID_HEADER)
    if value is None:
        return None
    try:  # WSGI hands header bytes over as latin-1; count the characters the sender meant
        value = value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        pass
    if not 1 <= len(value) <= MAX_EVENT_ID:
        raise ApiError(400, "validation_failed", f"{EVENT_ID_HEADER} must be 1 to {MAX_EVENT_ID} characters.",
                       errors={EVENT_ID_HEADER: [f"Length must be between 1 and {MAX_EVENT_ID}."]})
    return value


def _too_large():
    return ApiError(413, "payload_too_large", f"The webhook body is over {MAX_BODY_BYTES // 1024} KiB.")


def _overlay():
    """The body: empty (nothing to overlay) or one JSON object of at most 256 KiB."""
    raw = request.stream.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise _too_large()
    if not raw.strip():
        return {}
    mimetype = request.mimetype or ""
    if mimetype != "application/json" and not mimetype.endswith("+json"):
        raise ApiError(415, "unsupported_media_type", "Send the webhook body as application/json.")
    try:
        data = parse_json(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ApiError(400, "malformed_json", "The webhook body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise ApiError(400, "validation_failed", "The webhook body must be a JSON object.",
                       errors={"body": ["Must be a JSON object."]})
    return data


@hooks.post("/<trigger_id>")
@secret_auth
@doc(body=HookBody, response=Delivered, status=202,
     responses={401: "Missing or wrong secret, or no such trigger",
                409: "The workflow is no longer published", 429: "The background queue is full (Retry-After: 1)"})
def deliver(trigger_id):
    """Run the trigger's workflow: 202 for a new event, 200 for a repeated X-Service-Event-Id."""
    secret = request.headers.get(SECRET_HEADER)
    if not secret:
        raise unauthorized()
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise _too_large()
    event_id = _event_id()
    service = webhooks()
    caller = service.authenticate(trigger_id, secret, event_id)
    created, delivery = service.deliver(caller, _overlay())
    return DELIVERED.dump(delivery), 202 if created else 200
