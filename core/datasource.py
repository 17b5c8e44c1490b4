"""``datasource.properties``: reading, writing, backing up, and turning it into an engine URL."""
import os
from pathlib import Path, PurePosixPath

from sqlalchemy import URL

FILE = "datasource.properties"
BACKUP = "datasource.properties.bak"
DEFAULT_SQLITE_FILE = "agenthost.db"

SUPPORTED_TYPES = ("sqlite", "postgresql", "mysql")
EMBEDDED_TYPES = ("sqlite",)
DRIVERS = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}
RESERVED_NAMES = ("plugins.json",)


class DatasourceError(ValueError):
    """A datasource definition that cannot be used."""


def read(data_dir):
    """The stored datasource as ``{type, params}``, or None when there is none."""
    path = Path(data_dir) / FILE
    try:
        content = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # missing or unusable; ``exists`` tells the two apart
    values = {}
    for line in content.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = _unescape(value.strip())
    kind = values.pop("type", None)
    if kind not in SUPPORTED_TYPES:
        return None
    params = {k.removeprefix("params."): v for k, v in values.items() if k.startswith("params.")}
    if "port" in params:
        try:
            params["port"] = int(params["port"])
        except ValueError:
            return None
    return {"type": kind, "params": params}


def exists(data_dir):
    """Whether a config file is present (readable or not)."""
    return (Path(data_dir) / FILE).exists()


def write(data_dir, datasource):
    """Persist atomically with owner-only permissions (it may hold a password)."""
    lines = ["# agenthost datasource; written by the setup wizard", f"type={datasource['type']}"]
    for key, value in sorted(datasource["params"].items()):
        if value is not None:
            lines.append(f"params.{key}={_escape(str(value))}")
    _write_private(Path(data_dir) / FILE, ("\n".join(lines) + "\n").encode("utf-8"))


def backup(data_dir):
    """Copy the config to its ``.bak`` sibling. Returns True when there was one."""
    src = Path(data_dir) / FILE
    try:
        data = src.read_bytes()
    except FileNotFoundError:
        return False
    _write_private(Path(data_dir) / BACKUP, data)
    return True


def _write_private(path, data):
    """Write through a temporary file that is 0600 from its first byte, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a left-over temporary file keeps its old mode otherwise
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def clear(data_dir):
    """Back up, then remove the config."""
    backup(data_dir)
    (Path(data_dir) / FILE).unlink(missing_ok=True)


def sqlite_path(data_dir, params):
    """Resolve the SQLite file inside the data directory; refuse anything escaping it."""
    name = (params or {}).get("path") or DEFAULT_SQLITE_FILE
    pure = PurePosixPath(name.replace("\\", "/"))
    if (pure.is_absolute() or ".." in pure.parts or not pure.parts or name.startswith("~")
            or (len(name) > 1 and name[1] == ":")):
        raise DatasourceError("path must be a file name relative to the data directory")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise DatasourceError("path must not contain control characters")
    # The host's own files live here too; a database written over them would destroy both.
    if len(pure.parts) == 1 and (pure.name.startswith(FILE) or pure.name in RESERVED_NAMES):
        raise DatasourceError("path names a file the host uses for its own configuration")
    return Path(data_dir) / Path(*pure.parts)


def engine_url(data_dir, datasource, timeout=5):
    """An SQLAlchemy URL plus connect args for the datasource."""
    kind, params = datasource["type"], datasource.get("params") or {}
    if kind == "sqlite":
        path = sqlite_path(data_dir, params)
        return URL.create("sqlite", database=str(path)), {"timeout": timeout}
    if kind not in DRIVERS:
        raise DatasourceError(f"unsupported type {kind!r}")
    url = URL.create(
        DRIVERS[kind],
        username=params.get("user") or None,
        password=params.get("password") or None,
        host=params.get("host") or "127.0.0.1",
        port=int(params.get("port") or DEFAULT_PORTS[kind]),
        database=params.get("database"),
    )
    if kind == "postgresql":
        return url, {"connect_timeout": timeout}
    return url, {"connect_timeout": timeout, "read_timeout": 30, "write_timeout": 30, "charset": "utf8mb4"}


def _escape(value):
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _unescape(value):
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append("\n" if nxt == "n" else nxt)
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)
