"""The database behind APP mode: startup probe, login timeout, migrations, SQLite pragmas."""
import socket

import gevent
import pytest
from sqlalchemy import inspect, text

from core import datasource as ds_file
from core.config import Config
from core.db import Model
from core.host import APP, SETUP
from tests.conftest import HEADERS, require_service


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def builtin_tables():
    """Tables of the builtin areas' models (test plugins may add others to the metadata)."""
    return {mapper.local_table.name for mapper in Model.registry.mappers
            if mapper.class_.__module__.startswith("builtin_plugins.")}


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_unreachable_database_at_startup_means_setup_mode_and_a_backup(make_app, data_dir, kind):
    unreachable = {"type": kind, "params": {"host": "127.0.0.1", "port": closed_port(),
                                            "database": "x", "user": "u", "password": "pw"}}
    app = make_app(datasource=unreachable)
    original = (data_dir / ds_file.FILE).read_bytes()
    host = app.extensions["agenthost"]
    assert host.mode == SETUP and host.db is None
    assert (data_dir / ds_file.BACKUP).read_bytes() == original
    client = app.test_client()
    assert client.get("/api/setup/status").json["initialized"] is False
    assert client.get("/api/settings", headers=HEADERS).json["code"] == "service_in_setup_mode"


def test_unusable_sqlite_file_at_startup_means_setup_mode_and_a_backup(make_app, data_dir):
    (data_dir / "folder.db").mkdir()
    app = make_app(datasource={"type": "sqlite", "params": {"path": "folder.db"}})
    assert app.extensions["agenthost"].mode == SETUP
    assert (data_dir / ds_file.BACKUP).read_bytes() == (data_dir / ds_file.FILE).read_bytes()


@pytest.mark.parametrize("garbage", [
    pytest.param(b"type=oracle\n", id="unknown-type"),
    pytest.param(b"type=mysql\nparams.port=seventy\n", id="bad-port"),
    pytest.param(b"type=sqlite\xff\xfe\n", id="not-utf8"),
])
def test_unreadable_config_at_startup_is_backed_up_too(make_app, data_dir, garbage):
    (data_dir / ds_file.FILE).write_bytes(garbage)
    app = make_app(setup=True)
    assert app.extensions["agenthost"].mode == SETUP
    assert (data_dir / ds_file.BACKUP).read_bytes() == garbage
    assert app.test_client().get("/api/setup/status").json["initialized"] is False


def test_probe_login_timeout_is_5_seconds_by_default():
    assert Config()["datasource.probe-timeout-seconds"] == 5


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_server_connections_carry_the_5_second_login_timeout(make_app, kind):
    """Read back from the live driver connection, not from our own settings."""
    require_service(kind)
    host = make_app(backend=kind).extensions["agenthost"]
    assert host.db.connect_args["connect_timeout"] == 5
    with host.db.engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        if kind == "postgresql":
            assert raw.info.get_parameters()["connect_timeout"] == "5"
        else:
            assert raw.connect_timeout == 5


def test_a_mysql_server_that_never_greets_fails_within_the_login_timeout(make_app):
    """The login itself, not only the TCP connect, is bounded (0.5 s here, for speed)."""
    stalled = socket.socket()
    stalled.bind(("127.0.0.1", 0))
    stalled.listen(4)  # the kernel completes the handshake; nobody ever answers
    try:
        app = make_app(setup=True, config={"datasource.probe-timeout-seconds": 0.5})
        body = {"type": "mysql", "params": {"host": "127.0.0.1", "port": stalled.getsockname()[1],
                                            "database": "x", "user": "u"}}
        # The guard only catches a probe that ignores the login timeout and waits for the
        # 30 s read timeout of ordinary queries.
        with gevent.Timeout(10, AssertionError("the probe outlived its login timeout")):
            resp = app.test_client().post("/api/setup/test-connection", json=body)
        assert resp.json["ok"] is False
        assert "timed out" in resp.json["message"].lower()
    finally:
        stalled.close()


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(app):
    with app.extensions["agenthost"].db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000


def test_migrations_create_every_table_and_reapply_as_a_no_op(make_app, backend):
    app = make_app(backend=backend)
    host = app.extensions["agenthost"]
    tables = set(inspect(host.db.engine).get_table_names())
    assert builtin_tables() and builtin_tables() <= tables
    assert {"alembic_version_settings", "alembic_version_notifications"} <= tables  # one version table per plugin

    client = app.test_client()
    assert client.put("/api/settings", json={"theme": "dark"}, headers=HEADERS).status_code == 200

    def snapshot():
        heads = []
        with host.db.engine.connect() as conn:
            for name, _ in host.migration_folders():  # one version table per plugin
                table = host.db.version_table(name)
                heads += conn.execute(text(f"SELECT version_num FROM {table}")).scalars().all()
            settings_rows = conn.execute(text("SELECT COUNT(*) FROM settings")).scalar()
        return sorted(heads), settings_rows

    before = snapshot()
    assert len(before[0]) == len(host.migration_folders())  # one head per plugin
    host.migrate(host.db)
    assert snapshot() == before
    assert client.get("/api/settings", headers=HEADERS).json["theme"] == "dark"


def test_a_second_host_on_the_same_database_starts_in_app_mode(make_app, backend):
    first = make_app(backend=backend)
    resp = first.test_client().put("/api/settings", json={"language": "de"}, headers=HEADERS)
    assert resp.status_code == 200
    second = make_app()  # same data directory, so the same datasource.properties
    assert second.extensions["agenthost"].mode == APP
    assert second.test_client().get("/api/settings", headers=HEADERS).json["language"] == "de"
