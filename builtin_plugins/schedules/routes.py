"""Schedule endpoints."""
from flask import Blueprint, jsonify, request

from core.errors import ApiError
from core.http import current_host, request_json
from core.openapi import doc

from .schemas import ScheduleIn, ScheduleOut
from .service import MAX_BODY_BYTES

bp = Blueprint("schedules", __name__, url_prefix="/api/agent/schedules")
OWNER = "local"
SCHEDULE = "<string(maxlength=36):schedule_id>"


def schedules():
    service = current_host().service("schedules")
    if service is None:
        raise ApiError(503, "service_in_setup_mode", "Schedules are not available.")
    return service


@bp.get("")
@doc(response=ScheduleOut(many=True))
def list_schedules():
    """Active durable workflow schedules of the current user, oldest first."""
    return jsonify(ScheduleOut(many=True).dump(schedules().list(OWNER)))


@bp.post("")
@doc(body=ScheduleIn, response=ScheduleOut, status=201,
     responses={400: "Invalid timing, calendar or inputs", 404: "No such workflow",
                409: "The workflow is not published", 413: "Body over 256 KiB"})
def create_schedule():
    """Schedule a published workflow on an interval or a calendar rule."""
    request.max_content_length = MAX_BODY_BYTES
    data = ScheduleIn().load(request_json())
    return ScheduleOut().dump(schedules().create(data, OWNER)), 201


@bp.get(f"/{SCHEDULE}")
@doc(response=ScheduleOut, responses={404: "No such schedule"})
def get_schedule(schedule_id):
    """One owned schedule, active or ended."""
    return ScheduleOut().dump(schedules().get(schedule_id, OWNER))


@bp.delete(f"/{SCHEDULE}")
@doc(response=ScheduleOut, responses={404: "No such schedule", 409: "Already cancelled or ended"})
def cancel_schedule(schedule_id):
    """Durably cancel an active schedule; answers the cancelled row."""
    return ScheduleOut().dump(schedules().cancel(schedule_id, OWNER))
