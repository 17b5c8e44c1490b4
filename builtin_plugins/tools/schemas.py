"""Tool catalog schemas."""
from marshmallow import Schema, fields


class ToolOut(Schema):
    name = fields.String()
    description = fields.String()
    parameters = fields.Dict()
    source = fields.String()
    retrySafe = fields.Boolean()
