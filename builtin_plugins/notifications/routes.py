"""Notification endpoints and the live stream."""
from flask import Blueprint, jsonify, request

from core.auth import ticket_auth
from core.errors import ApiError
from core.http import current_host, query_args, request_json
from core.openapi import doc
from core.sse import stream_response

from . import service
from .schemas import (Deleted, ListQuery, NotificationIn, NotificationOut, ReadAll, Ticket,
                      UnreadCount)

bp = Blueprint("notifications", __name__, url_prefix="/api/notifications")


def center():
    host = current_host()
    notes = host.service("notifications")
    if notes is None:  # only between leaving and re-entering APP mode
        raise ApiError(503, "service_in_setup_mode", "The notification center is not running.")
    return notes


@bp.post("")
@doc(body=NotificationIn, response=NotificationOut, status=201)
def create():
    """Create, persist and broadcast a notification."""
    data = NotificationIn().load(request_json())
    return NotificationOut().dump(center().create(**data)), 201


@bp.get("")
@doc(query=ListQuery, response=NotificationOut(many=True))
def list_notifications():
    """Newest-first history."""
    args = query_args(ListQuery())
    notes = center().list(args["limit"], args["unreadOnly"])
    return jsonify(NotificationOut(many=True).dump(notes))


@bp.get("/unread-count")
@doc(response=UnreadCount)
def unread_count():
    """Badge count."""
    return UnreadCount().dump({"count": center().unread_count()})


@bp.post("/<int:note_id>/read")
@doc(response=NotificationOut, responses={404: "No such notification"})
def mark_read(note_id):
    """Acknowledge one (idempotent)."""
    return NotificationOut().dump(center().mark_read(note_id))


@bp.post("/read-all")
@doc(response=ReadAll)
def read_all():
    """Acknowledge all."""
    return ReadAll().dump(center().read_all())


@bp.delete("/<int:note_id>")
@doc(response=Deleted, responses={404: "No such notification"})
def delete(note_id):
    """Remove one from the center."""
    return Deleted().dump(center().delete(note_id))


@bp.post("/stream-ticket")
@doc(response=Ticket)
def stream_ticket():
    """Mint the one-time ticket for the notification stream."""
    return Ticket().dump(current_host().tickets.mint("notifications"))


@bp.get("/stream")
@ticket_auth
def stream():
    """Live `notification` events for every connected shell (text/event-stream)."""
    host = current_host()
    host.tickets.redeem("notifications", request.args.get("ticket"))
    center()
    subscription = host.events.subscribe(service.CHANNEL)
    return stream_response(subscription, heartbeat=host.config["notifications.heartbeat-seconds"])
