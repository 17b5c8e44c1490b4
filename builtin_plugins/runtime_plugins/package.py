"""Plugin packages: zip validation, manifest schema, safe extraction, SemVer steps."""
import hashlib
import hmac
import io
import json
import os
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import jsonschema
import semver

MAX_PACKAGE_BYTES = 64 * 1024 * 1024
MAX_ENTRIES = 2000
MAX_ENTRY_BYTES = 32 * 1024 * 1024
MAX_TOTAL_BYTES = 128 * 1024 * 1024
MAX_RATIO = 200  # a compression ratio beyond this on a large entry is a zip bomb
MAX_MANIFEST_BYTES = 256 * 1024
# What a damaged or unsupported entry raises while it is read (bad CRC, bad deflate stream,
# truncated data, an unknown compression method, an encrypted entry).
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError)
PERMISSIONS = ("files.read", "files.write", "notify")
MANIFEST = "plugin.json"

MANIFEST_SCHEMA = {
    "type": "object",
    "required": ["id", "name", "version", "runtime"],
    "properties": {
        "id": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9._-]{1,63}$"},
        "name": {"type": "string", "minLength": 1, "maxLength": 100},
        "version": {"type": "string", "minLength": 1, "maxLength": 64},
        "description": {"type": "string", "maxLength": 2000},
        "runtime": {"enum": ["python", "node", "java", "command"]},
        "main": {"type": "string", "minLength": 1, "maxLength": 255},
        "command": {"type": "array", "minItems": 1, "maxItems": 64,
                    "items": {"type": "string", "minLength": 1, "maxLength": 1024}},
        "permissions": {"type": "array", "uniqueItems": True, "items": {"enum": list(PERMISSIONS)}},
        "category": {"type": "string", "maxLength": 64},
        "ui": {"type": "object", "required": ["entry"],
               "properties": {"entry": {"type": "string", "minLength": 1, "maxLength": 255}}},
        "dependencies": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 64}},
    },
    "if": {"properties": {"runtime": {"const": "command"}}},
    "then": {"required": ["command"]},
    "else": {"required": ["main"]},
}
_VALIDATOR = jsonschema.Draft202012Validator(MANIFEST_SCHEMA)


class PackageError(ValueError):
    """The package is refused; ``errors`` says why, per field where that applies."""

    def __init__(self, message, errors=None):
        super().__init__(message)
        self.errors = errors or {}


@dataclass
class Package:
    manifest: dict
    data: bytes
    sha256: str
    files: list  # ZipInfo of regular files

    @property
    def id(self):
        return self.manifest["id"]


def safe_name(name):
    """The entry's relative parts, or raise when it could escape the package folder."""
    if not name or "\\" in name or name.startswith("/") or "\x00" in name:
        raise PackageError(f"unsafe path in package: {name[:100]!r}")
    pure = PurePosixPath(name)
    if (not pure.parts or pure.is_absolute() or any(p in ("..", "") for p in pure.parts)
            or ":" in pure.parts[0]):
        raise PackageError(f"unsafe path in package: {name[:100]!r}")
    return pure.parts


def check_sha256(data, expected):
    if expected is None:
        return
    expected = expected.strip().lower()
    actual = hashlib.sha256(data).hexdigest()
    if not hmac.compare_digest(actual.encode(), expected.encode()):
        raise PackageError("the package does not match its sha256 checksum", {"sha256": ["Checksum mismatch."]})


def read(data, sha256=None):
    """Validate a package completely before anything is written."""
    if len(data) > MAX_PACKAGE_BYTES:
        raise PackageError("the package is too large")
    check_sha256(data, sha256)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        raise PackageError("the upload is not a zip archive") from None
    if len(infos) > MAX_ENTRIES:
        raise PackageError(f"the package has more than {MAX_ENTRIES} entries")
    total, files, names, folders = 0, [], {}, set()
    for info in infos:
        parts = safe_name(info.filename)
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            raise PackageError(f"links are not allowed in packages: {info.filename[:100]!r}")
        if info.flag_bits & 0x1:
            raise PackageError(f"encrypted entries are not allowed: {info.filename[:100]!r}")
        if info.is_dir():
            folders.add("/".join(parts))
            continue
        if info.file_size > MAX_ENTRY_BYTES:
            raise PackageError(f"entry too large: {info.filename[:100]!r}")
        if info.file_size > 1024 * 1024 and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise PackageError(f"entry compresses suspiciously well: {info.filename[:100]!r}")
        total += info.file_size
        if total > MAX_TOTAL_BYTES:
            raise PackageError("the package unpacks to more than the size limit")
        # Compare normalised names: "a/./b" and "a/b" would be written to the same file.
        name = "/".join(parts)
        if name in names:
            raise PackageError(f"duplicate entry: {info.filename[:100]!r}")
        names[name] = info
        folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
        files.append(info)
    clash = names.keys() & folders
    if clash:
        raise PackageError(f"entry is both a file and a folder: {sorted(clash)[0][:100]!r}")
    try:
        damaged = archive.testzip()  # every entry decompresses and matches its CRC (sizes are bounded above)
    except _READ_ERRORS:
        damaged = "an entry"
    if damaged is not None:
        raise PackageError(f"damaged entry: {damaged[:100]!r}")
    if MANIFEST not in names:
        raise PackageError("the package has no plugin.json at its root", {"manifest": ["Missing plugin.json."]})
    if names[MANIFEST].file_size > MAX_MANIFEST_BYTES:
        raise PackageError("plugin.json is too large", {"manifest": ["Larger than 256 KiB."]})
    try:
        raw = archive.read(names[MANIFEST])
    except _READ_ERRORS:
        raise PackageError("plugin.json is damaged in the archive", {"manifest": ["Damaged entry."]}) from None
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise PackageError("plugin.json is not valid JSON", {"manifest": ["Not valid JSON."]}) from None
    validate_manifest(manifest, names)
    return Package(manifest, data, hashlib.sha256(data).hexdigest(), files)


def validate_manifest(manifest, names):
    if not isinstance(manifest, dict):
        raise PackageError("plugin.json must be an object", {"manifest": ["Must be an object."]})
    errors = {}
    for err in _VALIDATOR.iter_errors(manifest):
        key = ".".join(str(p) for p in err.path) or "manifest"
        errors.setdefault(key, []).append(err.message[:200])
    if "version" not in errors and isinstance(manifest.get("version"), str):
        try:
            semver.Version.parse(manifest["version"])
        except ValueError:
            errors["version"] = ["Not a SemVer version."]
    for key in ("main",):
        value = manifest.get(key)
        if isinstance(value, str) and "main" not in errors:
            try:
                parts = safe_name(value)
            except PackageError:
                errors["main"] = ["Unsafe path."]
                continue
            if "/".join(parts) not in names:
                errors["main"] = ["The main file is not in the package."]
    entry = (manifest.get("ui") or {}).get("entry") if isinstance(manifest.get("ui"), dict) else None
    if isinstance(entry, str):
        try:
            parts = safe_name(entry)
            if len(parts) < 2:
                # The UI folder is the entry's folder and is served without a token:
                # at the root it would expose the worker's code and manifest.
                errors["ui.entry"] = ["The UI entry must be inside a folder, such as ui/index.html."]
            elif "/".join(parts) not in names:
                errors["ui.entry"] = ["The UI entry is not in the package."]
        except PackageError:
            errors["ui.entry"] = ["Unsafe path."]
    if errors:
        raise PackageError("plugin.json is invalid", errors)


def extract(package, dest):
    """Write the package's files under ``dest`` (which must not exist), counting real bytes."""
    dest = Path(dest)
    dest.mkdir(parents=True)
    archive = zipfile.ZipFile(io.BytesIO(package.data))
    written = 0
    for info in package.files:
        target = dest.joinpath(*safe_name(info.filename))
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(info) as src, open(target, "wb") as out:
            remaining = info.file_size
            while True:
                try:
                    chunk = src.read(65536)
                except _READ_ERRORS:
                    raise PackageError(f"damaged entry: {info.filename[:100]!r}") from None
                if not chunk:
                    break
                remaining -= len(chunk)
                written += len(chunk)
                if remaining < 0 or written > MAX_TOTAL_BYTES:
                    raise PackageError(f"entry larger than declared: {info.filename[:100]!r}")
                out.write(chunk)
        mode = (info.external_attr >> 16) & 0o755
        os.chmod(target, (mode | 0o600) if mode else 0o644)


def version_step(installed, new):
    """major | minor | patch | same | downgrade (SemVer precedence), or None for a new install."""
    if installed is None:
        return None
    old_v, new_v = semver.Version.parse(installed), semver.Version.parse(new)
    if new_v == old_v:
        return "same"
    if new_v < old_v:
        return "downgrade"
    if new_v.major != old_v.major:
        return "major"
    if new_v.minor != old_v.minor:
        return "minor"
    return "patch"
