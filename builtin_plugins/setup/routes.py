"""Setup wizard endpoints (no token; SETUP mode only)."""
from flask import Blueprint

from core.auth import no_auth
from core.http import current_host, request_json
from core.openapi import doc

from . import service
from .schemas import DatasourceIn, SetupStatus, TestResult

bp = Blueprint("setup", __name__, url_prefix="/api/setup")


@bp.get("/status")
@no_auth
@doc(response=SetupStatus)
def status():
    """Whether a database is configured, and which types are offered."""
    return SetupStatus().dump(service.status(current_host()))


@bp.get("/types")
@no_auth
def types():
    """Form metadata for each database type."""
    return service.types()


@bp.post("/test-connection")
@no_auth
@doc(body=DatasourceIn, response=TestResult)
def test_connection():
    """Probe a connection without persisting it."""
    datasource = DatasourceIn().load(request_json())
    return TestResult().dump(service.test_connection(current_host(), datasource))


@bp.post("/initialize")
@no_auth
@doc(body=DatasourceIn, response=SetupStatus, responses={422: "The connection or migration failed"})
def initialize():
    """Test again, persist, and switch this process into APP mode."""
    datasource = DatasourceIn().load(request_json())
    return SetupStatus().dump(service.initialize(current_host(), datasource))


@bp.delete("/config")
@no_auth
@doc(response=SetupStatus)
def clear_config():
    """Back up and clear the config; stay in SETUP mode."""
    return SetupStatus().dump(service.clear_config(current_host()))
