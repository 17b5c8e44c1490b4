"""``core plugins list|enable|disable`` and the commands plugins add to ``core``."""
import json
from importlib.metadata import version

import click
import pytest
from click.testing import CliRunner

from core.cli import build_cli, cli
from core.plugins import BUILTIN_PLUGINS, PluginSet
from hookspecs import hookimpl
from tests.conftest import HEADERS

from .conftest import invoke, plugins_json, run_core


def state_file(data_dir):
    path = data_dir / "plugins.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def test_list_shows_every_builtin_with_kind_version_state_and_hooks(tmp_path):
    listed = plugins_json(tmp_path)
    assert list(listed)[:len(BUILTIN_PLUGINS)] == list(BUILTIN_PLUGINS)
    for name in BUILTIN_PLUGINS:
        record = listed[name]
        assert record["kind"] == "builtin"
        assert record["version"] == version("agenthost")
        assert record["enabled"] is True
        assert record["error"] is None
        assert "register_routes" in record["hooks"], name
    assert {"register_models", "register_routes", "startup"} <= set(listed["notifications"]["hooks"])
    assert {"register_models", "register_routes", "startup"} <= set(listed["settings"]["hooks"])


def test_list_as_text_has_one_row_per_plugin(tmp_path):
    lines = run_core("plugins", "list", home=tmp_path).stdout.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "VERSION", "STATE", "HOOKS"]
    rows = {line.split()[0]: line.split() for line in lines[1:] if not line.startswith(" ")}
    for name in BUILTIN_PLUGINS:
        assert rows[name][1:4] == ["builtin", version("agenthost"), "enabled"]


def test_disable_persists_and_the_next_host_answers_404_until_enabled(make_app, data_dir, tmp_path):
    proc = run_core("plugins", "disable", "notifications", f"--data-dir={data_dir}", home=tmp_path)
    assert "notifications disabled" in proc.stdout
    assert state_file(data_dir) == {"disabled": ["notifications"]}
    assert plugins_json(tmp_path, data_dir)["notifications"]["enabled"] is False

    client = make_app().test_client()
    for path in ("/api/notifications", "/api/notifications/unread-count"):
        resp = client.get(path, headers=HEADERS)
        assert resp.status_code == 404, path
        assert resp.mimetype == "application/problem+json"
    assert client.get("/api/settings", headers=HEADERS).status_code == 200
    assert client.get("/api/plugin-categories", headers=HEADERS).status_code == 200

    run_core("plugins", "enable", "notifications", f"--data-dir={data_dir}", home=tmp_path)
    assert state_file(data_dir) == {"disabled": []}
    client = make_app().test_client()
    assert client.get("/api/notifications", headers=HEADERS).status_code == 200


def test_disable_and_enable_twice_are_harmless(data_dir, tmp_path):
    assert invoke("plugins", "disable", "tools", f"--data-dir={data_dir}", home=tmp_path).exit_code == 0
    again = invoke("plugins", "disable", "tools", f"--data-dir={data_dir}", home=tmp_path)
    assert (again.exit_code, again.output) == (0, "tools is already disabled\n")
    assert state_file(data_dir) == {"disabled": ["tools"]}
    assert invoke("plugins", "enable", "tools", f"--data-dir={data_dir}", home=tmp_path).exit_code == 0
    again = invoke("plugins", "enable", "tools", f"--data-dir={data_dir}", home=tmp_path)
    assert (again.exit_code, again.output) == (0, "tools is already enabled\n")
    assert state_file(data_dir) == {"disabled": []}


@pytest.mark.parametrize("action", ["enable", "disable"])
def test_unknown_name_is_a_non_zero_exit_with_a_clear_message(data_dir, tmp_path, action):
    result = invoke("plugins", action, "nope", f"--data-dir={data_dir}", home=tmp_path)
    assert result.exit_code != 0
    assert "no plugin named 'nope'" in result.output
    assert "notifications" in result.output  # the known names are listed
    assert state_file(data_dir) is None


def test_unknown_name_through_the_console_script_exits_non_zero(data_dir, tmp_path):
    proc = run_core("plugins", "disable", "nope", f"--data-dir={data_dir}", home=tmp_path, check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: no plugin named 'nope'")


def test_setup_cannot_be_disabled(data_dir, tmp_path):
    result = invoke("plugins", "disable", "setup", f"--data-dir={data_dir}", home=tmp_path)
    assert result.exit_code != 0
    assert "setup is required and cannot be disabled" in result.output
    assert state_file(data_dir) is None
    listed = json.loads(invoke("plugins", "list", "--json", f"--data-dir={data_dir}", home=tmp_path).output)
    assert {r["name"]: r for r in listed}["setup"]["enabled"] is True


def test_data_dir_defaults_to_agenthost_home(tmp_path):
    assert invoke("plugins", "disable", "plugin_categories", home=tmp_path).exit_code == 0
    assert state_file(tmp_path) == {"disabled": ["plugin_categories"]}
    listed = json.loads(invoke("plugins", "list", "--json", home=tmp_path).output)
    assert {r["name"]: r for r in listed}["plugin_categories"]["enabled"] is False


# --- register_commands ------------------------------------------------------------------------

class Greeter:
    __name__ = "greeter"

    @hookimpl
    def register_commands(self, cli):
        @cli.command("greet2")
        @click.argument("name")
        def greet2(name):
            click.echo(f"hi {name}")


class Hijacker:
    __name__ = "hijacker"

    @hookimpl
    def register_commands(self, cli):
        cli.add_command(click.Command("serve", callback=lambda: click.echo("hijacked")))
        cli.add_command(click.Command("hijacker-extra", callback=lambda: click.echo("extra")))


class Copycat:
    __name__ = "copycat"

    @hookimpl
    def register_commands(self, cli):
        cli.add_command(click.Command("greet2", callback=lambda: click.echo("copy")))


class Crasher:
    __name__ = "crasher"

    @hookimpl
    def register_commands(self, cli):
        raise RuntimeError("no commands")


def test_plugin_commands_join_core_and_cannot_replace_taken_names(data_dir):
    plugin_set = PluginSet(data_dir, [Crasher(), Greeter(), Hijacker(), Copycat()], load_entry_points=False)
    group = build_cli(plugin_set)
    runner = CliRunner()

    assert runner.invoke(group, ["greet2", "Ada"]).output == "hi Ada\n"
    assert "Run the host on 127.0.0.1" in runner.invoke(group, ["serve", "--help"]).output
    assert "hijacker-extra" not in group.commands  # all of a refused plugin's commands go
    assert plugin_set.records["hijacker"].error == "command name already taken: serve (by core)"
    assert plugin_set.records["copycat"].error == "command name already taken: greet2 (by greeter)"
    assert plugin_set.records["crasher"].error == "RuntimeError: no commands"
    assert plugin_set.records["greeter"].error is None


def test_building_the_cli_leaves_the_builtin_group_untouched(data_dir):
    build_cli(PluginSet(data_dir, [Greeter()], load_entry_points=False))
    assert "greet2" not in cli.commands
    assert "greet2" not in build_cli(PluginSet(data_dir, [], load_entry_points=False)).commands


def test_disabled_plugin_adds_no_command(data_dir):
    (data_dir / "plugins.json").write_text('{"disabled": ["greeter"]}', encoding="utf-8")
    group = build_cli(PluginSet(data_dir, [Greeter()], load_entry_points=False))
    assert "greet2" not in group.commands
