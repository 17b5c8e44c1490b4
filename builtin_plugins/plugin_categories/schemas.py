"""Plugin category schemas."""
from marshmallow import Schema, fields


class Category(Schema):
    id = fields.String()
    labelKey = fields.String()
    icon = fields.String()
