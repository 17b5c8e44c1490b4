"""Concurrent partial updates of different settings fields lose nothing on the server databases."""
import gevent
import pytest
import requests
from sqlalchemy import delete

from builtin_plugins.settings.models import SettingsRow
from tests.conftest import HEADERS
from tests.settings.test_settings import DEFAULTS

# One field (or one computerUse member) per request: each must survive all the others.
UPDATES = [
    {"theme": "dark"},
    {"language": "de"},
    {"sidebarCollapsed": True},
    {"computerUseEnabled": True},
    {"logLevel": "WARN"},
    {"computerUse": {"maxActionsPerTurn": 7}},
    {"computerUse": {"allowedApps": ["Terminal"]}},
    {"computerUse": {"screenshotScale": 0.5}},
    {"computerUse": {"requireConfirmation": False}},
]
EXPECTED = {
    "theme": "dark", "language": "de", "sidebarCollapsed": True, "logLevel": "WARN",
    "computerUseEnabled": True,
    "computerUse": {"requireConfirmation": False, "screenshotScale": 0.5, "maxActionsPerTurn": 7,
                    "allowedApps": ["Terminal"]},
}


def run_concurrently(base, updates):
    def put(body):
        return requests.put(base + "/api/settings", json=body, headers=HEADERS, timeout=20)

    greenlets = [gevent.spawn(put, body) for body in updates]
    gevent.joinall(greenlets, raise_error=True)
    return [g.value for g in greenlets]


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
@pytest.mark.parametrize("row", ["seeded", "missing"])
def test_concurrent_partial_puts_lose_no_update(make_app, live_server, kind, row):
    app = make_app(backend=kind)
    host = app.extensions["agenthost"]
    if row == "missing":
        # The requests then also race to create the row.
        with host.db.session() as s:
            s.execute(delete(SettingsRow))
    base = live_server(app)
    for round_ in range(3):
        responses = run_concurrently(base, UPDATES)
        assert [r.status_code for r in responses] == [200] * len(UPDATES)
        assert requests.get(base + "/api/settings", headers=HEADERS, timeout=10).json() == EXPECTED
        # Back to defaults so the next round races on real changes again.
        reset = {**DEFAULTS, "computerUse": dict(DEFAULTS["computerUse"])}
        assert requests.put(base + "/api/settings", json=reset, headers=HEADERS, timeout=10).status_code == 200
