"""MCP endpoints: server definitions, their live state, test, direct tool calls, prompts and resources."""
from flask import Blueprint, jsonify

from core.errors import ApiError
from core.http import current_host, request_json
from core.openapi import doc

from .schemas import (CallIn, CallOut, Deleted, PromptOut, ResourceOut, ServerIn, ServerOut, StatusOut,
                      TestResult)

bp = Blueprint("mcp", __name__, url_prefix="/api/mcp")
ID = "<string(maxlength=32):server_id>"
NOT_CONNECTED = "The server has no live session (state and lastError say why)"

# Built once: a marshmallow schema's construction deep-copies its fields, which costs more
# than loading a call body (the call is this area's hot path). Schemas keep no per-call state.
SERVER_IN, SERVER_OUT, SERVERS_OUT = ServerIn(), ServerOut(), ServerOut(many=True)
CALL_IN, CALL_OUT = CallIn(), CallOut()


def manager():
    service = current_host().service("mcp")
    if service is None:
        raise ApiError(503, "service_in_setup_mode", "MCP connections are not available.")
    return service


@bp.get("/status")
@doc(response=StatusOut)
def status():
    """Configured connections and the number of tools discovered on connected servers."""
    return StatusOut().dump(manager().status())


@bp.get("/servers")
@doc(response=ServerOut(many=True))
def list_servers():
    """Every configured server with its connection state, last error and tool names."""
    return jsonify(SERVERS_OUT.dump(manager().list()))


@bp.post("/servers")
@doc(body=ServerIn, response=ServerOut, status=201, responses={409: "The name is taken"})
def create_server():
    """Add a server and connect at once; a failed connection still saves it (see state and lastError)."""
    data = SERVER_IN.load(request_json())
    return SERVER_OUT.dump(manager().create(data)), 201


@bp.get(f"/servers/{ID}")
@doc(response=ServerOut, responses={404: "No such server"})
def get_server(server_id):
    """One server's definition (credential names only) and live state."""
    return SERVER_OUT.dump(manager().get(server_id))


@bp.put(f"/servers/{ID}")
@doc(body=ServerIn, response=ServerOut, responses={404: "No such server", 409: "The name is taken"})
def replace_server(server_id):
    """Replace the definition: the old session closes, the new one connects, the catalog follows."""
    data = SERVER_IN.load(request_json())
    return SERVER_OUT.dump(manager().replace(server_id, data))


@bp.delete(f"/servers/{ID}")
@doc(response=Deleted, responses={404: "No such server"})
def delete_server(server_id):
    """Disconnect and remove the server; its tools leave the catalog."""
    return Deleted().dump(manager().delete(server_id))


@bp.post(f"/servers/{ID}/test")
@doc(response=TestResult, responses={404: "No such server"})
def test_server(server_id):
    """Reconnect, initialize and list tools; answers what was found or the error."""
    return TestResult().dump(manager().test(server_id))


@bp.post(f"/servers/{ID}/call")
@doc(body=CallIn, response=CallOut, responses={
    404: "No such server, or no such tool on it", 422: "The server answered with a JSON-RPC error",
    502: "The connection was lost during the call", 503: NOT_CONNECTED, 504: "No answer within the call timeout"})
def call_tool(server_id):
    """Call a discovered tool directly; a tool's own error comes back as a result with isError."""
    data = CALL_IN.load(request_json())
    return CALL_OUT.dump(manager().call(server_id, data["tool"], data["arguments"]))


@bp.get(f"/servers/{ID}/prompts")
@doc(response=PromptOut(many=True), responses={404: "No such server", 503: NOT_CONNECTED})
def prompts(server_id):
    """Prompts of the live session."""
    return jsonify(PromptOut(many=True).dump(manager().prompts(server_id)))


@bp.get(f"/servers/{ID}/resources")
@doc(response=ResourceOut(many=True), responses={404: "No such server", 503: NOT_CONNECTED})
def resources(server_id):
    """Resources of the live session."""
    return jsonify(ResourceOut(many=True).dump(manager().resources(server_id)))
