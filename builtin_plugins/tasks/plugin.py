"""Task endpoints wiring."""
from hookspecs import hookimpl


@hookimpl
def register_routes(host):
    from .routes import bp
    return [bp]
