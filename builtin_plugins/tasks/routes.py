"""Task endpoints."""
from flask import Blueprint, jsonify

from core.errors import ApiError
from core.http import current_host, query_args
from core.openapi import doc

from .schemas import CancelOut, Capacity, ListQuery, TaskOut, WaitQuery

bp = Blueprint("tasks", __name__, url_prefix="/api/agent/tasks")
OWNER = "local"
TASK = "<string(maxlength=36):task_id>"


def tasks():
    queue = current_host().tasks
    if queue is None:
        raise ApiError(503, "service_in_setup_mode", "The task queue is not running.")
    return queue


@bp.get("")
@doc(query=ListQuery, response=TaskOut(many=True))
def list_tasks():
    """The current user's recent task snapshots, newest first."""
    args = query_args(ListQuery())
    return jsonify(TaskOut(many=True).dump(tasks().list(OWNER, args["limit"])))


@bp.get("/capacity")
@doc(response=Capacity)
def capacity():
    """Global and own counts, limits and remaining admission capacity (no other owner's details)."""
    return Capacity().dump(tasks().capacity(OWNER))


@bp.get(f"/{TASK}")
@doc(query=WaitQuery, response=TaskOut, responses={404: "No such task"})
def get_task(task_id):
    """One owned task; with timeoutMs, waits up to 60 s for a terminal state."""
    args = query_args(WaitQuery())
    queue = tasks()
    if args["timeoutMs"]:
        return TaskOut().dump(queue.wait(task_id, OWNER, args["timeoutMs"] / 1000))
    return TaskOut().dump(queue.get(task_id, OWNER))


@bp.delete(f"/{TASK}")
@doc(response=CancelOut, responses={404: "No such task", 409: "Already finished"})
def cancel_task(task_id):
    """Cancel an owned task: removed when queued, cooperative when running."""
    return CancelOut().dump(tasks().cancel(task_id, OWNER))
