"""Settings endpoints."""
from flask import Blueprint

from core.http import current_host, request_json
from core.openapi import doc

from . import service
from .schemas import DatabaseReset, Settings

bp = Blueprint("settings", __name__, url_prefix="/api/settings")


@bp.get("")
@doc(response=Settings)
def get_settings():
    """All settings."""
    return Settings().dump(service.get(current_host()))


@bp.put("")
@doc(body=Settings, response=Settings)
def put_settings():
    """Partial update; logLevel applies live."""
    changes = Settings(partial=True).load(request_json())
    return Settings().dump(service.update(current_host(), changes))


@bp.post("/database/reset")
@doc(response=DatabaseReset)
def reset_database():
    """Back up and clear datasource.properties, then return to SETUP mode."""
    return DatabaseReset().dump(service.reset_database(current_host()))
