"""Agent endpoints and the agent stream."""
from flask import Blueprint, jsonify

from core.auth import ticket_auth
from core.errors import ApiError
from core.http import current_host, query_args, request_json
from core.openapi import doc
from core.sse import stream_response

from .schemas import (ApproveIn, BatchIn, BatchOut, Cancelled, Approved, RunDetail, RunIn, RunOut, RunsQuery,
                      RunSummary, StreamQuery, Ticket, TicketIn)
from .store import TERMINAL, channel

bp = Blueprint("agent", __name__, url_prefix="/api/agent")
RUN = "<string(maxlength=36):run_id>"


def agent():
    service = current_host().service("agent")
    if service is None:
        raise ApiError(503, "service_in_setup_mode", "The agent is not running.")
    return service


@bp.post("/run")
@doc(body=RunIn, response=RunOut, status=201)
def run():
    """Start a run; observe it on the agent stream."""
    data = RunIn().load(request_json())
    return RunOut().dump({"runId": agent().start_run(data["goal"], data["config"])}), 201


@bp.post("/batch")
@doc(body=BatchIn, response=BatchOut, status=201)
def batch():
    """Start 1 to 8 independent runs."""
    data = BatchIn().load(request_json())
    service = agent()
    return BatchOut().dump({"runIds": service.start_batch(data["goals"], data["config"])}), 201


@bp.post("/stream-ticket")
@doc(body=TicketIn, response=Ticket)
def stream_ticket():
    """Mint the one-time ticket for the agent stream (bound to runId when given)."""
    data = TicketIn().load(request_json(allow_empty=True))
    if data["runId"] is not None:
        agent().store.load(data["runId"], "local")
    return Ticket().dump(current_host().tickets.mint("agent", data["runId"]))


@bp.get("/stream")
@ticket_auth
def stream():
    """SSE of a run: persisted events first, in order, then live ones."""
    host = current_host()
    args = query_args(StreamQuery())
    host.tickets.redeem("agent", args["ticket"], args["runId"])
    service = agent()
    run = service.store.load(args["runId"], "local")
    # Subscribe, then read the status, then the history: an event committed before the
    # history read is replayed (and its live copy dropped by seq), a later one arrives
    # live; a run found terminal has its terminal event committed with that status.
    subscription = host.events.subscribe(channel(run.id))
    finished = service.store.load(run.id).status in TERMINAL
    replay = service.stream_items(run.id)
    return stream_response(subscription, heartbeat=host.config.get("agent.heartbeat-seconds", 15),
                           replay=replay, terminal=("error", "complete"), end_after_replay=finished)


@bp.post(f"/{RUN}/approve")
@doc(body=ApproveIn, response=Approved, responses={404: "No such run", 409: "Stale, late or duplicate gateId"})
def approve(run_id):
    """Release the armed gate; an edited AgentPlan replaces the draft at plan approval."""
    body = request_json(allow_empty=True)
    data = ApproveIn().load(body)
    plan = data["plan"]
    if plan is None and data["steps"] is not None:
        plan = {"goal": data["goal"] or "", "steps": data["steps"]}
    return Approved().dump(agent().approve(run_id, data["gateId"], plan))


@bp.post(f"/{RUN}/cancel")
@doc(response=Cancelled, responses={404: "No such run", 409: "The run is not active"})
def cancel(run_id):
    """Cooperative cancel: the run stops at its next safe point."""
    return Cancelled().dump(agent().cancel(run_id))


@bp.get("/runs")
@doc(query=RunsQuery, response=RunSummary(many=True))
def runs():
    """Persisted run summaries, newest updated first."""
    args = query_args(RunsQuery())
    return jsonify(RunSummary(many=True).dump(agent().runs(limit=args["limit"])))


@bp.get(f"/runs/{RUN}")
@doc(response=RunDetail, responses={404: "No such run"})
def run_detail(run_id):
    """Persisted plan, step executions and ordered audit events."""
    return RunDetail().dump(agent().run_detail(run_id))


@bp.post(f"/runs/{RUN}/resume")
@doc(responses={404: "No such run", 409: "Not resumable"})
def resume(run_id):
    """Resume unfinished steps after a new plan review."""
    return jsonify(agent().resume(run_id))
