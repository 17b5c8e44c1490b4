"""Tool catalog endpoint."""
from flask import Blueprint, jsonify

from core.http import current_host
from core.openapi import doc

from .schemas import ToolOut

bp = Blueprint("tools", __name__)


@bp.get("/api/agent/tools")
@doc(response=ToolOut(many=True))
def list_tools():
    """Every tool in the live catalog: name, description, parameters, source, retry-safety."""
    return jsonify(ToolOut(many=True).dump([t.describe() for t in current_host().tools.list()]))
