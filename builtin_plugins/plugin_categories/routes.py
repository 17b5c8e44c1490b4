"""Plugin category endpoint."""
from flask import Blueprint, jsonify

from core.openapi import doc

from . import service
from .schemas import Category

bp = Blueprint("plugin_categories", __name__)


@bp.get("/api/plugin-categories")
@doc(response=Category(many=True))
def categories():
    """The category vocabulary (id, labelKey, icon)."""
    return jsonify(Category(many=True).dump(service.categories()))
