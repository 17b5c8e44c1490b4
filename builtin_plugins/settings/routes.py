"""Settings endpoints."""
import json

from flask import Blueprint, Response

from core.http import current_host, request_json
from core.openapi import doc

from . import service
from .schemas import DatabaseReset, Settings

bp = Blueprint("settings", __name__, url_prefix="/api/settings")

# Built once: a marshmallow schema deep-copies its fields (and builds its nested schemas)
# when constructed, which costs several times the dump itself.
SETTINGS = Settings()
SETTINGS_PATCH = Settings(partial=True)
DATABASE_RESET = DatabaseReset()


@bp.get("")
@doc(response=Settings)
def get_settings():
    """All settings."""
    body = service.get_body(current_host(), lambda settings: json.dumps(SETTINGS.dump(settings)).encode())
    return Response(body, mimetype="application/json")


@bp.put("")
@doc(body=Settings, response=Settings)
def put_settings():
    """Partial update; logLevel applies live."""
    changes = SETTINGS_PATCH.load(request_json())
    return SETTINGS.dump(service.update(current_host(), changes))


@bp.post("/database/reset")
@doc(response=DatabaseReset)
def reset_database():
    """Back up and clear datasource.properties, then return to SETUP mode."""
    return DATABASE_RESET.dump(service.reset_database(current_host()))
