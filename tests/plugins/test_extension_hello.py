"""The example extension, pip-installed, proven through its real ``agenthost`` entry point."""
import pytest

from core.tools import ToolError
from tests.conftest import HEADERS

from .conftest import invoke, plugins_json, run_core


@pytest.fixture(autouse=True)
def site(hello_installed):
    """Where the example is installed; child processes get it on PYTHONPATH."""
    return hello_installed.site


@pytest.fixture
def hello_app(make_app):
    return make_app(load_entry_points=True)


def test_the_installed_distribution_is_the_example(hello_installed):
    from importlib.metadata import distribution, entry_points

    assert hello_installed.version == "0.1.0"
    assert distribution("agenthost-hello").locate_file("agenthost_hello").parent == hello_installed.site
    (ep,) = [ep for ep in entry_points(group="agenthost") if ep.name == "hello"]
    assert ep.value == "agenthost_hello.plugin"


def test_route_is_mounted_under_the_extension_prefix(hello_app):
    client = hello_app.test_client()
    resp = client.get("/api/ext/hello/greet?name=Ada", headers=HEADERS)
    assert resp.status_code == 200
    assert resp.json == {"greeting": "Hello, Ada!"}
    assert client.get("/api/ext/hello/greet", headers=HEADERS).json == {"greeting": "Hello, World!"}


@pytest.mark.parametrize("headers", [{}, {"X-Service-Token": "wrong"}], ids=["missing", "wrong"])
def test_extension_route_requires_the_token(hello_app, headers):
    resp = hello_app.test_client().get("/api/ext/hello/greet?name=Ada", headers=headers)
    assert resp.status_code == 401
    assert resp.mimetype == "application/problem+json"
    assert resp.json["code"] == "invalid_token"


def test_extension_route_is_only_under_its_prefix(hello_app):
    client = hello_app.test_client()
    for path in ("/greet", "/api/greet", "/api/hello/greet"):
        resp = client.get(path, headers=HEADERS)
        assert resp.status_code == 404, path
        assert resp.mimetype == "application/problem+json"


@pytest.mark.parametrize("name", ["", "x" * 101], ids=["empty", "oversize"])
def test_bad_name_is_a_400_problem_with_field_errors(hello_app, name):
    resp = hello_app.test_client().get("/api/ext/hello/greet", query_string={"name": name}, headers=HEADERS)
    assert resp.status_code == 400
    assert resp.mimetype == "application/problem+json"
    assert set(resp.json) >= {"type", "title", "status", "detail", "code"}
    assert "name" in resp.json["errors"]


def test_route_is_in_the_openapi_document(hello_app):
    doc = hello_app.test_client().get("/api/openapi.json", headers=HEADERS).json
    assert "get" in doc["paths"]["/api/ext/hello/greet"]


def test_tool_is_in_the_catalog_as_an_extension_tool(hello_app):
    tools = {t["name"]: t for t in hello_app.test_client().get("/api/agent/tools", headers=HEADERS).json}
    tool = tools["hello_greet"]
    assert tool["source"] == "extension:hello"
    assert tool["retrySafe"] is True
    assert tool["parameters"]["type"] == "object"
    assert tool["parameters"]["required"] == ["name"]


def test_tool_is_callable_through_the_host_catalog(hello_app):
    host = hello_app.extensions["agenthost"]
    assert host.tools.call("hello_greet", {"name": "Ada"}) == {"greeting": "Hello, Ada!"}


@pytest.mark.parametrize("arguments", [{}, {"name": 5}, {"name": "x" * 101}, {"name": "Ada", "extra": 1},
                                       {"name": "   "}],
                         ids=["missing", "wrong-type", "oversize", "unknown-field", "blank"])
def test_tool_refuses_bad_arguments(hello_app, arguments):
    host = hello_app.extensions["agenthost"]
    with pytest.raises(ToolError):
        host.tools.call("hello_greet", arguments)


def test_cli_command_prints_the_greeting(tmp_path, site):
    proc = run_core("hello", "World", home=tmp_path, pythonpath=site)
    assert proc.stdout == "Hello, World!\n"
    # The command comes from the installed package: without it, core has no such command.
    assert "No such command" in run_core("hello", "World", home=tmp_path, check=False).stderr


def test_cli_command_refuses_a_blank_name(tmp_path, site):
    proc = run_core("hello", "  ", home=tmp_path, pythonpath=site, check=False)
    assert proc.returncode != 0
    assert "NAME" in proc.stderr


def test_plugins_list_shows_the_extension_with_version_and_hooks(tmp_path, site):
    record = plugins_json(tmp_path, pythonpath=site)["hello"]
    assert record == {
        "name": "hello", "kind": "extension", "version": "0.1.0", "enabled": True,
        "hooks": ["register_commands", "register_routes", "register_tools"], "error": None,
    }


def test_disabled_extension_contributes_nothing_until_enabled(make_app, data_dir, site):
    assert invoke("plugins", "disable", "hello", f"--data-dir={data_dir}", home=data_dir).exit_code == 0

    app = make_app(load_entry_points=True)
    client = app.test_client()
    assert app.extensions["agenthost"].plugins.records["hello"].enabled is False
    assert client.get("/api/ext/hello/greet", headers=HEADERS).status_code == 404
    assert "hello_greet" not in {t["name"] for t in client.get("/api/agent/tools", headers=HEADERS).json}
    proc = run_core("hello", "World", home=data_dir, pythonpath=site, check=False)
    assert proc.returncode != 0
    assert "No such command" in proc.stderr

    assert invoke("plugins", "enable", "hello", f"--data-dir={data_dir}", home=data_dir).exit_code == 0
    app = make_app(load_entry_points=True)
    assert app.test_client().get("/api/ext/hello/greet", headers=HEADERS).status_code == 200
    assert run_core("hello", "World", home=data_dir, pythonpath=site).stdout == "Hello, World!\n"
