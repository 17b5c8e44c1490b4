"""Workflow endpoints."""
from flask import Blueprint, jsonify

from core.errors import ApiError
from core.http import current_host, request_json
from core.openapi import doc

from .schemas import (Deleted, PublishIn, RestoreIn, RevisionOut, RevisionSummary, RunIn, RunOut, WorkflowIn,
                      WorkflowOut, WorkflowPut)

bp = Blueprint("workflows", __name__, url_prefix="/api/workflows")
WF = "<string(maxlength=36):workflow_id>"


def workflows():
    service = current_host().service("workflows")
    if service is None:
        raise ApiError(503, "service_in_setup_mode", "Workflows are not available.")
    return service


@bp.get("")
@doc(response=WorkflowOut(many=True))
def list_workflows():
    """The current user's definitions."""
    return jsonify(WorkflowOut(many=True).dump(workflows().list()))


@bp.post("")
@doc(body=WorkflowIn, response=WorkflowOut, status=201)
def create():
    """Create a workflow draft (revision 1)."""
    data = WorkflowIn().load(request_json())
    return WorkflowOut().dump(workflows().create(data)), 201


@bp.get(f"/{WF}")
@doc(response=WorkflowOut, responses={404: "No such workflow"})
def get(workflow_id):
    """One definition (the editable draft)."""
    return WorkflowOut().dump(workflows().get(workflow_id))


@bp.put(f"/{WF}")
@doc(body=WorkflowPut, response=WorkflowOut, responses={404: "No such workflow", 409: "Stale expectedRevision"})
def replace(workflow_id):
    """Replace the draft; the revision increments."""
    data = WorkflowPut().load(request_json())
    expected = data.pop("expectedRevision")
    return WorkflowOut().dump(workflows().replace(workflow_id, data, expected))


@bp.post(f"/{WF}/publish")
@doc(body=PublishIn, response=WorkflowOut, responses={404: "No such workflow", 409: "Stale expectedRevision"})
def publish(workflow_id):
    """Publish (immutable snapshot, joins the tool catalog) or unpublish."""
    data = PublishIn().load(request_json())
    return WorkflowOut().dump(workflows().publish(workflow_id, data["published"], data["expectedRevision"]))


@bp.get(f"/{WF}/revisions")
@doc(response=RevisionSummary(many=True))
def revisions(workflow_id):
    """Published snapshots, newest first, with the active one marked."""
    return jsonify(RevisionSummary(many=True).dump(workflows().revisions(workflow_id)))


@bp.get(f"/{WF}/revisions/<int:revision>")
@doc(response=RevisionOut, responses={404: "No such revision"})
def revision(workflow_id, revision):
    """One published snapshot."""
    return RevisionOut().dump(workflows().revision(workflow_id, revision))


@bp.post(f"/{WF}/revisions/<int:revision>/restore")
@doc(body=RestoreIn, response=WorkflowOut, responses={404: "No such revision", 409: "Stale expectedRevision"})
def restore(workflow_id, revision):
    """Restore a snapshot into a new draft; the active snapshot is unchanged."""
    data = RestoreIn().load(request_json(allow_empty=True))
    return WorkflowOut().dump(workflows().restore(workflow_id, revision, data["expectedRevision"]))


@bp.delete(f"/{WF}")
@doc(response=Deleted, responses={404: "No such workflow"})
def delete(workflow_id):
    """Delete; its schedules and webhook triggers are cancelled in the same transaction."""
    return Deleted().dump(workflows().delete(workflow_id))


@bp.post(f"/{WF}/run")
@doc(body=RunIn, response=RunOut, status=201, responses={400: "Inputs fail the inputSchema"})
def run(workflow_id):
    """Run the published snapshot (else the draft); observe it on the agent stream."""
    data = RunIn().load(request_json())
    config = current_host().service("agent").parse_config(data["config"])
    return RunOut().dump({"runId": workflows().run(workflow_id, data["inputs"], config)}), 201
