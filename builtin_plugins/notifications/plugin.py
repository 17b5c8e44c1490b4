"""Notification center wiring."""
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
    from .service import NotificationCenter
    # Other areas (the plugin bridge, the agent) create notifications through this service.
    host.provide("notifications", NotificationCenter(host))
