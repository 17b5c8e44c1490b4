"""Plugin tools in the live catalog: join with the plugin, call through tools/call, leave with it, cached."""
import pytest

from core.tools import ToolError
from tests.runtime_plugins.support import (FAST, HELLO_ID, authed, install, invoke, set_enabled, status,
                                           worker_plugin)

GREET = "com_example_hello__greet"


def catalog(rt):
    return {t["name"]: t for t in rt.get("/api/agent/tools").json}


def test_an_installed_plugins_tools_join_the_catalog(rt, hello_zip):
    install(rt, hello_zip)
    tool = catalog(rt)[GREET]
    assert tool["source"] == f"plugin:{HELLO_ID}"
    assert tool["description"] == "Greet someone by name."
    assert tool["parameters"]["required"] == ["name"]
    assert tool["retrySafe"] is True
    assert status(rt, HELLO_ID)["pid"] is None  # listed at install (health check), not by spawning

    invoke(rt, HELLO_ID, "ping")
    assert catalog(rt)[GREET]["source"] == f"plugin:{HELLO_ID}"
    assert status(rt, HELLO_ID)["tools"] == [GREET]


def test_calling_a_plugin_tool_goes_through_tools_call(rt_app, rt, hello_zip):
    install(rt, hello_zip)
    result = rt_app.extensions["agenthost"].tools.call(GREET, {"name": "Ada"})
    assert result["content"] == [{"type": "text", "text": "Hello, Ada!"}]
    assert status(rt, HELLO_ID)["pid"] is not None  # the call spawned the worker
    messages = [e["message"] for e in rt.get(f"/api/plugin-runtime/{HELLO_ID}/logs").json]
    assert "greeting Ada" in messages


def test_a_plugin_tool_checks_its_schema_before_the_worker_sees_it(rt_app, rt, hello_zip):
    install(rt, hello_zip)
    with pytest.raises(ToolError, match="name"):
        rt_app.extensions["agenthost"].tools.call(GREET, {"name": ""})
    assert status(rt, HELLO_ID)["pid"] is None


@pytest.mark.parametrize("tool, message", [
    ("error_result", "disk is full"),
    ("rpc_error", "bad arguments for rpc_error"),
    ("crash", "plugin test.tooly: the worker exited unexpectedly"),
])
def test_a_failing_plugin_tool_raises_a_tool_error(rt_app, rt, tmp_path, tool, message):
    install(rt, worker_plugin(tmp_path, "tooly", "test.tooly"))
    with pytest.raises(ToolError, match=message):
        rt_app.extensions["agenthost"].tools.call(f"test_tooly__{tool}", {})


def test_plugin_tools_leave_on_disable_and_come_back_on_enable(rt, hello_zip):
    install(rt, hello_zip)
    set_enabled(rt, HELLO_ID, False)
    assert GREET not in catalog(rt)
    set_enabled(rt, HELLO_ID, True)
    assert catalog(rt)[GREET]["source"] == f"plugin:{HELLO_ID}"


def test_plugin_tools_leave_on_uninstall(rt, hello_zip):
    install(rt, hello_zip)
    invoke(rt, HELLO_ID, "ping")
    assert rt.delete(f"/api/plugin-packages/{HELLO_ID}").status_code == 200
    assert not [t for t in catalog(rt).values() if t["source"] == f"plugin:{HELLO_ID}"]


def test_a_plugin_without_tools_adds_none(rt, tmp_path):
    install(rt, worker_plugin(tmp_path, "echo", "test.echo"))
    invoke(rt, "test.echo", "ping")
    assert not [t for t in catalog(rt).values() if t["source"] == "plugin:test.echo"]


def test_after_a_host_restart_cached_tools_are_listed_before_any_spawn(make_app, hello_zip, data_dir):
    first = make_app(config=FAST)
    rt = authed(first)
    install(rt, hello_zip)
    assert invoke(rt, HELLO_ID, "ping").status_code == 200
    first.extensions["agenthost"].stop()

    second = make_app(config=FAST, data_dir=data_dir)
    rt2 = authed(second)

    assert catalog(rt2)[GREET]["source"] == f"plugin:{HELLO_ID}"
    assert status(rt2, HELLO_ID)["pid"] is None
    result = second.extensions["agenthost"].tools.call(GREET, {"name": "again"})
    assert result["content"][0]["text"] == "Hello, again!"
