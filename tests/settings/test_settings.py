"""Settings: defaults, partial updates, live log level, the settings_changed hook, persistence."""
import logging

import pytest

from hookspecs import hookimpl
from tests.conftest import HEADERS
from tests.core.problems import assert_problem

DEFAULTS = {
    "theme": "system",
    "language": "en",
    "sidebarCollapsed": False,
    "logLevel": "INFO",
    "computerUseEnabled": False,
    "computerUse": {
        "requireConfirmation": True,
        "screenshotScale": 1.0,
        "maxActionsPerTurn": 50,
        "allowedApps": [],
    },
}


class Recorder:
    """A test plugin that records every settings_changed call."""

    __name__ = "recorder"

    def __init__(self):
        self.calls = []

    @hookimpl
    def settings_changed(self, host, settings, changed):
        self.calls.append((list(changed), dict(settings)))


def put(client, body):
    return client.put("/api/settings", json=body, headers=HEADERS)


def read(client):
    resp = client.get("/api/settings", headers=HEADERS)
    assert resp.status_code == 200
    return resp.json


def test_get_returns_all_six_fields_with_defaults(make_app, backend):
    client = make_app(backend=backend).test_client()
    assert read(client) == DEFAULTS


def test_put_changes_only_the_given_field(make_app, backend):
    client = make_app(backend=backend).test_client()
    resp = put(client, {"theme": "dark"})
    assert resp.status_code == 200
    assert resp.json == {**DEFAULTS, "theme": "dark"}
    assert read(client) == {**DEFAULTS, "theme": "dark"}

    assert put(client, {"sidebarCollapsed": True, "language": "de-AT"}).status_code == 200
    assert read(client) == {**DEFAULTS, "theme": "dark", "sidebarCollapsed": True, "language": "de-AT"}


def test_put_inside_computer_use_is_partial(make_app, backend):
    client = make_app(backend=backend).test_client()
    assert put(client, {"computerUse": {"maxActionsPerTurn": 7}}).status_code == 200
    assert put(client, {"computerUse": {"allowedApps": ["Terminal", "Firefox"]}}).status_code == 200
    assert put(client, {"computerUseEnabled": True}).status_code == 200
    expected = {**DEFAULTS, "computerUseEnabled": True,
                "computerUse": {**DEFAULTS["computerUse"], "maxActionsPerTurn": 7,
                                "allowedApps": ["Terminal", "Firefox"]}}
    assert read(client) == expected


def test_empty_object_changes_nothing(make_app):
    client = make_app().test_client()
    put(client, {"theme": "light"})
    resp = put(client, {})
    assert resp.status_code == 200
    assert resp.json == {**DEFAULTS, "theme": "light"}
    assert put(client, {"computerUse": {}}).json == {**DEFAULTS, "theme": "light"}


def test_settings_persist_across_a_new_app_on_the_same_data_dir(make_app, backend):
    first = make_app(backend=backend).test_client()
    put(first, {"theme": "dark", "computerUse": {"screenshotScale": 0.5}})
    second = make_app().test_client()  # same data dir, so the same stored datasource
    assert read(second) == {**DEFAULTS, "theme": "dark",
                            "computerUse": {**DEFAULTS["computerUse"], "screenshotScale": 0.5}}


@pytest.mark.parametrize("name, level", [("TRACE", 5), ("DEBUG", logging.DEBUG), ("INFO", logging.INFO),
                                         ("WARN", logging.WARNING), ("ERROR", logging.ERROR)])
def test_log_level_applies_live(make_app, name, level):
    client = make_app().test_client()
    start = "ERROR" if name != "ERROR" else "DEBUG"
    put(client, {"logLevel": start})
    assert logging.getLogger("agenthost").getEffectiveLevel() != level
    assert put(client, {"logLevel": name}).status_code == 200
    assert logging.getLogger("agenthost").getEffectiveLevel() == level
    assert logging.getLogger("agenthost.anything").getEffectiveLevel() == level


def test_stored_log_level_applies_when_the_host_starts(make_app):
    put(make_app().test_client(), {"logLevel": "WARN"})
    logging.getLogger("agenthost").setLevel(logging.INFO)
    make_app()
    assert logging.getLogger("agenthost").getEffectiveLevel() == logging.WARNING


def test_settings_changed_hook_gets_only_the_changed_names(make_app):
    recorder = Recorder()
    client = make_app(plugins=[recorder]).test_client()

    put(client, {"theme": "dark", "language": "en", "computerUse": {"maxActionsPerTurn": 9}})
    assert [changed for changed, _ in recorder.calls] == [["computerUse", "theme"]]
    settings = recorder.calls[0][1]
    assert settings["theme"] == "dark" and settings["computerUse"]["maxActionsPerTurn"] == 9

    put(client, {"theme": "dark"})  # same value: nothing changed, no call
    put(client, {})
    put(client, {"computerUse": {"maxActionsPerTurn": 9}})
    assert len(recorder.calls) == 1

    put(client, {"logLevel": "DEBUG", "sidebarCollapsed": True})
    assert recorder.calls[-1][0] == ["logLevel", "sidebarCollapsed"]


class Broken:
    """A settings_changed listener that always raises."""

    __name__ = "broken"

    @hookimpl
    def settings_changed(self, host, settings, changed):
        raise RuntimeError("listener bug")


def test_a_failing_listener_does_not_fail_the_update_or_the_others(make_app):
    recorder = Recorder()
    client = make_app(plugins=[Broken(), recorder]).test_client()
    resp = put(client, {"theme": "dark"})
    assert resp.status_code == 200 and resp.json["theme"] == "dark"
    assert [changed for changed, _ in recorder.calls] == [["theme"]]
    assert read(client)["theme"] == "dark"


def test_rejected_update_fires_no_hook(make_app):
    recorder = Recorder()
    client = make_app(plugins=[recorder]).test_client()
    assert_problem(put(client, {"theme": "dark", "logLevel": "LOUD"}), 400, "validation_failed")
    assert recorder.calls == []
    assert read(client) == DEFAULTS


def test_settings_need_the_token(make_app):
    client = make_app().test_client()
    assert_problem(client.get("/api/settings"), 401, "invalid_token")
    assert_problem(client.put("/api/settings", json={"theme": "dark"}), 401, "invalid_token")
    assert_problem(client.put("/api/settings", json={"theme": "dark"},
                              headers={"X-Service-Token": "wrong"}), 401, "invalid_token")
    assert read(client) == DEFAULTS


def test_database_reset_backs_up_and_returns_to_setup_mode(make_app, data_dir):
    client = make_app().test_client()
    assert_problem(client.post("/api/settings/database/reset"), 401)
    assert (data_dir / "datasource.properties").exists()
    assert read(client) == DEFAULTS

    original = (data_dir / "datasource.properties").read_text()
    resp = client.post("/api/settings/database/reset", headers=HEADERS)
    assert resp.status_code == 200
    assert resp.json == {"mode": "SETUP", "backup": True}
    assert not (data_dir / "datasource.properties").exists()
    assert (data_dir / "datasource.properties.bak").read_text() == original
    assert_problem(client.get("/api/settings", headers=HEADERS), 503, "service_in_setup_mode")
    assert client.get("/api/setup/status").json["initialized"] is False
