"""The OpenAPI 3.1 document, generated from the app's routes and their marshmallow schemas."""
import re

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin

from .auth import TOKEN_HEADER, bypassed, view_auth

_RULE_ARG = re.compile(r"<(?:([a-z_]+)(?:\([^)]*\))?:)?([A-Za-z0-9_]+)>")

# werkzeug converter -> the JSON Schema of its value
_CONVERTER_SCHEMAS = {
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "uuid": {"type": "string", "format": "uuid"},
}


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


def _component_name(spec, cls, names):
    """A component name for ``cls``; two areas' classes with one name both keep their own."""
    if cls in names:
        return names[cls]
    base = cls.__name__.removesuffix("Schema")
    name = base
    if name in spec.components.schemas:
        area = cls.__module__.split(".")[-2] if cls.__module__.count(".") else cls.__module__
        name = "".join(part.title() for part in area.split("_")) + base
        n = 2
        while name in spec.components.schemas:
            name, n = f"{base}{n}", n + 1
    spec.components.schema(name, schema=cls)
    names[cls] = name
    return name


def _schema_ref(spec, schema, names):
    if schema is None:
        return None
    if isinstance(schema, dict):
        return schema
    cls = schema if isinstance(schema, type) else type(schema)
    many = not isinstance(schema, type) and getattr(schema, "many", False)
    ref = {"$ref": f"#/components/schemas/{_component_name(spec, cls, names)}"}
    return {"type": "array", "items": ref} if many else ref


def path_of(rule):
    """The OpenAPI path of a werkzeug rule: ``<int:id>`` becomes ``{id}``."""
    return _RULE_ARG.sub(r"{\2}", rule)


def _summary(view, endpoint):
    lines = (view.__doc__ or "").strip().splitlines()
    return lines[0] if lines else endpoint


def _version():
    try:
        from importlib.metadata import version
        return version("agenthost")
    except Exception:  # a source tree without installed metadata
        return "0.0.0"


PROBLEM_SCHEMA = {
    "type": "object",
    "required": ["type", "title", "status", "detail", "code"],
    "properties": {
        "type": {"type": "string"}, "title": {"type": "string"},
        "status": {"type": "integer"}, "detail": {"type": "string"},
        "code": {"type": "string"},
        "errors": {"type": "object", "description": "per-field messages"},
    },
}
PROBLEM = {"content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}
TICKET_PARAM = {"name": "ticket", "in": "query", "required": True, "schema": {"type": "string"},
                "description": "One-time stream ticket"}


def _tag(path):
    parts = path.split("/")
    if path.startswith("/api/ext/") and len(parts) > 3:
        return f"ext/{parts[3]}"
    return parts[2] if path.startswith("/api/") else "plugin-runtime"


def _operation(spec, names, rule, view, method, op_id):
    meta = getattr(view, "_agenthost_doc", {}) or {}
    auth = "none" if bypassed(rule.rule) else view_auth(view)
    path = path_of(rule.rule)
    params = [{"name": name, "in": "path", "required": True,
               "schema": dict(_CONVERTER_SCHEMAS.get(converter, {"type": "string"}))}
              for converter, name in _RULE_ARG.findall(rule.rule)]
    if meta.get("query") is not None:
        params.append({"in": "query", "schema": meta["query"]})
    if auth == "ticket":
        params.append(dict(TICKET_PARAM))
    op = {
        "operationId": op_id,
        "summary": meta.get("summary") or _summary(view, rule.endpoint),
        "tags": meta.get("tags") or [_tag(path)],
        "responses": {},
    }
    if params:
        op["parameters"] = params
    responses = op["responses"]
    if meta.get("body") is not None and method in ("POST", "PUT", "PATCH", "DELETE"):
        media = meta.get("content_type") or "application/json"
        op["requestBody"] = {"required": True,
                             "content": {media: {"schema": _schema_ref(spec, meta["body"], names)}}}
    ok = {"description": "Success"}
    if meta.get("response") is not None:
        ok["content"] = {"application/json": {"schema": _schema_ref(spec, meta["response"], names)}}
    responses[str(meta.get("status", 200))] = ok
    for code, text in (meta.get("responses") or {}).items():
        responses[str(code)] = {"description": text, **PROBLEM}
    responses.setdefault("400", {"description": "Invalid input", **PROBLEM})
    if "requestBody" in op:
        responses.setdefault("413", {"description": "Body too large", **PROBLEM})
        responses.setdefault("415", {"description": "Unsupported media type", **PROBLEM})
    if auth == "token":
        op["security"] = [{"serviceToken": []}]
        responses.setdefault("401", {"description": "Missing or wrong token", **PROBLEM})
    elif auth == "ticket":
        responses.setdefault("403", {"description": "Bad, used or expired ticket", **PROBLEM})
    return op


def build(app, version=None):
    """The document of every route mounted on ``app`` (builtin areas and extensions alike)."""
    spec = APISpec(
        title="agenthost", version=version or _version(), openapi_version="3.1.0",
        plugins=[MarshmallowPlugin()],
        info={"description": "Local agent and plugin host: REST and SSE over loopback."},
    )
    spec.components.security_scheme("serviceToken", {"type": "apiKey", "in": "header", "name": TOKEN_HEADER})
    spec.components.schema("Problem", PROBLEM_SCHEMA)

    paths = {}
    names = {}  # schema class -> component name
    op_ids = set()  # one view may serve several rules; each operation still needs its own id
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if rule.endpoint == "static":
            continue
        view = app.view_functions[rule.endpoint]
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            op_id, n = f"{rule.endpoint}.{method.lower()}", 2
            while op_id in op_ids:
                op_id, n = f"{rule.endpoint}.{method.lower()}.{n}", n + 1
            op_ids.add(op_id)
            op = _operation(spec, names, rule, view, method, op_id)
            paths.setdefault(path_of(rule.rule), {})[method.lower()] = op
    for path, operations in paths.items():
        spec.path(path=path, operations=operations)
    return spec.to_dict()
