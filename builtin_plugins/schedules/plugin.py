"""Schedules wiring."""
from pathlib import Path

from hookspecs import hookimpl


@hookimpl
def register_routes(host):
    from .routes import bp
    return [bp]


@hookimpl
def register_models(host):
    return [Path(__file__).with_name("migrations")]


@hookimpl
def startup(host):
    from .service import Schedules
    service = Schedules(host)
    host.provide("schedules", service)
    if host.config.get("service.role", "host") == "host":  # `core worker` processes run tasks, not fires
        service.start()


@hookimpl
def shutdown(host):
    service = host.service("schedules")
    if service is not None:
        service.stop()


@hookimpl
def workflow_deleting(host, workflow_id, session):
    from .service import Schedules
    return {"schedules": Schedules.cancel_for_workflow(session, workflow_id)}
