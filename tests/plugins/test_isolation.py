"""One broken plugin never stops the host: it is recorded, reported and left out; the rest serve."""
import json
import textwrap

import pytest
import requests
from flask import Blueprint

from core import datasource as ds_file
from core.tools import Tool
from hookspecs import hookimpl
from tests.conftest import HEADERS

from .conftest import plugins_json, run_core

BROKEN_MODULE = 'raise ImportError("needs libbroken, which is not installed")\n'

TYPO_MODULE = textwrap.dedent('''
    """An extension with a misspelt hook: refused as a whole."""
    from hookspecs import hookimpl

    @hookimpl
    def register_route(host):
        return []

    @hookimpl
    def register_tools(host):
        from core.tools import Tool
        return [Tool("typo_tool", "never registered", {"type": "object"}, lambda a, c: None)]
''')

EVIL_SETTINGS_MODULE = textwrap.dedent('''
    """An extension that tries to take a builtin's name to replace its routes."""
    from flask import Blueprint
    from hookspecs import hookimpl

    @hookimpl
    def register_routes(host):
        bp = Blueprint("evil", __name__)
        bp.get("/api/settings")(lambda: {"evil": True})
        return [bp]
''')


CRASHY_MODULE = textwrap.dedent('''
    """Loads fine, fails when asked for its routes."""
    from hookspecs import hookimpl

    @hookimpl
    def register_routes(host):
        raise RuntimeError("no routes for you")
''')

HIJACK_MODULE = textwrap.dedent('''
    """Loads fine, tries to replace `core serve`."""
    import click
    from hookspecs import hookimpl

    @hookimpl
    def register_commands(cli):
        cli.add_command(click.Command("serve", callback=lambda: None))
''')


def tool(name):
    return Tool(name, f"test tool {name}", {"type": "object"}, lambda arguments, ctx: {"tool": name})


def ping_routes(name, path="/ping", url_prefix=None):
    bp = Blueprint(name, __name__, url_prefix=url_prefix)
    bp.get(path)(lambda: {"plugin": name})
    return [bp]


class Good:
    __name__ = "good"

    @hookimpl
    def register_routes(self, host):
        return ping_routes("good")

    @hookimpl
    def register_tools(self, host):
        return [tool("good_tool")]


def tool_names(client):
    return {t["name"]: t["source"] for t in client.get("/api/agent/tools", headers=HEADERS).json}


def records(app):
    return {r["name"]: r for r in app.extensions["agenthost"].plugins.list()}


# --- through real entry points -----------------------------------------------------------------

def test_extension_that_fails_to_import_is_recorded_and_the_host_serves(fake_dist, make_app):
    fake_dist("broken-ext", {"broken": "broken_ext_mod"}, {"broken_ext_mod": BROKEN_MODULE})
    app = make_app(load_entry_points=True)
    record = records(app)["broken"]
    assert record["kind"] == "extension"
    assert record["version"] == "0.0.1"
    assert record["error"] == "ImportError: needs libbroken, which is not installed"
    client = app.test_client()
    assert client.get("/api/settings", headers=HEADERS).status_code == 200
    assert client.get("/api/ext/broken/anything", headers=HEADERS).status_code == 404


def test_core_plugins_list_reports_load_errors_and_disable_skips_the_import(fake_dist, tmp_path):
    site = fake_dist("bad-exts", {"broken": "broken_ext_mod", "typo": "typo_ext_mod"},
                     {"broken_ext_mod": BROKEN_MODULE, "typo_ext_mod": TYPO_MODULE})
    listed = plugins_json(tmp_path, pythonpath=site)
    assert listed["broken"]["error"] == "ImportError: needs libbroken, which is not installed"
    assert listed["typo"]["error"] == "hook implementation without a specification: register_route"
    assert listed["typo"]["hooks"] == ["register_route", "register_tools"]
    assert all(listed[name]["error"] is None for name in ("setup", "settings", "notifications"))

    text = run_core("plugins", "list", home=tmp_path, pythonpath=site).stdout
    assert "error: ImportError: needs libbroken" in text

    run_core("plugins", "disable", "broken", home=tmp_path, pythonpath=site)
    again = plugins_json(tmp_path, pythonpath=site)["broken"]
    # Disabled extensions are not imported at all: disabling is the way out of a crashing import.
    assert (again["enabled"], again["error"], again["hooks"]) == (False, None, [])


def test_plugins_list_check_also_reports_registration_failures(fake_dist, tmp_path):
    site = fake_dist("late-failures", {"crashy": "crashy_mod", "hijack": "hijack_mod"},
                     {"crashy_mod": CRASHY_MODULE, "hijack_mod": HIJACK_MODULE})
    plain = plugins_json(tmp_path, pythonpath=site)
    assert plain["crashy"]["error"] is None and plain["hijack"]["error"] is None

    proc = run_core("plugins", "list", "--check", "--json", home=tmp_path, pythonpath=site)
    checked = {r["name"]: r for r in json.loads(proc.stdout)}
    assert checked["crashy"]["error"] == "RuntimeError: no routes for you"
    assert checked["hijack"]["error"] == "command name already taken: serve (by core)"
    assert all(checked[name]["error"] is None for name in ("setup", "settings", "notifications", "tools"))


def test_a_real_host_process_starts_and_serves_despite_a_broken_extension(
        fake_dist, serve_process, fresh_datasource, tmp_path):
    site = fake_dist("broken-ext", {"broken": "broken_ext_mod"}, {"broken_ext_mod": BROKEN_MODULE})
    data = tmp_path / "served"
    data.mkdir()
    ds_file.write(data, fresh_datasource("sqlite"))
    proc = serve_process(data, env={"PYTHONPATH": str(site)})
    resp = requests.get(proc.url + "/api/settings", headers=proc.headers, timeout=10)
    assert resp.status_code == 200
    assert requests.get(proc.url + "/api/notifications", headers=proc.headers, timeout=10).status_code == 200


def test_extension_cannot_take_a_builtin_name(fake_dist, make_app):
    fake_dist("evil", {"settings": "evil_settings"}, {"evil_settings": EVIL_SETTINGS_MODULE})
    app = make_app(load_entry_points=True)
    recs = records(app)
    assert recs["settings"]["kind"] == "builtin" and recs["settings"]["error"] is None
    refused = recs["settings (evil_settings)"]
    assert refused["kind"] == "extension" and refused["enabled"] is False
    assert "clashes" in refused["error"]
    client = app.test_client()
    body = client.get("/api/settings", headers=HEADERS).json
    assert "evil" not in body and "theme" in body
    assert client.put("/api/settings", json={"theme": "dark"}, headers=HEADERS).json["theme"] == "dark"


def test_entry_point_with_an_unusable_name_is_refused(fake_dist, make_app):
    fake_dist("dotted", {"bad.name": "good_mod"}, {"good_mod": "from hookspecs import hookimpl\n"})
    recs = records(make_app(load_entry_points=True))
    assert "bad.name" not in recs
    assert recs["bad.name (good_mod)"]["error"].startswith("invalid plugin name")


# --- test plugins registered on the app --------------------------------------------------------

def test_plugin_whose_register_routes_raises_is_failed_and_the_others_mount(make_app):
    class Bad:
        __name__ = "bad"

        @hookimpl
        def register_routes(self, host):
            raise RuntimeError("boom")

        @hookimpl
        def register_tools(self, host):
            return [tool("bad_tool")]

    app = make_app(plugins=[Bad(), Good()])
    recs = records(app)
    assert recs["bad"]["error"] == "RuntimeError: boom"
    assert recs["good"]["error"] is None
    assert not app.extensions["agenthost"].plugins.is_active("bad")
    client = app.test_client()
    assert client.get("/api/ext/good/ping", headers=HEADERS).json == {"plugin": "good"}
    assert client.get("/api/settings", headers=HEADERS).status_code == 200
    tools = tool_names(client)
    assert "good_tool" in tools and "bad_tool" not in tools


def test_register_routes_returning_a_bare_blueprint_is_failed(make_app):
    class Bare:
        __name__ = "bare"

        @hookimpl
        def register_routes(self, host):
            return ping_routes("bare")[0]

    app = make_app(plugins=[Bare(), Good()])
    assert records(app)["bare"]["error"].startswith("TypeError")
    assert app.test_client().get("/api/ext/good/ping", headers=HEADERS).status_code == 200


def test_hookimpl_without_a_spec_is_refused_and_reported(make_app):
    class Typo:
        __name__ = "typo"

        @hookimpl
        def register_route(self, host):  # misspelt: register_routes
            return ping_routes("typo")

        @hookimpl
        def register_tools(self, host):
            return [tool("typo_tool")]

    app = make_app(plugins=[Typo(), Good()])
    record = records(app)["typo"]
    assert record["error"] == "hook implementation without a specification: register_route"
    assert record["hooks"] == ["register_route", "register_tools"]
    client = app.test_client()
    assert "typo_tool" not in tool_names(client)
    assert client.get("/api/ext/good/ping", headers=HEADERS).status_code == 200


def test_hookimpl_with_an_argument_the_spec_lacks_is_refused(make_app):
    class Greedy:
        __name__ = "greedy"

        @hookimpl
        def register_routes(self, host, app):
            return ping_routes("greedy")

    app = make_app(plugins=[Greedy(), Good()])
    assert records(app)["greedy"]["error"].startswith("PluginValidationError")
    client = app.test_client()
    assert client.get("/api/ext/greedy/ping", headers=HEADERS).status_code == 404
    assert client.get("/api/ext/good/ping", headers=HEADERS).status_code == 200


def test_hook_wrappers_are_refused(make_app):
    class Wrapper:
        __name__ = "wrapper"

        @hookimpl(wrapper=True)
        def register_tools(self, host):
            result = yield
            return result

    app = make_app(plugins=[Wrapper(), Good()])
    assert records(app)["wrapper"]["error"].startswith("hook wrappers are not supported")
    assert "good_tool" in tool_names(app.test_client())


def test_test_plugin_cannot_take_a_builtin_name(make_app):
    class Impostor:
        __name__ = "settings"

        @hookimpl
        def register_routes(self, host):
            return ping_routes("impostor", "/api/settings")

    app = make_app(plugins=[Impostor()])
    recs = records(app)
    assert recs["settings"]["kind"] == "builtin" and recs["settings"]["error"] is None
    refused = recs["settings (Impostor)"]
    assert (refused["enabled"], refused["kind"]) == (False, "extension")
    assert refused["error"] == "name clashes with the builtin plugin 'settings'; not loaded"
    client = app.test_client()
    assert client.put("/api/settings", json={"theme": "light"}, headers=HEADERS).status_code == 200
    assert client.get("/api/settings", headers=HEADERS).json["theme"] == "light"


def test_the_same_plugin_twice_is_loaded_once(make_app):
    good = Good()
    app = make_app(plugins=[good, good])
    recs = records(app)
    assert recs["good"]["error"] is None
    assert recs["good (Good)"]["error"] == "name clashes with the extension plugin 'good'; not loaded"
    assert app.test_client().get("/api/ext/good/ping", headers=HEADERS).status_code == 200


def test_extension_blueprint_cannot_shadow_a_builtin_route(make_app):
    class Shadow:
        __name__ = "shadow"

        @hookimpl
        def register_routes(self, host):
            bp = Blueprint("shadow", __name__)
            bp.get("/api/settings")(lambda: {"shadowed": True})
            bp.get("/api/health")(lambda: {"shadowed": True})
            return [bp]

    client = make_app(plugins=[Shadow()]).test_client()
    settings = client.get("/api/settings", headers=HEADERS).json
    assert "shadowed" not in settings and "theme" in settings
    assert client.get("/api/health").json == {"status": "ok"}
    assert client.get("/api/ext/shadow/api/settings", headers=HEADERS).json == {"shadowed": True}
    # Mounted under the prefix, the copy of a bypass path is not a bypass path.
    assert client.get("/api/ext/shadow/api/health").status_code == 401


def test_extension_blueprint_prefix_goes_below_its_mount_point(make_app):
    class Versioned:
        __name__ = "versioned"

        @hookimpl
        def register_routes(self, host):
            return ping_routes("versioned", url_prefix="/v1")

    client = make_app(plugins=[Versioned()]).test_client()
    assert client.get("/api/ext/versioned/v1/ping", headers=HEADERS).json == {"plugin": "versioned"}
    assert client.get("/v1/ping", headers=HEADERS).status_code == 404


class First:
    __name__ = "first"

    @hookimpl
    def register_tools(self, host):
        return [tool("dup")]


class Second:
    __name__ = "second"

    @hookimpl
    def register_routes(self, host):
        return ping_routes("second")

    @hookimpl
    def register_tools(self, host):
        return [tool("second_only"), tool("dup")]


def test_duplicate_tool_name_refuses_the_second_plugin(make_app):
    app = make_app(plugins=[First(), Second()])
    host = app.extensions["agenthost"]
    recs = records(app)
    assert recs["first"]["error"] is None
    assert "dup" in recs["second"]["error"]
    tools = tool_names(app.test_client())
    assert tools["dup"] == "extension:first"
    # All or nothing: the second plugin's other tool went with it.
    assert "second_only" not in tools
    assert host.tools.call("dup", {}) == {"tool": "dup"}


def test_plugin_refused_for_a_duplicate_tool_serves_no_routes(make_app):
    """DESIGN §2: registries are collected (duplicates refused) before routes are mounted."""
    app = make_app(plugins=[First(), Second()])
    assert "dup" in records(app)["second"]["error"]
    assert app.test_client().get("/api/ext/second/ping", headers=HEADERS).status_code == 404


def test_plugin_whose_register_tools_raises_keeps_the_others_tools(make_app):
    class Faulty:
        __name__ = "faulty"

        @hookimpl
        def register_tools(self, host):
            raise ValueError("no tools today")

    app = make_app(plugins=[Faulty(), Good()])
    assert records(app)["faulty"]["error"] == "ValueError: no tools today"
    assert tool_names(app.test_client())["good_tool"] == "extension:good"


def test_extension_models_are_migrated_and_a_failing_register_models_is_isolated(make_app, tmp_path):
    folder = tmp_path / "demo_migrations"
    folder.mkdir()
    (folder / "0001_demo.py").write_text(textwrap.dedent('''
        """demo table"""
        import sqlalchemy as sa
        from alembic import op

        revision = "demo_0001"
        down_revision = None
        branch_labels = ("demo",)
        depends_on = None

        def upgrade():
            op.create_table("demo_items", sa.Column("id", sa.Integer, primary_key=True))

        def downgrade():
            op.drop_table("demo_items")
    '''), encoding="utf-8")

    class Demo:
        __name__ = "demo"

        @hookimpl
        def register_models(self, host):
            return [folder]

    class NoModels:
        __name__ = "nomodels"

        @hookimpl
        def register_models(self, host):
            raise OSError("migrations folder missing")

    app = make_app(plugins=[NoModels(), Demo()])
    host = app.extensions["agenthost"]
    assert host.mode == "APP"
    assert records(app)["nomodels"]["error"] == "OSError: migrations folder missing"
    from sqlalchemy import inspect
    tables = set(inspect(host.db.engine).get_table_names())
    assert {"demo_items", "settings", "notifications"} <= tables


def test_disabled_plugin_in_a_hand_edited_state_file_stays_enabled_when_required(make_app, data_dir):
    (data_dir / "plugins.json").write_text('{"disabled": ["setup", "plugin_categories"]}', encoding="utf-8")
    recs = records(make_app())
    assert recs["setup"]["enabled"] is True
    assert recs["plugin_categories"]["enabled"] is False


@pytest.mark.parametrize("content", ["not json", '["setup"]', '{"disabled": "notifications"}',
                                     '{"disabled": [1, null]}'])
def test_unreadable_state_file_disables_nothing(make_app, data_dir, content):
    (data_dir / "plugins.json").write_text(content, encoding="utf-8")
    app = make_app()
    assert all(r["enabled"] for r in records(app).values())
    assert app.test_client().get("/api/notifications", headers=HEADERS).status_code == 200
