"""Plugin file endpoints: hand files and folders to a runtime plugin as FileRefs, and export them as zips."""
from urllib.parse import quote

from flask import Blueprint, Response, request

from core.errors import ApiError
from core.http import current_host, request_json
from core.openapi import doc

from .file_schemas import FileRefOut, NativeFileIn, OutputIn, UploadDirectoryForm
from .files import READ, READ_WRITE, WRITE

files_bp = Blueprint("plugin_files", __name__)

BASE = "/api/plugin-runtime/<string(maxlength=64):plugin_id>/files"
UPLOAD_BODY = {"type": "object", "required": ["file"],
               "properties": {"file": {"type": "string", "format": "binary"}}}
DIRECTORY_BODY = {"type": "object", "required": ["files", "paths[]"], "properties": {
    "files": {"type": "array", "items": {"type": "string", "format": "binary"}},
    "paths[]": {"type": "array", "items": {"type": "string"}, "description": "Relative path of each file, same order"},
    "access": {"type": "string", "enum": ["read", "read-write"], "default": "read"}}}
GATED = {403: "The plugin's manifest does not declare the permission", 404: "No such plugin"}


def files():
    service = current_host().service("plugin_files")
    if service is None:
        raise ApiError(503, "service_in_setup_mode", "The plugin runtime is not running.")
    return service


def _multipart(service, parts=16):
    """Lift the app's JSON-sized body limit for this upload, and insist on multipart."""
    request.max_content_length = service.max_upload_bytes
    request.max_form_parts = parts
    if request.mimetype != "multipart/form-data":
        raise ApiError(415, "unsupported_media_type", "Send the upload as multipart/form-data.")


def _missing_part(name):
    return ApiError(400, "validation_failed", f"The multipart part `{name}` is required.",
                    errors={name: ["Missing data for required field."]})


@files_bp.post(f"{BASE}/upload")
@doc(body=UPLOAD_BODY, response=FileRefOut, status=201, content_type="multipart/form-data",
     responses={**GATED, 413: "The upload is over the size limit"})
def upload(plugin_id):
    """Snapshot one uploaded file (multipart `file`) as a read-only FileRef. Needs files.read."""
    service = files()
    service.require(plugin_id, READ)
    _multipart(service)
    part = request.files.get("file")
    if part is None:
        raise _missing_part("file")
    return FileRefOut().dump(service.upload_file(plugin_id, part.stream, part.filename)), 201


@files_bp.post(f"{BASE}/upload-directory")
@doc(body=DIRECTORY_BODY, response=FileRefOut, status=201, content_type="multipart/form-data",
     responses={**GATED, 413: "The upload is over the size limit"})
def upload_directory(plugin_id):
    """Snapshot an uploaded folder (`files` with `paths[]`, optional `access`) as a directory FileRef.

    Needs files.read, and files.write too for access=read-write.
    """
    service = files()
    service.require(plugin_id, READ)
    _multipart(service, parts=2 * service.max_directory_files + 16)
    form = {"paths[]": request.form.getlist("paths[]") or request.form.getlist("paths")}
    if "access" in request.form:
        form["access"] = request.form["access"]
    data = UploadDirectoryForm().load(form)
    if data["access"] == READ_WRITE:
        service.require(plugin_id, WRITE)
    parts = request.files.getlist("files")
    if not parts:
        raise _missing_part("files")
    if len(parts) != len(data["paths"]):
        raise ApiError(400, "validation_failed", "Send one `paths[]` entry per `files` part, in the same order.",
                       errors={"files": [f"{len(parts)} files for {len(data['paths'])} paths."]})
    if len(parts) > service.max_directory_files:
        raise ApiError(400, "validation_failed", "The folder has too many files.",
                       errors={"files": [f"At most {service.max_directory_files} files."]})
    entries = [(path, part.stream) for path, part in zip(data["paths"], parts)]
    return FileRefOut().dump(service.upload_directory(plugin_id, entries, data["access"])), 201


@files_bp.post(f"{BASE}/native")
@doc(body=NativeFileIn, response=FileRefOut, status=201, responses=GATED)
def native(plugin_id):
    """Wrap an existing local file or folder as a FileRef, in place (desktop only).

    Needs files.read, and files.write too for access=read-write.
    """
    service = files()
    service.require(plugin_id, READ)
    data = NativeFileIn().load(request_json())
    if data["access"] == READ_WRITE:
        service.require(plugin_id, WRITE)
    return FileRefOut().dump(service.wrap_native(plugin_id, data["path"], data["kind"], data["access"])), 201


@files_bp.post(f"{BASE}/output")
@doc(body=OutputIn, response=FileRefOut, status=201, responses=GATED)
def output(plugin_id):
    """Allocate a fresh writable folder as a read-write directory FileRef. Needs files.write."""
    service = files()
    service.require(plugin_id, WRITE)
    data = OutputIn().load(request_json(allow_empty=True))
    return FileRefOut().dump(service.allocate_output(plugin_id, data["name"])), 201


@files_bp.get(f"{BASE}/export/<string(maxlength=64):ref>")
@doc(responses={**GATED, 400: "The FileRef is a file", 410: "The folder no longer exists"})
def export(plugin_id, ref):
    """Stream a zip of a granted folder. Needs files.write; another plugin's ref answers 403."""
    service = files()
    service.require(plugin_id, WRITE)
    name, chunks = service.export(plugin_id, ref)
    ascii_name = name.encode("ascii", "replace").decode("ascii").replace('"', "_").replace("?", "_")
    disposition = f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}"
    return Response(chunks, mimetype="application/zip",
                    headers={"Content-Disposition": disposition, "Cache-Control": "no-store",
                             "X-Content-Type-Options": "nosniff"})
