"""Runtime plugins wiring."""
from pathlib import Path

from hookspecs import hookimpl


@hookimpl
def register_routes(host):
    from .file_routes import files_bp
    from .routes import bp, packages_bp
    return [bp, packages_bp, files_bp]


@hookimpl
def register_models(host):
    return [Path(__file__).with_name("migrations")]


@hookimpl
def startup(host):
    from .service import RuntimePlugins
    runtime = RuntimePlugins(host)
    host.provide("runtime_plugins", runtime)
    host.provide("workers", runtime.supervisor)
    runtime.load_installed()
    from .files import register_host_methods
    register_host_methods(host)


@hookimpl
def shutdown(host):
    runtime = host.service("runtime_plugins")
    if runtime is not None:
        runtime.supervisor.stop_all()


@hookimpl
def settings_changed(host, settings, changed):
    runtime = host.service("runtime_plugins")
    if runtime is not None and "logLevel" in changed:
        runtime.supervisor.set_log_level(settings["logLevel"])


@hookimpl
def register_commands(cli):
    from .commands import plugins_group
    cli.add_command(plugins_group)
