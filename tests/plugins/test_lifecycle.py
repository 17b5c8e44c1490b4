"""Event hooks (startup, shutdown, notification_created, settings_changed) reach every implementation."""
import pytest

from hookspecs import hookimpl
from tests.conftest import HEADERS


class Recorder:
    """Records each event hook call; with ``fail=True`` it raises after recording."""

    def __init__(self, name, calls, fail=False):
        self.__name__ = name
        self.calls = calls
        self.fail = fail

    def _seen(self, hook, payload=None):
        self.calls.append((self.__name__, hook, payload))
        if self.fail:
            raise RuntimeError(f"{self.__name__} fails in {hook}")

    @hookimpl
    def startup(self, host):
        self._seen("startup", host.db is not None)

    @hookimpl
    def shutdown(self, host):
        self._seen("shutdown")

    @hookimpl
    def notification_created(self, host, notification):
        self._seen("notification_created", notification["title"])

    @hookimpl
    def settings_changed(self, host, settings, changed):
        self._seen("settings_changed", (settings["theme"], sorted(changed)))


@pytest.fixture
def calls():
    return []


@pytest.fixture
def pair_app(make_app, calls):
    """An app whose first extension raises in every event hook and whose second records."""
    return make_app(plugins=[Recorder("loud", calls, fail=True), Recorder("quiet", calls)])


def seen(calls, hook):
    return [(name, payload) for name, h, payload in calls if h == hook]


def test_startup_reaches_every_implementation_and_the_host_enters_app_mode(pair_app, calls):
    # Each sees the database ready: startup runs after migrations.
    assert seen(calls, "startup") == [("loud", True), ("quiet", True)]
    assert pair_app.extensions["agenthost"].mode == "APP"


def test_shutdown_reaches_every_implementation_in_reverse_order(pair_app, calls):
    host = pair_app.extensions["agenthost"]
    host.stop()
    assert seen(calls, "shutdown") == [("quiet", None), ("loud", None)]
    assert host.mode == "SETUP" and host.db is None


def test_notification_created_reaches_every_implementation(pair_app, calls):
    client = pair_app.test_client()
    resp = client.post("/api/notifications", headers=HEADERS,
                       json={"source": "host", "level": "info", "title": "first"})
    assert resp.status_code == 201
    assert seen(calls, "notification_created") == [("loud", "first"), ("quiet", "first")]
    assert [n["title"] for n in client.get("/api/notifications", headers=HEADERS).json] == ["first"]


def test_a_raising_event_hook_does_not_drop_its_plugin(pair_app, calls):
    client = pair_app.test_client()
    for title in ("one", "two"):
        client.post("/api/notifications", headers=HEADERS, json={"source": "host", "level": "info", "title": title})
    assert [p for n, p in seen(calls, "notification_created") if n == "loud"] == ["one", "two"]
    host = pair_app.extensions["agenthost"]
    assert host.plugins.is_active("loud")
    assert host.plugins.records["loud"].error is None


def test_settings_changed_reaches_every_implementation(pair_app, calls):
    resp = pair_app.test_client().put("/api/settings", json={"theme": "dark"}, headers=HEADERS)
    assert resp.status_code == 200
    assert seen(calls, "settings_changed") == [("loud", ("dark", ["theme"])), ("quiet", ("dark", ["theme"]))]
    assert pair_app.test_client().get("/api/settings", headers=HEADERS).json["theme"] == "dark"


def test_rejected_settings_update_fires_no_hook(pair_app, calls):
    resp = pair_app.test_client().put("/api/settings", json={"theme": 5}, headers=HEADERS)
    assert resp.status_code == 400
    assert seen(calls, "settings_changed") == []


def test_extension_startup_runs_after_the_builtins_and_can_use_their_services(make_app):
    created = []

    class Announcer:
        __name__ = "announcer"

        @hookimpl
        def startup(self, host):
            # Needs the builtin notifications plugin's startup to have run first.
            created.append(host.service("notifications").create("plugin:announcer", "info", "ready"))

    app = make_app(plugins=[Announcer()])
    assert [n["title"] for n in created] == ["ready"]
    listed = app.test_client().get("/api/notifications", headers=HEADERS).json
    assert [(n["source"], n["title"]) for n in listed] == [("plugin:announcer", "ready")]


def test_tryfirst_and_trylast_order_event_hooks(make_app):
    order = []

    class Early:
        __name__ = "early"

        @hookimpl(trylast=True)
        def startup(self, host):
            order.append("last")

    class Late:
        __name__ = "late"

        @hookimpl(tryfirst=True)
        def startup(self, host):
            order.append("first")

    class Plain:
        __name__ = "plain"

        @hookimpl
        def startup(self, host):
            order.append("plain")

    make_app(plugins=[Early(), Late(), Plain()])
    assert order == ["first", "plain", "last"]
