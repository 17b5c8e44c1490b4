"""Setup wizard logic: form metadata, connection tests and initialisation."""
import time

from core import datasource as ds_file
from core.errors import ApiError
from core.host import APP, AlreadyInitialized, ModeError

FIELD_HOST = {"name": "host", "type": "string", "required": False, "default": "127.0.0.1", "secret": False}
FIELD_DB = {"name": "database", "type": "string", "required": True, "default": None, "secret": False}
FIELD_USER = {"name": "user", "type": "string", "required": True, "default": None, "secret": False}
FIELD_PASSWORD = {"name": "password", "type": "password", "required": False, "default": None, "secret": True}


def types():
    """Per-type form metadata for the wizard."""
    def server(kind, label, port):
        return {"type": kind, "label": label, "embedded": False, "fields": [
            FIELD_HOST,
            {"name": "port", "type": "integer", "required": False, "default": port, "secret": False,
             "min": 1, "max": 65535},
            FIELD_DB, FIELD_USER, FIELD_PASSWORD]}

    return {"types": [
        {"type": "sqlite", "label": "Embedded (SQLite)", "embedded": True, "fields": [
            {"name": "path", "type": "string", "required": False, "default": ds_file.DEFAULT_SQLITE_FILE,
             "secret": False, "description": "File name inside the data directory"}]},
        server("postgresql", "PostgreSQL", 5432),
        server("mysql", "MySQL / MariaDB", 3306),
    ]}


def status(host):
    return {"initialized": host.mode == APP,
            "supportedTypes": list(ds_file.SUPPORTED_TYPES),
            "embeddedTypes": list(ds_file.EMBEDDED_TYPES)}


def test_connection(host, datasource):
    """Probe without persisting anything (an SQLite file the probe had to create is removed)."""
    leftovers = _sqlite_leftovers(host, datasource)
    started = time.monotonic()
    try:
        db = host.open_database(datasource)
    except ModeError as exc:
        return {"ok": False, "type": datasource["type"], "message": str(exc), "latencyMs": None}
    else:
        db.dispose()
        return {"ok": True, "type": datasource["type"], "message": None,
                "latencyMs": int((time.monotonic() - started) * 1000)}
    finally:
        _remove(leftovers)


def _sqlite_leftovers(host, datasource):
    """The files and folders an SQLite probe would create, deepest first."""
    if datasource["type"] != "sqlite":
        return []
    try:
        path = ds_file.sqlite_path(host.data_dir, datasource["params"])
    except ds_file.DatasourceError:
        return []
    if path.exists():
        return []
    created = [path.with_name(path.name + s) for s in ("-wal", "-shm", "-journal")] + [path]
    parent = path.parent
    while not parent.exists() and parent != host.data_dir:
        created.append(parent)
        parent = parent.parent
    return created


def _remove(paths):
    for path in paths:
        try:
            if path.is_dir():
                path.rmdir()  # only ever empty folders the probe made
            else:
                path.unlink(missing_ok=True)
        except OSError:
            pass


def initialize(host, datasource):
    try:
        host.initialize(datasource)
    except AlreadyInitialized as exc:
        raise ApiError(409, "already_initialized", str(exc)) from None
    except ModeError as exc:
        raise ApiError(422, "connection_failed", str(exc)) from None
    return status(host)


def clear_config(host):
    host.reset_datasource()
    return status(host)
