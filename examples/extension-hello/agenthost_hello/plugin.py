"""The module the host registers (entry point ``hello``): hookimpls only, heavy imports inside."""
from hookspecs import hookimpl


@hookimpl
def register_routes(host):
    # Mounted by the host under /api/ext/hello/, so this serves /api/ext/hello/greet.
    from .routes import bp
    return [bp]


@hookimpl
def register_tools(host):
    from .tools import greet_tool
    return [greet_tool()]


@hookimpl
def register_commands(cli):
    from .commands import hello
    cli.add_command(hello)
