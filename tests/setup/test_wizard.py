"""The setup wizard over the test client: test-connection, initialize, clearing and resetting."""
import json
import socket
import stat

import pytest

from core import datasource as ds_file
from tests.conftest import HEADERS, require_service

# Distinctive enough that finding it anywhere in a response can only mean a leak.
PASSWORD = "Pw-Leak-Canary-7f3a9c51"


def closed_port():
    """A loopback port nobody listens on (connecting fails at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_params(datasource, **changes):
    return {"type": datasource["type"], "params": {**datasource["params"], **changes}}


def read_backup(data_dir, scratch):
    """The datasource held in the ``.bak`` file, read the way the host reads its config."""
    (scratch / "restore").mkdir()
    (scratch / "restore" / ds_file.FILE).write_bytes((data_dir / ds_file.BACKUP).read_bytes())
    return ds_file.read(scratch / "restore")


def assert_nothing_written(data_dir):
    assert not (data_dir / ds_file.FILE).exists()
    assert sorted(p.name for p in data_dir.iterdir() if p.name != "plugins.json") == []


@pytest.fixture
def setup_app(make_app):
    return make_app(setup=True)


@pytest.fixture
def wizard(setup_app):
    return setup_app.test_client()


def test_connection_succeeds_on_each_backend_and_persists_nothing(
        wizard, data_dir, fresh_datasource, backend):
    datasource = fresh_datasource(backend)
    resp = wizard.post("/api/setup/test-connection", json=datasource)
    assert resp.status_code == 200
    assert resp.json["ok"] is True and resp.json["type"] == backend
    assert resp.json["message"] is None
    assert isinstance(resp.json["latencyMs"], int) and resp.json["latencyMs"] >= 0
    # Not even the SQLite file a probe has to create stays behind.
    assert_nothing_written(data_dir)
    assert wizard.get("/api/setup/status").json["initialized"] is False
    assert wizard.get("/api/settings", headers=HEADERS).status_code == 503


def test_sqlite_probe_removes_the_folders_and_file_it_created(wizard, data_dir):
    resp = wizard.post("/api/setup/test-connection",
                       json={"type": "sqlite", "params": {"path": "a/b/c.db"}})
    assert resp.json["ok"] is True
    assert_nothing_written(data_dir)


def test_sqlite_probe_keeps_an_existing_database(wizard, data_dir):
    (data_dir / "kept.db").write_bytes(b"")
    resp = wizard.post("/api/setup/test-connection",
                       json={"type": "sqlite", "params": {"path": "kept.db"}})
    assert resp.json["ok"] is True
    assert (data_dir / "kept.db").exists()
    assert not (data_dir / ds_file.FILE).exists()


# The servers' own working credentials; each failure case changes one thing.
SERVERS = {
    "postgresql": {"host": "127.0.0.1", "port": 5432, "database": "test", "user": "postgres",
                   "password": PASSWORD},
    "mysql": {"host": "127.0.0.1", "port": 3306, "database": "test", "user": "root",
              "password": None},
}
_CLOSED = closed_port()
FAILURES = [
    pytest.param("postgresql", {"host": "127.0.0.3"}, "refused", id="postgresql-wrong-host"),
    pytest.param("postgresql", {"port": _CLOSED}, "refused", id="postgresql-wrong-port"),
    pytest.param("postgresql", {"database": "ah_no_such_database"}, "does not exist",
                 id="postgresql-wrong-database"),
    pytest.param("postgresql", {"user": "ah_no_such_role"}, "does not exist",
                 id="postgresql-wrong-user"),
    pytest.param("mysql", {"host": "127.0.0.3"}, "can't connect", id="mysql-wrong-host"),
    pytest.param("mysql", {"port": _CLOSED}, "can't connect", id="mysql-wrong-port"),
    pytest.param("mysql", {"password": PASSWORD}, "access denied", id="mysql-wrong-password"),
    pytest.param("mysql", {"database": "ah_no_such_database"}, "unknown database",
                 id="mysql-wrong-database"),
]


@pytest.mark.parametrize("kind,changes,reason", FAILURES)
def test_connection_failure_is_readable_and_never_leaks_the_password(
        wizard, data_dir, kind, changes, reason):
    """PostgreSQL's trust auth ignores passwords, so there the canary rides in every attempt."""
    require_service(kind)
    datasource = {"type": kind, "params": {**SERVERS[kind], **changes}}
    resp = wizard.post("/api/setup/test-connection", json=datasource)
    assert resp.status_code == 200
    assert resp.json["ok"] is False and resp.json["latencyMs"] is None
    message = resp.json["message"]
    assert reason in message.lower()
    assert "\n" not in message and "Traceback" not in message and len(message) <= 300
    assert PASSWORD not in resp.get_data(as_text=True)
    assert_nothing_written(data_dir)


def test_a_password_echoed_by_the_driver_is_masked(wizard):
    """Even when a driver message repeats the password (here as a database name) it is masked."""
    require_service("postgresql")
    datasource = {"type": "postgresql", "params": {"host": "127.0.0.1", "port": 5432,
                                                   "database": PASSWORD, "user": "postgres",
                                                   "password": PASSWORD}}
    for path in ("/api/setup/test-connection", "/api/setup/initialize"):
        resp = wizard.post(path, json=datasource)
        body = resp.get_data(as_text=True)
        assert PASSWORD not in body
        assert "***" in body


def test_sqlite_failure_names_no_host_path(wizard, data_dir):
    (data_dir / "taken").mkdir()
    resp = wizard.post("/api/setup/test-connection",
                       json={"type": "sqlite", "params": {"path": "taken"}})
    assert resp.json["ok"] is False
    assert resp.json["message"]
    assert str(data_dir) not in resp.get_data(as_text=True)


def test_initialize_switches_to_app_mode_on_each_backend(
        setup_app, wizard, data_dir, fresh_datasource, backend):
    datasource = fresh_datasource(backend)
    resp = wizard.post("/api/setup/initialize", json=datasource)
    assert resp.status_code == 200, resp.json
    assert resp.json["initialized"] is True
    assert wizard.get("/api/settings", headers=HEADERS).status_code == 200
    for method, path in (("GET", "/api/setup/status"), ("GET", "/api/setup/types"),
                         ("POST", "/api/setup/initialize"), ("DELETE", "/api/setup/config")):
        gone = wizard.open(path, method=method, json=datasource)
        assert gone.status_code == 404, path
        assert gone.mimetype == "application/problem+json"
    path = data_dir / ds_file.FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = ds_file.read(data_dir)
    assert stored["type"] == backend
    assert {k: v for k, v in stored["params"].items() if v is not None} == \
        {k: v for k, v in datasource["params"].items() if v is not None}
    assert setup_app.extensions["agenthost"].db.kind == backend


def test_initialize_with_a_failing_connection_is_422_and_stays_in_setup(wizard, data_dir):
    bad = {"type": "postgresql", "params": {"host": "127.0.0.1", "port": closed_port(),
                                            "database": "x", "user": "postgres",
                                            "password": PASSWORD}}
    resp = wizard.post("/api/setup/initialize", json=bad)
    assert resp.status_code == 422
    assert resp.mimetype == "application/problem+json"
    assert resp.json["code"] == "connection_failed" and "refused" in resp.json["detail"].lower()
    assert PASSWORD not in resp.get_data(as_text=True)
    assert_nothing_written(data_dir)
    assert wizard.get("/api/setup/status").json["initialized"] is False
    assert wizard.get("/api/settings", headers=HEADERS).status_code == 503


def server(kind="mysql", **params):
    """A server datasource that is valid except for what ``params`` changes."""
    return {"type": kind, "params": {"database": "d", "user": "u", **params}}


def sqlite(path):
    return {"type": "sqlite", "params": {"path": path}}


# (id, body, path to the field that must carry an error). LONG_PASSWORD and ABSOLUTE are
# placeholders filled in by the test.
BAD_BODIES = [
    ("unknown-type", {"type": "oracle", "params": {}}, ["type"]),
    ("type-not-string", {"type": 5, "params": {}}, ["type"]),
    ("type-missing", {"params": {}}, ["type"]),
    ("database-missing", {"type": "postgresql", "params": {"user": "u"}}, ["params", "database"]),
    ("user-missing", {"type": "mysql", "params": {"database": "d"}}, ["params", "user"]),
    ("port-zero", server("postgresql", port=0), ["params", "port"]),
    ("port-too-big", server("postgresql", port=65536), ["params", "port"]),
    ("port-string", server(port="3306"), ["params", "port"]),
    ("port-fraction", server(port=3306.5), ["params", "port"]),
    ("port-boolean", server(port=True), ["params", "port"]),
    ("database-too-long", server(database="d" * 129), ["params", "database"]),
    ("password-too-long", server(password="LONG_PASSWORD"), ["params", "password"]),
    ("user-control-char", server(user="u\nx"), ["params", "user"]),
    ("unknown-param", server(sslmode="x"), ["params", "sslmode"]),
    ("path-parent", sqlite("../outside.db"), ["params", "path"]),
    ("path-parent-nested", sqlite("sub/../../outside.db"), ["params", "path"]),
    ("path-absolute", sqlite("ABSOLUTE"), ["params", "path"]),
    ("path-backslash-parent", sqlite("..\\outside.db"), ["params", "path"]),
    ("path-home", sqlite("~/outside.db"), ["params", "path"]),
    ("path-host-config", sqlite("datasource.properties"), ["params", "path"]),
    ("path-empty", sqlite(""), ["params", "path"]),
    ("path-number", sqlite(7), ["params", "path"]),
    ("params-list", {"type": "sqlite", "params": []}, ["params"]),
    ("params-null", {"type": "sqlite", "params": None}, ["params"]),
    ("unknown-field", {"type": "sqlite", "params": {}, "extra": 1}, ["extra"]),
]


@pytest.mark.parametrize("endpoint", ["test-connection", "initialize"])
@pytest.mark.parametrize("body,field", [pytest.param(b, f, id=i) for i, b, f in BAD_BODIES])
def test_invalid_datasource_is_400_with_field_errors_and_writes_nothing(wizard, data_dir, tmp_path,
                                                                        endpoint, body, field):
    # Placeholders become a long password carrying the canary, and an absolute path in tmp_path.
    text = json.dumps(body).replace("LONG_PASSWORD", PASSWORD + "p" * (1025 - len(PASSWORD)))
    body = json.loads(text.replace("ABSOLUTE", str(tmp_path / "outside.db")))
    resp = wizard.post(f"/api/setup/{endpoint}", json=body)
    assert resp.status_code == 400
    assert resp.mimetype == "application/problem+json"
    problem = resp.json
    assert {"type", "title", "status", "detail", "code"} <= set(problem)
    errors = problem["errors"]
    for key in field:
        errors = errors[key]
    assert errors
    assert PASSWORD not in resp.get_data(as_text=True)
    assert_nothing_written(data_dir)
    assert not (tmp_path / "outside.db").exists()
    assert wizard.get("/api/setup/status").json["initialized"] is False


@pytest.mark.parametrize("endpoint", ["test-connection", "initialize"])
def test_unparseable_bodies_are_problems(wizard, data_dir, endpoint):
    url = f"/api/setup/{endpoint}"
    cases = [
        (wizard.post(url, data="{not json", content_type="application/json"), 400),
        (wizard.post(url, data="[1, 2]", content_type="application/json"), 400),
        (wizard.post(url), 400),
        (wizard.post(url, data='{"type": "sqlite"}', content_type="text/plain"), 415),
        (wizard.post(url, data="x" * (9 * 1024 * 1024), content_type="application/json"), 413),
    ]
    for resp, status in cases:
        assert resp.status_code == status
        assert resp.mimetype == "application/problem+json"
        assert resp.json["status"] == status
    assert_nothing_written(data_dir)
    assert wizard.get("/api/setup/status").json["initialized"] is False


def test_wrong_method_on_a_setup_path_is_405(wizard):
    resp = wizard.get("/api/setup/initialize")
    assert resp.status_code == 405
    assert resp.mimetype == "application/problem+json"


def test_password_is_never_returned_anywhere(make_app, data_dir, fresh_datasource):
    """Through a whole wizard session on PostgreSQL (trust auth accepts any password)."""
    datasource = with_params(fresh_datasource("postgresql"), password=PASSWORD)
    app = make_app(setup=True)
    client = app.test_client()
    client.environ_base["HTTP_X_SERVICE_TOKEN"] = HEADERS["X-Service-Token"]
    bodies = [
        client.get("/api/setup/status"),
        client.get("/api/setup/types"),
        client.post("/api/setup/test-connection", json=datasource),
        client.post("/api/setup/initialize", json=datasource),
        client.get("/api/settings"),
        client.get("/api/openapi.json"),
        client.get("/api/setup/status"),
        client.post("/api/settings/database/reset"),
        client.get("/api/setup/status"),
        client.get("/api/setup/types"),
    ]
    assert bodies[3].status_code == 200 and bodies[7].status_code == 200
    for resp in bodies:
        assert PASSWORD not in resp.get_data(as_text=True)
        assert PASSWORD not in json.dumps(dict(resp.headers))
    # It is only ever in the owner-only backup of the config, where it has to be.
    assert PASSWORD in (data_dir / ds_file.BACKUP).read_text()
    assert stat.S_IMODE((data_dir / ds_file.BACKUP).stat().st_mode) == 0o600


def test_delete_config_backs_up_and_clears(make_app, data_dir):
    """In SETUP mode with a config the probe refused: DELETE keeps a copy and removes it."""
    broken = {"type": "postgresql", "params": {"host": "127.0.0.1", "port": closed_port(),
                                               "database": "x", "user": "u"}}
    ds_file.write(data_dir, broken)
    original = (data_dir / ds_file.FILE).read_bytes()
    client = make_app(setup=True).test_client()
    (data_dir / ds_file.BACKUP).unlink()  # the probe made one; this DELETE must make its own
    resp = client.delete("/api/setup/config")
    assert resp.status_code == 200
    assert resp.json["initialized"] is False
    assert not (data_dir / ds_file.FILE).exists()
    assert (data_dir / ds_file.BACKUP).read_bytes() == original
    assert stat.S_IMODE((data_dir / ds_file.BACKUP).stat().st_mode) == 0o600
    assert client.get("/api/setup/status").status_code == 200


def test_delete_config_with_nothing_configured_changes_nothing(wizard, data_dir):
    resp = wizard.delete("/api/setup/config")
    assert resp.status_code == 200
    assert resp.json["initialized"] is False
    assert_nothing_written(data_dir)


def test_database_reset_returns_the_same_app_to_setup_mode(make_app, data_dir, tmp_path):
    app = make_app()
    client = app.test_client()
    client.environ_base["HTTP_X_SERVICE_TOKEN"] = HEADERS["X-Service-Token"]
    assert client.put("/api/settings", json={"theme": "dark"}).status_code == 200
    original = (data_dir / ds_file.FILE).read_bytes()

    resp = client.post("/api/settings/database/reset")
    assert resp.status_code == 200
    assert resp.json["mode"] == "SETUP"
    assert not (data_dir / ds_file.FILE).exists()
    assert (data_dir / ds_file.BACKUP).read_bytes() == original
    blocked = client.get("/api/settings")
    assert blocked.status_code == 503 and blocked.json["code"] == "service_in_setup_mode"
    assert client.get("/api/setup/status").json["initialized"] is False

    # Back to the same database: APP mode again, data intact, startup hooks ran a second time.
    resp = client.post("/api/setup/initialize", json=read_backup(data_dir, tmp_path))
    assert resp.status_code == 200, resp.json
    assert client.get("/api/settings").json["theme"] == "dark"
    note = client.post("/api/notifications",
                       json={"level": "info", "source": "host", "title": "back"})
    assert note.status_code in (200, 201), note.json


@pytest.mark.parametrize("headers", [{}, {"X-Service-Token": "wrong"}], ids=["missing", "wrong"])
def test_database_reset_needs_the_token(make_app, data_dir, headers):
    app = make_app()
    original = (data_dir / ds_file.FILE).read_bytes()
    resp = app.test_client().post("/api/settings/database/reset", headers=headers)
    assert resp.status_code == 401
    assert (data_dir / ds_file.FILE).read_bytes() == original
    assert not (data_dir / ds_file.BACKUP).exists()
    assert app.test_client().get("/api/settings", headers=HEADERS).status_code == 200
