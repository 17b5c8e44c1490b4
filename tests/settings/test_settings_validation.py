"""Settings bad input: every field validated, per-field errors, and nothing stored."""
import json

import pytest

from tests.conftest import HEADERS
from tests.core.problems import assert_problem
from tests.core.shared_app import module_app
from tests.settings.test_settings import DEFAULTS

CHANGED = {**DEFAULTS, "theme": "dark", "computerUse": {**DEFAULTS["computerUse"], "maxActionsPerTurn": 9}}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    yield from module_app(tmp_path_factory)


@pytest.fixture
def client(shared):
    client = shared.test_client()
    # Start from non-default values so a rejected update that resets anything shows up.
    baseline = {**CHANGED, "computerUse": dict(CHANGED["computerUse"])}
    assert client.put("/api/settings", json=baseline, headers=HEADERS).json == CHANGED
    return client


def unchanged(client):
    return client.get("/api/settings", headers=HEADERS).json == CHANGED


BAD_FIELDS = [
    # body, the errors the problem must name (field -> nested field or None)
    ({"theme": "purple"}, {"theme": None}),
    ({"theme": 1}, {"theme": None}),
    ({"theme": None}, {"theme": None}),
    ({"language": 5}, {"language": None}),
    ({"language": "english please"}, {"language": None}),
    ({"language": "x"}, {"language": None}),
    ({"language": "en\n"}, {"language": None}),
    ({"language": "en-" + "a" * 40}, {"language": None}),
    ({"sidebarCollapsed": "true"}, {"sidebarCollapsed": None}),
    ({"sidebarCollapsed": 1}, {"sidebarCollapsed": None}),
    ({"logLevel": "LOUD"}, {"logLevel": None}),
    ({"logLevel": "info"}, {"logLevel": None}),
    ({"logLevel": 10}, {"logLevel": None}),
    ({"computerUseEnabled": "false"}, {"computerUseEnabled": None}),
    ({"computerUseEnabled": 0}, {"computerUseEnabled": None}),
    ({"computerUse": "on"}, {"computerUse": None}),
    ({"computerUse": None}, {"computerUse": None}),
    ({"computerUse": [1]}, {"computerUse": None}),
    ({"computerUse": {"requireConfirmation": "yes"}}, {"computerUse": "requireConfirmation"}),
    ({"computerUse": {"screenshotScale": 0.1}}, {"computerUse": "screenshotScale"}),
    ({"computerUse": {"screenshotScale": 1.5}}, {"computerUse": "screenshotScale"}),
    ({"computerUse": {"screenshotScale": "0.5"}}, {"computerUse": "screenshotScale"}),
    ({"computerUse": {"screenshotScale": True}}, {"computerUse": "screenshotScale"}),
    ({"computerUse": {"maxActionsPerTurn": 0}}, {"computerUse": "maxActionsPerTurn"}),
    ({"computerUse": {"maxActionsPerTurn": 501}}, {"computerUse": "maxActionsPerTurn"}),
    ({"computerUse": {"maxActionsPerTurn": 2.5}}, {"computerUse": "maxActionsPerTurn"}),
    ({"computerUse": {"maxActionsPerTurn": "5"}}, {"computerUse": "maxActionsPerTurn"}),
    ({"computerUse": {"maxActionsPerTurn": True}}, {"computerUse": "maxActionsPerTurn"}),
    ({"computerUse": {"allowedApps": "Terminal"}}, {"computerUse": "allowedApps"}),
    ({"computerUse": {"allowedApps": [3]}}, {"computerUse": "allowedApps"}),
    ({"computerUse": {"allowedApps": [""]}}, {"computerUse": "allowedApps"}),
    ({"computerUse": {"allowedApps": ["x" * 201]}}, {"computerUse": "allowedApps"}),
    ({"computerUse": {"allowedApps": ["Ter\u0000minal"]}}, {"computerUse": "allowedApps"}),
    ({"computerUse": {"allowedApps": ["Terminal\n"]}}, {"computerUse": "allowedApps"}),
    ({"computerUse": {"allowedApps": [f"app{i}" for i in range(101)]}}, {"computerUse": "allowedApps"}),
    ({"computerUse": {"bogus": 1}}, {"computerUse": "bogus"}),
    ({"bogus": True}, {"bogus": None}),
    ({"theme": "light", "logLevel": 7, "computerUse": {"maxActionsPerTurn": -1}},
     {"logLevel": None, "computerUse": "maxActionsPerTurn"}),
]


@pytest.mark.parametrize("body, fields", BAD_FIELDS, ids=[json.dumps(b)[:60] for b, _ in BAD_FIELDS])
def test_invalid_field_is_named_and_nothing_changes(client, body, fields):
    problem = assert_problem(client.put("/api/settings", json=body, headers=HEADERS), 400, "validation_failed")
    errors = problem["errors"]
    assert set(errors) == set(fields), errors
    for name, inner in fields.items():
        if inner is not None:
            assert inner in errors[name], errors
    assert unchanged(client)


def test_a_valid_field_beside_an_invalid_one_is_not_stored(client):
    assert_problem(client.put("/api/settings", json={"theme": "light", "sidebarCollapsed": "true"},
                              headers=HEADERS), 400)
    assert unchanged(client)


@pytest.mark.parametrize("raw, code", [
    (b"{\"theme\": \"dark\"", "malformed_json"),
    (b"{'theme': 'light'}", "malformed_json"),
    (b"[{\"theme\": \"light\"}]", "malformed_json"),
    (b"\"light\"", "malformed_json"),
    (b"null", "malformed_json"),
    (b"42", "malformed_json"),
    (b"{\"computerUse\": {\"screenshotScale\": NaN}}", "malformed_json"),
    (b"{\"computerUse\": {\"screenshotScale\": Infinity}}", "malformed_json"),
    (b"{\"computerUse\": {\"screenshotScale\": 1e999}}", "malformed_json"),
    (b"\xff\xfe{}", "malformed_json"),
    (b"{\"a\":" * 100_000 + b"1" + b"}" * 100_000, "malformed_json"),
    (b"", "body_required"),
    (b"   \n", "body_required"),
])
def test_unreadable_body_is_a_400_and_nothing_changes(client, raw, code):
    resp = client.put("/api/settings", data=raw, content_type="application/json", headers=HEADERS)
    assert_problem(resp, 400, code)
    assert unchanged(client)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
def test_wrong_content_type_is_a_415_and_nothing_changes(client, content_type):
    kwargs = {"content_type": content_type} if content_type else {}
    resp = client.put("/api/settings", data=b'{"theme": "light"}', headers=HEADERS, **kwargs)
    assert_problem(resp, 415, "unsupported_media_type")
    assert unchanged(client)


def test_body_over_the_configured_limit_is_a_413(make_app):
    client = make_app(config={"service.max-body-bytes": 512}).test_client()
    body = {"computerUse": {"allowedApps": ["a" * 100] * 10}}
    assert_problem(client.put("/api/settings", json=body, headers=HEADERS), 413, "payload_too_large")
    assert client.get("/api/settings", headers=HEADERS).json == DEFAULTS
