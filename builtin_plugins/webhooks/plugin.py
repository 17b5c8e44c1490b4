"""Webhook triggers wiring."""
from pathlib import Path

from hookspecs import hookimpl


@hookimpl
def register_routes(host):
    from .routes import hooks, triggers
    return [triggers, hooks]


@hookimpl
def register_models(host):
    return [Path(__file__).with_name("migrations")]


@hookimpl
def startup(host):
    from .service import Webhooks
    host.provide("webhooks", Webhooks(host))


@hookimpl
def workflow_deleting(host, workflow_id, session):
    from .service import disable_for_workflow
    return {"webhookTriggers": disable_for_workflow(session, workflow_id)}
