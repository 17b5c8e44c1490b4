"""Schemas of the plugin file endpoints (FileRef in and out)."""
from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate, validates_schema

from core.schemas import StrictSchema

from .files import DIRECTORY, FILE, MAX_RELATIVE_PATH, READ_ONLY, READ_WRITE, relative_path_error, tree_conflicts

ACCESS = validate.OneOf([READ_ONLY, READ_WRITE])


class RelativePath(fields.String):
    """A file's place inside an uploaded folder: relative, / separated, no traversal."""

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs)
        error = relative_path_error(value)
        if error:
            raise ValidationError(error)
        return value


class UploadDirectoryForm(Schema):
    """The text parts of an upload-directory request (the files travel as ``files`` parts)."""

    class Meta:
        unknown = EXCLUDE

    access = fields.String(load_default=READ_ONLY, validate=ACCESS)
    paths = fields.List(RelativePath(validate=validate.Length(1, MAX_RELATIVE_PATH)), data_key="paths[]",
                        required=True, validate=validate.Length(min=1))

    @validates_schema
    def _tree(self, data, **kwargs):
        problems = tree_conflicts(data["paths"])
        if problems:
            raise ValidationError({"paths[]": {i: [m] for i, m in problems.items()}})


class NativeFileIn(StrictSchema):
    path = fields.String(required=True, validate=validate.Length(1, 4096))
    kind = fields.String(required=True, validate=validate.OneOf([FILE, DIRECTORY]))
    access = fields.String(load_default=READ_ONLY, validate=ACCESS)


class OutputIn(StrictSchema):
    name = fields.String(load_default=None, allow_none=True, validate=validate.Length(1, 200))


class FileRefOut(Schema):
    """A FileRef as the shell sees it; the host path is told to the plugin's worker only."""

    ref = fields.String()
    pluginId = fields.String()
    kind = fields.String()
    access = fields.String()
    source = fields.String()
    name = fields.String()
    size = fields.Integer(allow_none=True)
    createdAt = fields.String()
