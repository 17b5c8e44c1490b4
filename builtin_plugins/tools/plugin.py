"""Tool catalog wiring."""
from hookspecs import hookimpl


@hookimpl
def register_routes(host):
    from .routes import bp
    return [bp]


@hookimpl
def register_tools(host):
    from .builtin import builtin_tools
    return builtin_tools()
