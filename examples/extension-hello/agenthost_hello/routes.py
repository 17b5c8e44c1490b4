"""GET /greet (mounted at /api/ext/hello/greet): parse the query, greet, answer JSON."""
from flask import Blueprint, jsonify, request
from marshmallow import EXCLUDE, Schema, fields, validate

from core.openapi import doc

from .greeting import MAX_NAME, greet

bp = Blueprint("hello", __name__)


class GreetQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    name = fields.String(load_default="World", validate=validate.Length(1, MAX_NAME))


class Greeting(Schema):
    greeting = fields.String()


@bp.get("/greet")
@doc(query=GreetQuery, response=Greeting, tags=["extension:hello"])
def greet_route():
    """Greet ``?name=`` (default World). A bad name answers a 400 problem with per-field errors."""
    # A marshmallow ValidationError becomes the host's 400 problem with `errors`.
    args = GreetQuery().load(request.args.to_dict())
    return jsonify(Greeting().dump({"greeting": greet(args["name"])}))
