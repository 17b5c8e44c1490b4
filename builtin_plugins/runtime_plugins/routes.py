"""Runtime plugin endpoints: runtime, packages, deprecated market aliases, and UI assets."""
import mimetypes
import re
from pathlib import Path

from flask import Blueprint, after_this_request, jsonify, redirect, request, send_file
from werkzeug.utils import safe_join

from core.auth import no_auth
from core.errors import ApiError, problem
from core.http import current_host, query_args, request_json
from core.openapi import doc
from core.sse import stream_response

from . import package as pkg
from .schemas import (Descriptor, EnabledIn, Inspection, InvokeIn, LogEvent, LogsQuery, NativeInspectIn,
                      NativePackageIn, UninstallQuery, UploadForm, WorkerStatus)

bp = Blueprint("runtime_plugins", __name__)
INVOKE_IN = InvokeIn()  # built once: the invoke route is the hot path
packages_bp = Blueprint("plugin_packages", __name__)

ID = "<string(maxlength=64):plugin_id>"


def runtime():
    service = current_host().service("runtime_plugins")
    if service is None:
        raise ApiError(503, "service_in_setup_mode", "The plugin runtime is not running.")
    return service


# -- runtime ---------------------------------------------------------------------------

@bp.get("/api/plugin-runtime")
@doc(response=Descriptor(many=True))
def enabled_plugins():
    """Enabled plugins as InstalledPluginDescriptor."""
    return jsonify(Descriptor(many=True).dump(runtime().list(enabled_only=True)))


@bp.get("/api/plugin-runtime/status")
@doc(response=WorkerStatus(many=True))
def statuses():
    """Operational snapshots of every installed plugin's worker."""
    return jsonify(WorkerStatus(many=True).dump(runtime().statuses()))


@bp.get(f"/api/plugin-runtime/{ID}/status")
@doc(response=WorkerStatus, responses={404: "No such plugin"})
def status(plugin_id):
    """Snapshot of one plugin's worker."""
    return WorkerStatus().dump(runtime().status(plugin_id))


@bp.post(f"/api/plugin-runtime/{ID}/invoke")
@doc(body=InvokeIn, responses={404: "No such plugin", 422: "The worker answered with a JSON-RPC error",
                               502: "The worker faulted", 503: "The worker is restarting or stopped"})
def invoke(plugin_id):
    """Call a method on the plugin's worker; returns the JSON-RPC result."""
    data = INVOKE_IN.load(request_json())
    result = runtime().invoke(plugin_id, data["method"], data["params"], call_id=data["callId"])
    return jsonify(result)


@bp.post(f"/api/plugin-runtime/{ID}/invoke/<string(maxlength=128):call_id>/cancel")
@doc(responses={404: "No such plugin"})
def cancel(plugin_id, call_id):
    """Interrupt a tracked call; tears the worker down. Returns {cancelled}."""
    service = runtime()
    result = service.cancel(plugin_id, call_id)
    if not result["cancelled"] and call_id.isdigit():
        result = service.cancel(plugin_id, int(call_id))
    return jsonify(result)


@bp.get(f"/api/plugin-runtime/{ID}/logs")
@doc(query=LogsQuery, response=LogEvent(many=True))
def logs(plugin_id):
    """Recent worker log events."""
    args = query_args(LogsQuery())
    return jsonify(LogEvent(many=True).dump(runtime().logs(plugin_id, args["limit"])))


class _NewerThan:
    """A log subscription that skips the live events the replay already sent."""

    def __init__(self, subscription, last):
        self.subscription, self.last = subscription, last

    def get(self, timeout=None):
        while True:
            item = self.subscription.get(timeout=timeout)
            if not isinstance(item, tuple) or item[1]["sequence"] > self.last:
                return item

    def close(self, notify=False):
        self.subscription.close(notify)


@bp.get(f"/api/plugin-runtime/{ID}/logs/stream")
@doc(responses={404: "No such plugin"})
def logs_stream(plugin_id):
    """SSE: `: connected`, then recent worker log events replayed as `log` frames, then new ones live."""
    host = current_host()
    ring = runtime().log_ring(plugin_id)
    subscription = host.events.subscribe(ring.channel)  # subscribe first so nothing falls between
    replay = [("log", e, e["sequence"]) for e in ring.recent()]
    return stream_response(subscription, heartbeat=host.config["notifications.heartbeat-seconds"],
                           replay=replay)


# -- UI assets (no token) --------------------------------------------------------------

def _csp(plugin_id):
    port = request.environ.get("SERVER_PORT", "")
    tree = f"/plugin-runtime/{plugin_id}/"
    scripts = " ".join(f"http://{h}:{port}{tree}" for h in ("127.0.0.1", "localhost"))
    return ("default-src 'none'; "
            f"script-src {scripts}; "
            "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; "
            "connect-src 'self'; media-src 'self' blob:; "
            "base-uri 'none'; form-action 'self'; object-src 'none'; frame-ancestors 'self'")


@bp.get(f"/plugin-runtime/{ID}/")
@bp.get(f"/plugin-runtime/{ID}/<path:asset>")
@no_auth
def ui_asset(plugin_id, asset=None):
    """A static UI asset of an enabled plugin, under a strict content security policy."""
    service = runtime()
    folder = service.ui_folder(plugin_id)
    if folder is None:
        raise ApiError(404, "not_found", "No such plugin UI.")
    if asset is None:
        # A redirect, not the entry itself: relative links in the page resolve against its own folder.
        entry = service.manifest(plugin_id)["ui"]["entry"]
        return redirect(f"/plugin-runtime/{plugin_id}/{entry}", code=302)
    install = service.install_dir(plugin_id).resolve()
    target = safe_join(str(install), asset)
    if target is None:
        raise ApiError(404, "not_found", "No such asset.")
    try:
        path = Path(target).resolve()
        found = path.is_relative_to(folder.resolve()) and path.is_file()
    except (ValueError, OSError):  # a NUL byte, a name too long for the file system
        found = False
    if not found:
        raise ApiError(404, "not_found", "No such asset.")
    mimetype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    resp = send_file(path, mimetype=mimetype, max_age=0, conditional=True)
    resp.headers["Content-Security-Policy"] = _csp(plugin_id)
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
    resp.headers["Cross-Origin-Resource-Policy"] = "same-origin"
    return resp


# -- packages --------------------------------------------------------------------------

def _upload():
    request.max_content_length = pkg.MAX_PACKAGE_BYTES + 1024 * 1024
    if request.mimetype != "multipart/form-data":
        raise ApiError(415, "unsupported_media_type", "Upload the package as multipart/form-data.")
    form = UploadForm().load(request.form.to_dict())
    upload = request.files.get("file")
    if upload is None:
        raise ApiError(400, "validation_failed", "The multipart part `file` is required.",
                       errors={"file": ["Missing data for required field."]})
    sidecar = request.files.get("sha256")
    sha256 = form["sha256"]
    if sidecar is not None:
        # A checksum file as `sha256sum` writes it: the hex digest, then optionally the file name.
        words = sidecar.read(4096).decode("ascii", "replace").split()
        if not words or not re.fullmatch(r"[0-9a-fA-F]{64}", words[0]):
            raise ApiError(400, "validation_failed", "The sha256 part is not a SHA-256 checksum.",
                           errors={"sha256": ["Not a SHA-256 hex digest."]})
        sha256 = words[0]
    return upload.read(pkg.MAX_PACKAGE_BYTES + 1), sha256, form["confirmPermissions"]


def _native_bytes(path):
    p = Path(path).expanduser()
    if not p.is_absolute() or not p.is_file():
        raise ApiError(400, "validation_failed", "The path is not an existing file.",
                       errors={"path": ["Not an existing file."]})
    if p.stat().st_size > pkg.MAX_PACKAGE_BYTES:
        raise ApiError(400, "invalid_package", "the package is too large")
    return p.read_bytes()


@packages_bp.post("/api/plugin-packages/upload")
@doc(response=Inspection, status=201, content_type="multipart/form-data",
     responses={400: "Invalid package", 422: "The new version failed its health check"})
def upload():
    """Install or update a package (multipart `file`, optional `sha256`, `confirmPermissions`)."""
    data, sha256, confirm = _upload()
    return Inspection().dump(runtime().install(data, sha256, confirm)), 201


@packages_bp.post("/api/plugin-packages/upload-native")
@doc(body=NativePackageIn, response=Inspection, status=201)
def upload_native():
    """Install or update from a local package path (desktop only)."""
    data = NativePackageIn().load(request_json())
    result = runtime().install(_native_bytes(data["path"]), data["sha256"], data["confirmPermissions"])
    return Inspection().dump(result), 201


@packages_bp.post("/api/plugin-packages/inspect")
@doc(response=Inspection, content_type="multipart/form-data")
def inspect():
    """Read an uploaded package's manifest without installing."""
    data, sha256, _ = _upload()
    return Inspection().dump(runtime().inspect(data, sha256))


@packages_bp.post("/api/plugin-packages/inspect-native")
@doc(body=NativeInspectIn, response=Inspection)
def inspect_native():
    """Read a local package's manifest without installing (desktop only)."""
    data = NativeInspectIn().load(request_json())
    return Inspection().dump(runtime().inspect(_native_bytes(data["path"])))


@packages_bp.patch(f"/api/plugin-packages/{ID}/enabled")
@doc(body=EnabledIn, response=Descriptor)
def set_enabled(plugin_id):
    """Enable (worker spawns lazily) or disable (worker stops now)."""
    data = EnabledIn().load(request_json())
    return Descriptor().dump(runtime().set_enabled(plugin_id, data["enabled"]))


@packages_bp.delete(f"/api/plugin-packages/{ID}")
@doc(query=UninstallQuery)
def uninstall(plugin_id):
    """Uninstall; `deleteData` chooses whether the plugin's data is deleted or retained."""
    args = query_args(UninstallQuery())
    return jsonify(runtime().uninstall(plugin_id, args["deleteData"]))


# -- deprecated plugin-market aliases ----------------------------------------------------

def _deprecated(view, *args, **kwargs):
    @after_this_request
    def mark(resp):  # error answers of the forwarded view carry the header too
        resp.headers["Deprecation"] = "true"
        resp.headers["Link"] = '</api/plugin-packages>; rel="successor-version"'
        return resp

    return view(*args, **kwargs)


@packages_bp.post("/api/plugin-market/upload")
def market_upload():
    """Deprecated: forwards to /api/plugin-packages/upload."""
    return _deprecated(upload)


@packages_bp.post("/api/plugin-market/upload-native")
def market_upload_native():
    """Deprecated: forwards to /api/plugin-packages/upload-native."""
    return _deprecated(upload_native)


@packages_bp.post("/api/plugin-market/inspect")
def market_inspect():
    """Deprecated: forwards to /api/plugin-packages/inspect."""
    return _deprecated(inspect)


@packages_bp.post("/api/plugin-market/inspect-native")
def market_inspect_native():
    """Deprecated: forwards to /api/plugin-packages/inspect-native."""
    return _deprecated(inspect_native)


@packages_bp.patch(f"/api/plugin-market/{ID}/enabled")
def market_enabled(plugin_id):
    """Deprecated: forwards to /api/plugin-packages/{id}/enabled."""
    return _deprecated(set_enabled, plugin_id)


@packages_bp.delete(f"/api/plugin-market/{ID}")
def market_uninstall(plugin_id):
    """Deprecated: forwards to /api/plugin-packages/{id}."""
    return _deprecated(uninstall, plugin_id)


def _gone(replacement):
    resp = problem(410, "gone", f"The plugin market catalog is retired; use {replacement}.",
                   replacement=replacement)
    resp.headers["Deprecation"] = "true"
    return resp


@packages_bp.get("/api/plugin-market")
def market_catalog():
    """Gone: use /api/plugin-store/catalog."""
    return _gone("/api/plugin-store/catalog")


@packages_bp.post(f"/api/plugin-market/{ID}/install")
def market_install(plugin_id):
    """Gone: use /api/plugin-store/{uid}/install."""
    return _gone("/api/plugin-store/{uid}/install")


@packages_bp.post(f"/api/plugin-market/{ID}/update")
def market_update(plugin_id):
    """Gone: use /api/plugin-store/{uid}/update."""
    return _gone("/api/plugin-store/{uid}/update")
