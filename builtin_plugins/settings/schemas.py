"""Settings schemas: every field validated; PUT is partial."""
from marshmallow import fields, validate

from core.schemas import StrictBoolean, StrictFloat, StrictSchema

THEMES = ("light", "dark", "system")
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR")
# Patterns end in (?!\n)$: Python's "$" alone also matches before a trailing newline, and
# "\Z" would not mean the same in the published OpenAPI document (ECMA-262 patterns).


class ComputerUse(StrictSchema):
    requireConfirmation = StrictBoolean()
    screenshotScale = StrictFloat(validate=validate.Range(0.25, 1.0))
    maxActionsPerTurn = fields.Integer(strict=True, validate=validate.Range(1, 500))
    allowedApps = fields.List(
        fields.String(validate=[validate.Length(1, 200),
                                validate.Regexp(r"^[^\x00-\x1f\x7f]+(?!\n)$",
                                                error="Must not contain control characters.")]),
        validate=validate.Length(max=100))


class Settings(StrictSchema):
    theme = fields.String(validate=validate.OneOf(THEMES))
    language = fields.String(validate=[validate.Length(2, 35),
                                       validate.Regexp(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*(?!\n)$",
                                                       error="Not a BCP 47 language tag.")])
    sidebarCollapsed = StrictBoolean()
    logLevel = fields.String(validate=validate.OneOf(LOG_LEVELS))
    computerUseEnabled = StrictBoolean()
    computerUse = fields.Nested(ComputerUse)


class DatabaseReset(StrictSchema):
    mode = fields.String()
    backup = fields.Boolean()
