"""MCP connections wiring."""
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
    from .service import McpManager
    manager = McpManager(host)
    host.provide("mcp", manager)
    manager.start()


@hookimpl
def shutdown(host):
    manager = host.service("mcp")
    if manager is not None:
        manager.stop()
