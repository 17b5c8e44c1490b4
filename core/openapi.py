"""The OpenAPI 3.1 document, generated from the app's routes and their marshmallow schemas."""
import re

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin

from .auth import TOKEN_HEADER

_RULE_ARG = re.compile(r"<(?:[a-z_]+(?:\([^)]*\))?:)?([A-Za-z0-9_]+)>")


def doc(*, summary=None, body=None, query=None, response=None, status=200, tags=None,
        responses=None, content_type=None):
    """Describe a view for the OpenAPI document (marshmallow schema classes or instances)."""

    def mark(view):
        view._agenthost_doc = {
            "summary": summary, "body": body, "query": query, "response": response,
            "status": status, "tags": tags, "responses": responses or {},
            "content_type": content_type,
        }
        return view

    return mark


def _schema_ref(spec, schema):
    if schema is None:
        return None
    if isinstance(schema, dict):
        return schema
    cls = schema if isinstance(schema, type) else type(schema)
    many = not isinstance(schema, type) and getattr(schema, "many", False)
    name = cls.__name__.removesuffix("Schema")
    if name not in spec.components.schemas:
        spec.components.schema(name, schema=cls)
    ref = {"$ref": f"#/components/schemas/{name}"}
    return {"type": "array", "items": ref} if many else ref


def build(app, version="0.1.0"):
    spec = APISpec(
        title="agenthost", version=version, openapi_version="3.1.0",
        plugins=[MarshmallowPlugin()],
        info={"description": "Local agent and plugin host: REST and SSE over loopback."},
    )
    spec.components.security_scheme("serviceToken", {"type": "apiKey", "in": "header", "name": TOKEN_HEADER})
    spec.components.schema("Problem", {
        "type": "object",
        "required": ["type", "title", "status", "detail", "code"],
        "properties": {
            "type": {"type": "string"}, "title": {"type": "string"},
            "status": {"type": "integer"}, "detail": {"type": "string"},
            "code": {"type": "string"},
            "errors": {"type": "object", "description": "per-field messages"},
        },
    })
    problem = {"content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}

    paths = {}
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if rule.endpoint == "static":
            continue
        view = app.view_functions[rule.endpoint]
        path = _RULE_ARG.sub(r"{\1}", rule.rule)
        params = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                  for name in _RULE_ARG.findall(rule.rule)]
        meta = getattr(view, "_agenthost_doc", {}) or {}
        auth = getattr(view, "_agenthost_auth", "token")
        if path.startswith(("/api/health", "/api/setup", "/plugin-runtime/")):
            auth = "none"
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            op = {
                "operationId": f"{rule.endpoint}.{method.lower()}",
                "summary": meta.get("summary") or (view.__doc__ or rule.endpoint).strip().splitlines()[0],
                "tags": meta.get("tags") or [path.split("/")[2] if path.startswith("/api/") else "plugin-runtime"],
                "responses": {},
            }
            if params:
                op["parameters"] = list(params)
            if meta.get("query") is not None:
                op["parameters"] = op.get("parameters", []) + [{"in": "query", "schema": meta["query"]}]
            if meta.get("body") is not None and method in ("POST", "PUT", "PATCH", "DELETE"):
                op["requestBody"] = {"required": True, "content": {
                    meta.get("content_type") or "application/json": {"schema": _schema_ref(spec, meta["body"])}}}
            ok = {"description": "Success"}
            if meta.get("response") is not None:
                ok["content"] = {"application/json": {"schema": _schema_ref(spec, meta["response"])}}
            op["responses"][str(meta.get("status", 200))] = ok
            for code, text in (meta.get("responses") or {}).items():
                op["responses"][str(code)] = {"description": text, **problem}
            op["responses"].setdefault("400", {"description": "Invalid input", **problem})
            if auth == "token":
                op["security"] = [{"serviceToken": []}]
                op["responses"].setdefault("401", {"description": "Missing or wrong token", **problem})
            elif auth == "ticket":
                op["parameters"] = op.get("parameters", []) + [
                    {"name": "ticket", "in": "query", "required": True, "schema": {"type": "string"},
                     "description": "One-time stream ticket"}]
                op["responses"].setdefault("403", {"description": "Bad, used or expired ticket", **problem})
            paths.setdefault(path, {})[method.lower()] = op
    for path, operations in paths.items():
        spec.path(path=path, operations=operations)
    return spec.to_dict()
