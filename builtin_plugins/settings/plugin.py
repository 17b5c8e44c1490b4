"""Settings wiring."""
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
    from . import service
    # The stored log level wins over the launcher's from the moment the database is up.
    host.set_log_level(service.get(host)["logLevel"])
