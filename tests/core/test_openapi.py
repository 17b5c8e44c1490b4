"""The OpenAPI 3.1 document: behind the token, valid, and covering every mounted route."""
import json
import subprocess
import sys

import pytest
import requests
from flask import Blueprint
from marshmallow import fields

from core import datasource as ds_file
from core.auth import ticket_auth
from core.openapi import doc, path_of
from core.schemas import StrictSchema
from hookspecs import hookimpl
from tests.conftest import HEADERS
from tests.core.problems import assert_problem
from tests.core.shared_app import module_app

SETTINGS_FIELDS = {"theme", "language", "sidebarCollapsed", "logLevel", "computerUseEnabled", "computerUse"}


class WidgetIn(StrictSchema):
    name = fields.String(required=True)
    size = fields.Integer()


class Settings(StrictSchema):
    """Same class name as the settings area's schema: both must keep their own component."""

    widgetTheme = fields.String()


class Widgets:
    """A test extension with documented routes, a path parameter and a ticket view."""

    __name__ = "widgets"

    @hookimpl
    def register_routes(self, host):
        bp = Blueprint("widgets", __name__)

        @bp.post("/widgets")
        @doc(body=WidgetIn, response=WidgetIn, status=201)
        def create_widget():
            """Create a widget."""
            return {}, 201

        @bp.get("/widgets/<int:widget_id>")
        @doc(response=Settings)
        def get_widget(widget_id):
            return {}

        @bp.route("/widgets/<widget_id>/parts/<path:part>", methods=["GET", "DELETE"])
        def widget_part(widget_id, part):
            """A part of a widget."""
            return {}

        @bp.get("/watch")
        @ticket_auth
        def watch():
            """Watch widgets."""
            return {}

        return [bp]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    yield from module_app(tmp_path_factory, plugins=[Widgets()])


@pytest.fixture(scope="module")
def document(app):
    resp = app.test_client().get("/api/openapi.json", headers=HEADERS)
    assert resp.status_code == 200
    return resp.json


def routes_of(app):
    pairs = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            pairs.add((path_of(rule.rule), method.lower()))
    return pairs


def operations_of(document):
    return {(path, method) for path, ops in document["paths"].items() for method in ops}


def resolve(document, schema):
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        schema = document["components"]["schemas"][name]
    return schema


def test_openapi_needs_the_token(app):
    client = app.test_client()
    assert_problem(client.get("/api/openapi.json"), 401, "invalid_token")
    assert_problem(client.get("/api/openapi.json", headers={"X-Service-Token": "nope"}), 401, "invalid_token")


def test_document_is_openapi_3_1(document):
    assert document["openapi"].startswith("3.1")
    assert document["info"]["title"] and document["info"]["version"]


def test_document_passes_the_openapi_validator(document):
    from openapi_spec_validator import validate

    validate(document)  # raises with the first problem found


def test_document_covers_every_registered_route(app, document):
    expected = routes_of(app)
    assert ("/api/ext/widgets/widgets/{widget_id}", "get") in expected
    assert operations_of(document) == expected


def test_path_parameters_are_named_and_typed(document):
    get = document["paths"]["/api/ext/widgets/widgets/{widget_id}"]["get"]
    assert get["parameters"] == [{"name": "widget_id", "in": "path", "required": True,
                                  "schema": {"type": "integer"}}]
    part = document["paths"]["/api/ext/widgets/widgets/{widget_id}/parts/{part}"]
    for op in part.values():
        assert [p["name"] for p in op["parameters"]] == ["widget_id", "part"]


def test_settings_put_body_references_the_settings_schema(document):
    put = document["paths"]["/api/settings"]["put"]
    schema = resolve(document, put["requestBody"]["content"]["application/json"]["schema"])
    assert set(schema["properties"]) == SETTINGS_FIELDS
    assert schema["properties"]["theme"]["enum"] == ["light", "dark", "system"]
    inner = resolve(document, schema["properties"]["computerUse"])
    assert {"requireConfirmation", "screenshotScale", "maxActionsPerTurn", "allowedApps"} <= set(inner["properties"])
    ok = resolve(document, document["paths"]["/api/settings"]["get"]["responses"]["200"]["content"]
                 ["application/json"]["schema"])
    assert set(ok["properties"]) == SETTINGS_FIELDS


def test_extension_bodies_and_responses_are_documented(document):
    post = document["paths"]["/api/ext/widgets/widgets"]["post"]
    body = resolve(document, post["requestBody"]["content"]["application/json"]["schema"])
    assert set(body["properties"]) == {"name", "size"}
    assert body["required"] == ["name"]
    assert "201" in post["responses"]
    assert post["summary"] == "Create a widget."


def test_same_named_schemas_of_two_areas_both_survive(document):
    ext = resolve(document, document["paths"]["/api/ext/widgets/widgets/{widget_id}"]["get"]
                  ["responses"]["200"]["content"]["application/json"]["schema"])
    ours = resolve(document, document["paths"]["/api/settings"]["get"]["responses"]["200"]
                   ["content"]["application/json"]["schema"])
    assert set(ext["properties"]) == {"widgetTheme"}
    assert set(ours["properties"]) == SETTINGS_FIELDS


def test_security_follows_each_route_s_authentication(document):
    assert document["components"]["securitySchemes"]["serviceToken"] == {
        "type": "apiKey", "in": "header", "name": "X-Service-Token"}
    paths = document["paths"]
    assert paths["/api/settings"]["get"]["security"] == [{"serviceToken": []}]
    assert "401" in paths["/api/settings"]["get"]["responses"]
    assert "security" not in paths["/api/health"]["get"]
    watch = paths["/api/ext/widgets/watch"]["get"]
    assert "security" not in watch
    assert {"name": "ticket", "in": "query", "required": True, "schema": {"type": "string"},
            "description": "One-time stream ticket"} in watch["parameters"]


def test_error_responses_are_problems(document):
    problem = document["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail", "code"}
    unauthorized = document["paths"]["/api/settings"]["put"]["responses"]["401"]
    assert unauthorized["content"]["application/problem+json"]["schema"] == {"$ref": "#/components/schemas/Problem"}


def test_operation_ids_are_unique(document):
    ids = [op["operationId"] for ops in document["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))


def test_cli_prints_the_same_paths_as_the_served_document(serve_process, tmp_path, fresh_datasource):
    # Both sides are fresh processes, so both see the same installed extensions.
    data_dir = tmp_path / "home"
    ds_file.write(data_dir, fresh_datasource("sqlite"))
    host = serve_process(data_dir)
    served = requests.get(host.url + "/api/openapi.json", headers=host.headers, timeout=20).json()
    out = subprocess.run([sys.executable, "-m", "core", "openapi", f"--data-dir={data_dir}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert printed["openapi"].startswith("3.1")
    assert ("/api/settings", "put") in operations_of(printed)
    assert operations_of(printed) == operations_of(served)
    assert printed["components"]["schemas"].keys() == served["components"]["schemas"].keys()
