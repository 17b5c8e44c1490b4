"""The ``core`` command line: serve, init, plugins, openapi, and extensions' commands."""
import json
import logging
import secrets
import sys

import click

from .config import DEFAULT_PORT, Config, default_data_dir
from .plugins import REQUIRED_PLUGINS, PluginSet, read_disabled, write_disabled

data_dir_option = click.option(
    "--data-dir", type=click.Path(file_okay=False), default=None,
    help="Data directory (default: $AGENTHOST_HOME, else ~/.agenthost).")


def _data_dir(value):
    return value or str(default_data_dir())


def _configure_logging(level="INFO"):
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("agenthost").setLevel(level)


@click.group(help="agenthost: a local agent and plugin host.")
def cli():
    pass


@cli.command()
@click.option("--token", default=None, help="Launch token every request must carry (X-Service-Token).")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port on 127.0.0.1; 0 asks the OS. A taken port falls back to an assigned one.")
@data_dir_option
@click.option("--redis", "redis_url", envvar="AGENTHOST_REDIS_URL", default=None,
              help="Redis URL for background tasks and the event bus.")
@click.option("--log-level", default="INFO", type=click.Choice(["TRACE", "DEBUG", "INFO", "WARN", "ERROR"]))
def serve(token, port, data_dir, redis_url, log_level):
    """Run the host on 127.0.0.1 and print SERVICE_PORT=<n> once it listens."""
    from .app import create_app
    from .launcher import serve as run

    from .host import LOG_LEVELS

    _configure_logging(LOG_LEVELS[log_level])
    if not token:
        token = secrets.token_urlsafe(32)
        click.echo(f"SERVICE_TOKEN={token}")
    config = Config({
        "service.auth.token": token,
        "service.data-dir": _data_dir(data_dir),
        "service.redis-url": redis_url,
        "service.log-level": log_level,
    })
    app = create_app(config)
    run(app, port)


@cli.command()
@data_dir_option
def init(data_dir):
    """Initialise the embedded SQLite database (what the setup wizard's initialize does)."""
    from . import datasource as ds_file
    from .app import create_app
    from .host import ModeError

    _configure_logging("WARNING")
    config = Config({"service.data-dir": _data_dir(data_dir)})
    app = create_app(config, start=False)
    host = app.extensions["agenthost"]
    stored = ds_file.read(config.data_dir)
    try:
        if stored is not None:
            host.enter_app_mode(stored)
            click.echo(f"already initialised ({stored['type']}); schema is up to date")
        else:
            host.initialize({"type": "sqlite", "params": {}})
            click.echo(f"initialised embedded sqlite in {config.data_dir}")
    except ModeError as exc:
        raise click.ClickException(str(exc))
    finally:
        host.stop()


@cli.group()
def plugins():
    """List, enable and disable builtin plugins and extensions."""


@plugins.command("list")
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def plugins_list(data_dir, as_json):
    """Name, kind, version, enabled, hooks and load error of every plugin."""
    records = PluginSet(_data_dir(data_dir)).list()
    if as_json:
        click.echo(json.dumps(records, indent=2))
        return
    for r in records:
        state = "enabled" if r["enabled"] else "disabled"
        line = f"{r['name']:<20} {r['kind']:<9} {r['version'] or '-':<10} {state:<8} {', '.join(r['hooks'])}"
        if r["error"]:
            line += f"\n    error: {r['error']}"
        click.echo(line)


def _known(data_dir, name):
    records = {r["name"] for r in PluginSet(data_dir).list()}
    if name not in records:
        raise click.ClickException(f"no plugin named {name!r}; see `core plugins list`")


@plugins.command("enable")
@click.argument("name")
@data_dir_option
def plugins_enable(name, data_dir):
    """Enable a plugin (applies on next start)."""
    data_dir = _data_dir(data_dir)
    disabled = read_disabled(data_dir)
    if name not in disabled:
        _known(data_dir, name)
    disabled.discard(name)
    write_disabled(data_dir, disabled)
    click.echo(f"{name} enabled; restart the host to apply")


@plugins.command("disable")
@click.argument("name")
@data_dir_option
def plugins_disable(name, data_dir):
    """Disable a plugin (applies on next start)."""
    data_dir = _data_dir(data_dir)
    if name in REQUIRED_PLUGINS:
        raise click.ClickException(f"{name} is required and cannot be disabled")
    _known(data_dir, name)
    disabled = read_disabled(data_dir)
    disabled.add(name)
    write_disabled(data_dir, disabled)
    click.echo(f"{name} disabled; restart the host to apply")


@cli.command()
@data_dir_option
def openapi(data_dir):
    """Print the OpenAPI 3.1 document."""
    from .app import create_app
    from .openapi import build

    _configure_logging("ERROR")
    app = create_app(Config({"service.data-dir": _data_dir(data_dir)}), start=False)
    click.echo(json.dumps(build(app), indent=2))


def build_cli():
    """The ``core`` group with every enabled plugin's commands added."""
    plugin_set = PluginSet(str(default_data_dir()))
    for _name, _ in plugin_set.call_each("register_commands", registry=True, cli=cli):
        pass
    return cli
