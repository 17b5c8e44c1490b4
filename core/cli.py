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
@click.option("--redis-namespace", envvar="AGENTHOST_REDIS_NAMESPACE", default="agenthost", show_default=True,
              help="Keeps several installs on one Redis apart.")
@click.option("--log-level", default="INFO", type=click.Choice(["TRACE", "DEBUG", "INFO", "WARN", "ERROR"]))
def serve(token, port, data_dir, redis_url, redis_namespace, log_level):
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
        "service.redis-namespace": redis_namespace,
        "service.log-level": log_level,
    })
    app = create_app(config)
    run(app, port)


@cli.command()
@click.option("--redis", "redis_url", envvar="AGENTHOST_REDIS_URL", required=True,
              help="Redis URL the host was started with (--redis / AGENTHOST_REDIS_URL).")
@click.option("--namespace", envvar="AGENTHOST_REDIS_NAMESPACE", default="agenthost", show_default=True,
              help="Keeps several installs on one Redis apart.")
@data_dir_option
@click.option("--burst", is_flag=True, help="Exit when the queue is empty.")
def worker(redis_url, namespace, data_dir, burst):
    """Run an RQ worker for background tasks (same database, tools and event bus as the host)."""
    from .worker import run

    _configure_logging(logging.INFO)
    run(Config({"service.data-dir": _data_dir(data_dir), "service.redis-url": redis_url,
                "service.redis-namespace": namespace, "service.log-level": "WARN"}), burst=burst)


@cli.command()
@data_dir_option
def init(data_dir):
    """Initialise the embedded SQLite database (what the setup wizard's initialize does)."""
    from . import datasource as ds_file
    from .app import create_app
    from .host import ModeError

    _configure_logging("WARNING")
    config = Config({"service.data-dir": _data_dir(data_dir), "service.log-level": "WARN"})
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
@click.option("--check", is_flag=True,
              help="Also run the registration hooks (routes, tools, commands) as a start "
                   "would, and report their failures.")
def plugins_list(data_dir, as_json, check):
    """Name, kind, version, enabled, hooks and load error of every plugin."""
    data_dir = _data_dir(data_dir)
    if check:
        from .app import create_app

        # Failures are in the listing; the log would only repeat them.
        logging.getLogger("agenthost").setLevel(logging.CRITICAL)
        app = create_app(Config({"service.data-dir": data_dir}), start=False)
        plugin_set = app.extensions["agenthost"].plugins
        build_cli(plugin_set)
    else:
        plugin_set = PluginSet(data_dir)
    records = plugin_set.list()
    if as_json:
        click.echo(json.dumps(records, indent=2))
        return
    click.echo(f"{'NAME':<20} {'KIND':<9} {'VERSION':<10} {'STATE':<8} HOOKS")
    for r in records:
        state = "enabled" if r["enabled"] else "disabled"
        hooks = ", ".join(r["hooks"]) or "-"
        line = f"{r['name']:<20} {r['kind']:<9} {r['version'] or '-':<10} {state:<8} {hooks}"
        if r["error"]:
            line += f"\n    error: {r['error']}"
        click.echo(line)


def _known(data_dir, name):
    plugin_set = PluginSet(data_dir)
    if name not in plugin_set.records:
        known = ", ".join(n for n, r in plugin_set.records.items() if " " not in n)
        raise click.ClickException(
            f"no plugin named {name!r} (known: {known}); see `core plugins list`")


@plugins.command("enable")
@click.argument("name")
@data_dir_option
def plugins_enable(name, data_dir):
    """Enable a plugin (applies on next start)."""
    data_dir = _data_dir(data_dir)
    disabled = read_disabled(data_dir)
    if name not in disabled:
        _known(data_dir, name)
        click.echo(f"{name} is already enabled")
        return
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
    disabled = read_disabled(data_dir)
    if name in disabled:
        click.echo(f"{name} is already disabled")
        return
    _known(data_dir, name)
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
    app = create_app(Config({"service.data-dir": _data_dir(data_dir), "service.log-level": "WARN"}), start=False)
    click.echo(json.dumps(build(app), indent=2))


def _data_dir_in(argv):
    """The ``--data-dir`` of a command line, read before click parses it.

    Extensions' commands are added before parsing, and which extensions are
    disabled depends on the data directory the command will use.
    """
    for i, arg in enumerate(argv):
        if arg == "--data-dir" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--data-dir="):
            return arg.split("=", 1)[1]
    return None


def build_cli(plugin_set=None, argv=None):
    """A ``core`` group with the builtin commands plus every enabled plugin's commands.

    Each plugin adds its commands to a group of its own; they are then copied
    into ``core`` unless a name is already taken, in which case the plugin's
    commands are all refused (recorded on ``plugin_set`` and logged): an
    extension can never replace ``serve`` or another plugin's command.
    """
    if plugin_set is None:
        argv = sys.argv[1:] if argv is None else argv
        plugin_set = PluginSet(_data_dir(_data_dir_in(argv)))
    group = click.Group(name="core", help=cli.help, commands=dict(cli.commands))
    owners = {name: "core" for name in group.commands}
    for impl in plugin_set.hookimpls("register_commands"):
        name = impl.plugin_name
        if not plugin_set.is_active(name):
            continue
        own = click.Group(name=name)
        try:
            impl.function(*[own for _ in impl.argnames])  # the spec's only argument is cli
        except Exception as exc:
            logging.getLogger("agenthost.plugins").exception(
                "plugin %s failed in register_commands", name)
            plugin_set.fail(name, exc)
            continue
        # A plugin may extend a core group (``core plugins pack``) with a group of the same name.
        merges = {c: cmd for c, cmd in own.commands.items()
                  if isinstance(cmd, click.Group) and isinstance(group.commands.get(c), click.Group)
                  and owners.get(c) == "core"}
        clashes = sorted(f"{c} {sub}" for c, cmd in merges.items() for sub in cmd.commands
                         if sub in group.commands[c].commands)
        taken = sorted(c for c in own.commands if c in owners and c not in merges) + clashes
        if taken:
            plugin_set.fail(name, "command name already taken: " + ", ".join(
                f"{c} (by {owners[c]})" for c in taken))
            continue
        for command_name, command in own.commands.items():
            if command_name in merges:
                merged = click.Group(name=command_name, help=group.commands[command_name].help,
                                     commands=dict(group.commands[command_name].commands))
                for sub_name, sub in command.commands.items():
                    merged.add_command(sub, sub_name)
                group.add_command(merged, command_name)
                continue
            group.add_command(command, command_name)
            owners[command_name] = name
    return group
