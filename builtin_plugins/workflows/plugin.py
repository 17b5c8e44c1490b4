"""Workflows wiring."""
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
    from .service import Workflows
    service = Workflows(host)
    host.provide("workflows", service)
    service.load_tools()


@hookimpl
def shutdown(host):
    service = host.service("workflows")
    if service is not None:
        service.unload_tools()
