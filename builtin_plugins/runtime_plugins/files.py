"""Files granted to runtime plugins (FileRefs): snapshot uploads, native wraps, output folders and zip export."""
import logging
import os
import secrets
import shutil
import stat
import time
import unicodedata
import zipfile
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from core.db import isoformat, utcnow
from core.errors import ApiError, NotFound

from .models import FileRef, InstalledPlugin

log = logging.getLogger("agenthost.runtime_plugins.files")

READ, WRITE = "files.read", "files.write"
FILE, DIRECTORY = "file", "directory"
READ_ONLY, READ_WRITE = "read", "read-write"

LIST_METHOD = "host/files/list"                   # worker -> host request
GRANTS_NOTIFICATION = "notifications/agenthost/files"  # host -> worker, after each new grant

MAX_UPLOAD_BYTES = 256 * 1024 * 1024  # per request
MAX_DIRECTORY_FILES = 10_000
MAX_RELATIVE_PATH = 1024
MAX_NAME = 200
_CHUNK = 64 * 1024
_PARTIAL = ".partial-"


def new_ref():
    """An opaque FileRef id: 192 random bits, URL-safe."""
    return secrets.token_urlsafe(24)


def safe_filename(name, fallback="file"):
    """The last component of a client-supplied name with separators and control characters removed."""
    name = unicodedata.normalize("NFC", str(name or ""))
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(c for c in name if unicodedata.category(c)[0] != "C").strip()
    if name in ("", ".", ".."):
        return fallback
    return name[:MAX_NAME]


def relative_path_error(path):
    """Why ``path`` cannot be a file's place inside an uploaded directory, or None when it can."""
    if not isinstance(path, str) or not path:
        return "The path is empty."
    if len(path) > MAX_RELATIVE_PATH:
        return f"The path is longer than {MAX_RELATIVE_PATH} characters."
    if "\\" in path:
        return "Use / as the separator; backslashes are not allowed."
    if any(unicodedata.category(c)[0] == "C" for c in path):
        return "The path contains control characters."
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        return "The path must be relative."
    parts = path.split("/")
    if any(part == "" for part in parts):
        return "The path has an empty part."
    if any(part in (".", "..") for part in parts):
        return "The path may not contain . or .. parts."
    return None


def tree_conflicts(paths):
    """{index: message} for duplicate paths and for files that another path uses as a folder."""
    problems, seen = {}, {}
    folders = {"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)}
    for index, path in enumerate(paths):
        key = unicodedata.normalize("NFC", path)
        if key in seen:
            problems[index] = f"Duplicate of paths[{seen[key]}]."
        elif key in folders:
            problems[index] = "Another path uses this path as a folder."
        else:
            seen[key] = index
    return problems


class PluginFiles:
    """FileRefs of every plugin (``host.service("plugin_files")``)."""

    def __init__(self, host):
        self.host = host
        self.root = Path(host.data_dir) / "plugin-files"
        self.root.mkdir(parents=True, exist_ok=True)
        cfg = host.config
        self.max_upload_bytes = int(cfg.get("plugins.files.max-upload-bytes", MAX_UPLOAD_BYTES))
        self.max_directory_files = int(cfg.get("plugins.files.max-directory-files", MAX_DIRECTORY_FILES))

    # -- permissions ---------------------------------------------------------------------

    def require(self, plugin_id, *permissions):
        """404 for an unknown plugin; 403 naming the first permission its manifest does not declare."""
        runtime = self.host.service("runtime_plugins")
        if runtime is None:
            raise ApiError(503, "service_in_setup_mode", "The plugin runtime is not running.")
        declared = runtime.manifest(plugin_id).get("permissions") or []
        for permission in permissions:
            if permission not in declared:
                raise ApiError(403, "permission_denied",
                               f"The plugin {plugin_id} does not declare the permission {permission}.",
                               permission=permission)

    # -- granting ------------------------------------------------------------------------

    def upload_file(self, plugin_id, stream, filename):
        """A read-only snapshot of one uploaded file."""
        name = safe_filename(filename)
        ref = new_ref()
        staging = self._staging(plugin_id, ref)
        try:
            target = staging / name
            size = _copy_stream(stream, target)
            _make_read_only(target)
            final = self._publish(staging, plugin_id, ref)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return self._grant(ref, plugin_id, FILE, READ_ONLY, "upload", name, final / name, size, cleanup=final)

    def upload_directory(self, plugin_id, entries, access):
        """A snapshot of an uploaded folder: ``entries`` are (relative path, stream) pairs, already checked."""
        for path, _ in entries:  # the schema checked them; a second look costs nothing
            if relative_path_error(path):
                raise _field_error("paths[]", f"The path {path[:100]!r} is not allowed.")
        ref = new_ref()
        staging = self._staging(plugin_id, ref)
        size = 0
        try:
            for path, stream in entries:
                target = staging.joinpath(*path.split("/"))
                if not target.resolve().is_relative_to(staging.resolve()):
                    raise _field_error("paths[]", f"The path {path[:100]!r} is not allowed.")
                target.parent.mkdir(parents=True, exist_ok=True)
                size += _copy_stream(stream, target)
                if access == READ_ONLY:
                    _make_read_only(target)
            final = self._publish(staging, plugin_id, ref)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        name = _common_folder([p for p, _ in entries]) or "upload"
        return self._grant(ref, plugin_id, DIRECTORY, access, "directory", name, final, size, cleanup=final)

    def wrap_native(self, plugin_id, path, kind, access):
        """A grant of an existing local file or folder, in place (no copy)."""
        given = Path(path)
        if not given.is_absolute():
            raise _field_error("path", "The path must be absolute.")
        try:
            real = Path(os.path.realpath(given))
            info = real.stat()
        except (OSError, ValueError):
            raise _field_error("path", "No such file or directory.") from None
        if kind == FILE and not stat.S_ISREG(info.st_mode):
            what = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise _field_error("kind", f"The path is {what}, not a file.")
        if kind == DIRECTORY and not stat.S_ISDIR(info.st_mode):
            raise _field_error("kind", "The path is a file, not a directory.")
        data_dir = Path(os.path.realpath(self.host.data_dir))
        if real.is_relative_to(data_dir):
            # The data directory holds the database settings and every other plugin's files.
            raise ApiError(400, "path_not_allowed", "Paths inside the service's data directory cannot be granted.",
                           errors={"path": ["The path is inside the service's data directory."]})
        size = info.st_size if kind == FILE else None
        return self._grant(new_ref(), plugin_id, kind, access, "native", real.name or str(real), real, size)

    def allocate_output(self, plugin_id, name=None):
        """A fresh, empty, writable folder."""
        ref = new_ref()
        staging = self._staging(plugin_id, ref)
        try:
            final = self._publish(staging, plugin_id, ref)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return self._grant(ref, plugin_id, DIRECTORY, READ_WRITE, "output", safe_filename(name, "output"),
                           final, None, cleanup=final)

    def _staging(self, plugin_id, ref):
        folder = self.root / plugin_id / f"{_PARTIAL}{ref}"
        folder.mkdir(parents=True)
        return folder

    def _publish(self, staging, plugin_id, ref):
        final = self.root / plugin_id / ref
        os.rename(staging, final)
        return final

    def _grant(self, ref, plugin_id, kind, access, source, name, path, size, cleanup=None):
        row = FileRef(ref=ref, plugin_id=plugin_id, kind=kind, access=access, source=source,
                      name=name[:255], path=str(path), size=size, created_at=utcnow())
        try:
            with self.host.db.session() as s:
                s.add(row)
        except BaseException as exc:
            if cleanup is not None:
                shutil.rmtree(cleanup, ignore_errors=True)
            if isinstance(exc, IntegrityError):  # the plugin was uninstalled meanwhile
                raise NotFound("plugin") from None
            raise
        self._tell_worker(plugin_id)
        return view(row)

    # -- reading -------------------------------------------------------------------------

    def get(self, plugin_id, ref):
        """The plugin's own FileRef row; 404 when unknown, 403 when another plugin holds it."""
        with self.host.db.session() as s:
            row = s.get(FileRef, ref)
        if row is None:
            raise NotFound("file reference")
        if row.plugin_id != plugin_id:
            raise ApiError(403, "file_ref_not_granted", "This file reference was granted to another plugin.")
        return row

    def rows(self, plugin_id):
        with self.host.db.session() as s:
            query = select(FileRef).where(FileRef.plugin_id == plugin_id).order_by(FileRef.created_at, FileRef.ref)
            return list(s.execute(query).scalars())

    def refs(self, plugin_id):
        """The plugin's FileRefs as the shell sees them (no host paths)."""
        return [view(r) for r in self.rows(plugin_id)]

    def worker_refs(self, plugin_id):
        """The plugin's FileRefs as its worker sees them: with the host path to open."""
        return [worker_view(r) for r in self.rows(plugin_id)]

    def host_list(self, spec, params):
        """The ``host/files/list`` method: the refs the calling worker's plugin holds."""
        return {"refs": self.worker_refs(spec.id)}

    def _tell_worker(self, plugin_id):
        supervisor = self.host.service("workers")
        managed = supervisor.get(plugin_id) if supervisor is not None else None
        worker = getattr(managed, "worker", None)
        if worker is None or not worker.alive:
            return  # a worker that starts later asks with host/files/list
        try:
            worker.send_notification(GRANTS_NOTIFICATION, {"refs": self.worker_refs(plugin_id)})
        except Exception as exc:  # the grant stands; the worker can still ask
            log.debug("could not tell %s about its files: %s", plugin_id, exc)

    # -- export --------------------------------------------------------------------------

    def export(self, plugin_id, ref):
        """(zip file name, generator of zip bytes) for a granted directory."""
        row = self.get(plugin_id, ref)
        if row.kind != DIRECTORY:
            raise ApiError(400, "not_a_directory", "Only a directory FileRef can be exported.")
        root = Path(row.path)
        if not root.is_dir() or root.is_symlink():
            raise ApiError(410, "file_ref_gone", "The directory of this FileRef no longer exists.")
        return f"{safe_filename(row.name, 'export')}.zip", zip_stream(root)

    # -- housekeeping --------------------------------------------------------------------

    def forget(self, plugin_id):
        """Drop every grant of a plugin and the storage the host made for it (for uninstall)."""
        with self.host.db.session() as s:
            s.execute(delete(FileRef).where(FileRef.plugin_id == plugin_id))
        shutil.rmtree(self.root / plugin_id, ignore_errors=True)

    def sweep(self):
        """At start: storage of plugins no longer installed, refs whose plugin row is gone, and half uploads."""
        with self.host.db.session() as s:
            installed = set(s.execute(select(InstalledPlugin.id)).scalars())
        for folder in self.root.iterdir():
            if not folder.is_dir():
                continue
            if folder.name not in installed:
                shutil.rmtree(folder, ignore_errors=True)
                continue
            for child in folder.iterdir():
                if child.name.startswith(_PARTIAL):
                    shutil.rmtree(child, ignore_errors=True)


def view(row):
    return {"ref": row.ref, "pluginId": row.plugin_id, "kind": row.kind, "access": row.access,
            "source": row.source, "name": row.name, "size": row.size, "createdAt": isoformat(row.created_at)}


def worker_view(row):
    return {"ref": row.ref, "kind": row.kind, "access": row.access, "source": row.source, "name": row.name,
            "path": row.path, "size": row.size}


def register_host_methods(host):
    """Start file grants on a starting host: the ``plugin_files`` service and the worker's host/files/list."""
    files = PluginFiles(host)
    host.provide("plugin_files", files)
    host.provide(f"host-method:{LIST_METHOD}", files.host_list)
    files.sweep()
    return files


# -- helpers -------------------------------------------------------------------------------

def _field_error(field, message):
    return ApiError(400, "validation_failed", message, errors={field: [message]})


def _copy_stream(stream, target):
    size = 0
    with open(target, "xb") as out:
        while chunk := stream.read(_CHUNK):
            out.write(chunk)
            size += len(chunk)
    return size


def _make_read_only(path):
    # Advisory: workers run as the host's user, so this guards against slips, not against malice.
    os.chmod(path, 0o444)


def _common_folder(paths):
    firsts = {p.split("/", 1)[0] for p in paths}
    if len(firsts) == 1 and all("/" in p for p in paths):
        return safe_filename(firsts.pop(), "upload")
    return None


class _Sink:
    """A write-only buffer zipfile can write to without seeking (it then uses data descriptors)."""

    def __init__(self):
        self.parts = []

    def write(self, data):
        self.parts.append(bytes(data))
        return len(data)

    def flush(self):
        pass

    def drain(self):
        if self.parts:
            data, self.parts = b"".join(self.parts), []
            yield data


def zip_stream(root):
    """Yield a zip of the tree under ``root``: regular files and folders only, never following links."""
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", zipfile.ZIP_DEFLATED) as zf:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            # Links could point anywhere on the machine (a worker may plant one in an output folder).
            dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
            rel = os.path.relpath(dirpath, root)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            if prefix:
                zf.mkdir(prefix)
            for name in sorted(filenames):
                try:
                    fd = os.open(os.path.join(dirpath, name), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                except OSError:
                    continue  # a link (O_NOFOLLOW refuses it) or a file that vanished meanwhile
                with os.fdopen(fd, "rb") as src:
                    info = os.fstat(src.fileno())
                    if not stat.S_ISREG(info.st_mode):
                        continue
                    entry = zipfile.ZipInfo(prefix + name, _zip_time(info.st_mtime))
                    entry.compress_type = zipfile.ZIP_DEFLATED
                    entry.file_size = info.st_size
                    entry.external_attr = (stat.S_IMODE(info.st_mode) | stat.S_IFREG) << 16
                    with zf.open(entry, "w", force_zip64=info.st_size > 2**31) as dest:
                        while chunk := src.read(_CHUNK):
                            dest.write(chunk)
                            yield from sink.drain()
                yield from sink.drain()
    yield from sink.drain()


def _zip_time(mtime):
    stamp = time.localtime(mtime)[:6]
    return stamp if stamp[0] >= 1980 else (1980, 1, 1, 0, 0, 0)
