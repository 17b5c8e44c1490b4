"""Plugin categories: the vocabulary of {id, labelKey, icon}, behind the token."""
import re

from tests.conftest import HEADERS
from tests.core.problems import assert_problem


def test_categories_are_id_label_key_icon(client):
    resp = client.get("/api/plugin-categories")
    assert resp.status_code == 200
    assert resp.mimetype == "application/json"
    categories = resp.json
    assert isinstance(categories, list) and len(categories) >= 5
    for category in categories:
        assert set(category) == {"id", "labelKey", "icon"}, category
        assert re.fullmatch(r"[a-z][a-z0-9-]*", category["id"]), category
        assert category["labelKey"] and category["icon"]
        assert all(isinstance(v, str) for v in category.values())


def test_category_ids_and_label_keys_are_unique(client):
    categories = client.get("/api/plugin-categories").json
    ids = [c["id"] for c in categories]
    assert len(ids) == len(set(ids))
    label_keys = [c["labelKey"] for c in categories]
    assert len(label_keys) == len(set(label_keys))


def test_a_catch_all_category_exists(client):
    # A plugin whose manifest names no known category still needs somewhere to go.
    assert "other" in {c["id"] for c in client.get("/api/plugin-categories").json}


def test_categories_need_the_token(app):
    client = app.test_client()
    assert_problem(client.get("/api/plugin-categories"), 401, "invalid_token")
    assert_problem(client.get("/api/plugin-categories", headers={"X-Service-Token": HEADERS["X-Service-Token"][:-1]}),
                   401, "invalid_token")


def test_categories_are_read_only(client):
    resp = client.post("/api/plugin-categories", json={"id": "x", "labelKey": "y", "icon": "z"})
    body = assert_problem(resp, 405, "method_not_allowed")
    assert body["status"] == 405
    assert "GET" in resp.headers["Allow"]
    assert "x" not in {c["id"] for c in client.get("/api/plugin-categories").json}
