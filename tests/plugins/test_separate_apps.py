"""Plugin state belongs to one app: apps built side by side never see each other's plugins."""
from flask import Blueprint

from core.tools import Tool
from hookspecs import hookimpl
from tests.conftest import HEADERS


def make_plugin(name):
    class Plugin:
        __name__ = name

        @hookimpl
        def register_routes(self, host):
            bp = Blueprint(name, __name__)
            bp.get("/whoami")(lambda: {"plugin": name, "app": host.config["test.label"]})
            return [bp]

        @hookimpl
        def register_tools(self, host):
            return [Tool(f"{name}_tool", name, {"type": "object"}, lambda arguments, ctx: name)]

    return Plugin()


def tools_of(client):
    return {t["name"] for t in client.get("/api/agent/tools", headers=HEADERS).json}


def test_apps_side_by_side_see_only_their_own_plugins(make_app, tmp_path):
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    app_a = make_app(plugins=[make_plugin("alpha")], config={"test.label": "A"})
    app_b = make_app(plugins=[make_plugin("beta")], config={"test.label": "B"}, data_dir=other_dir)
    a, b = app_a.test_client(), app_b.test_client()

    assert a.get("/api/ext/alpha/whoami", headers=HEADERS).json == {"plugin": "alpha", "app": "A"}
    assert b.get("/api/ext/beta/whoami", headers=HEADERS).json == {"plugin": "beta", "app": "B"}
    assert a.get("/api/ext/beta/whoami", headers=HEADERS).status_code == 404
    assert b.get("/api/ext/alpha/whoami", headers=HEADERS).status_code == 404
    assert "alpha_tool" in tools_of(a) and "beta_tool" not in tools_of(a)
    assert "beta_tool" in tools_of(b) and "alpha_tool" not in tools_of(b)
    assert "alpha" in app_a.extensions["agenthost"].plugins.records
    assert "alpha" not in app_b.extensions["agenthost"].plugins.records


def test_one_plugin_object_in_two_apps_gets_separate_registrations(make_app, tmp_path):
    shared = make_plugin("shared")
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    app_a = make_app(plugins=[shared], config={"test.label": "A"})
    app_b = make_app(plugins=[shared], config={"test.label": "B"}, data_dir=other_dir)
    host_a, host_b = app_a.extensions["agenthost"], app_b.extensions["agenthost"]

    # Each app's hook call got its own host, so each route answers for its own app.
    assert app_a.test_client().get("/api/ext/shared/whoami", headers=HEADERS).json["app"] == "A"
    assert app_b.test_client().get("/api/ext/shared/whoami", headers=HEADERS).json["app"] == "B"
    assert host_a.tools.remove("shared_tool")
    assert "shared_tool" not in tools_of(app_a.test_client())
    assert "shared_tool" in tools_of(app_b.test_client())
    assert host_a.pm is not host_b.pm


def test_a_failure_in_one_app_is_not_recorded_in_another(make_app, tmp_path):
    class FailsForA:
        __name__ = "picky"

        @hookimpl
        def register_routes(self, host):
            if host.config["test.label"] == "A":
                raise RuntimeError("not in A")
            return []

    other_dir = tmp_path / "other"
    other_dir.mkdir()
    app_a = make_app(plugins=[FailsForA()], config={"test.label": "A"})
    app_b = make_app(plugins=[FailsForA()], config={"test.label": "B"}, data_dir=other_dir)
    assert app_a.extensions["agenthost"].plugins.records["picky"].error == "RuntimeError: not in A"
    assert app_b.extensions["agenthost"].plugins.records["picky"].error is None
    assert app_b.extensions["agenthost"].plugins.is_active("picky")


def test_disabling_in_one_data_dir_leaves_another_app_alone(make_app, tmp_path):
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    (other_dir / "plugins.json").write_text('{"disabled": ["notifications"]}', encoding="utf-8")
    app_a = make_app()
    app_b = make_app(data_dir=other_dir)
    assert app_a.test_client().get("/api/notifications", headers=HEADERS).status_code == 200
    assert app_b.test_client().get("/api/notifications", headers=HEADERS).status_code == 404
