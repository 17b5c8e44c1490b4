"""Shared fixtures: apps built by the factory, real database backends, a live loopback server."""
from gevent import monkey

monkey.patch_all()

import os  # noqa: E402
import secrets  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
import pytest  # noqa: E402
from gevent.pywsgi import WSGIServer  # noqa: E402

from core import datasource as ds_file  # noqa: E402
from core.app import create_app  # noqa: E402
from core.config import Config  # noqa: E402

TOKEN = "test-token-" + "x" * 20
HEADERS = {"X-Service-Token": TOKEN}
ON_CI = os.environ.get("CI", "").lower() == "true"

SERVICES = {
    "postgresql": ("127.0.0.1", 5432),
    "mysql": ("127.0.0.1", 3306),
    "redis": ("127.0.0.1", 6379),
}


def service_up(name):
    try:
        with socket.create_connection(SERVICES[name], timeout=1):
            return True
    except OSError:
        return False


def require_service(name):
    """On CI a missing service is a failure, never a skip; elsewhere it skips."""
    if service_up(name):
        return
    message = f"{name} is not reachable on {SERVICES[name][0]}:{SERVICES[name][1]}"
    if ON_CI:
        pytest.fail(message + " (CI=true: required)")
    pytest.skip(message)


def _fresh_postgres():
    import psycopg

    name = "ah_" + secrets.token_hex(6)
    with psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop():
        with psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    params = {"host": "127.0.0.1", "port": 5432, "database": name, "user": "postgres", "password": None}
    return {"type": "postgresql", "params": params}, drop


def _fresh_mysql():
    import pymysql

    name = "ah_" + secrets.token_hex(6)
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="")
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    conn.close()

    def drop():
        c = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="")
        with c.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        c.close()

    params = {"host": "127.0.0.1", "port": 3306, "database": name, "user": "root", "password": None}
    return {"type": "mysql", "params": params}, drop


@pytest.fixture
def fresh_datasource(request):
    """``fresh_datasource(kind)`` -> a datasource dict for a brand-new, empty database."""
    drops = []

    def make(kind):
        if kind == "sqlite":
            return {"type": "sqlite", "params": {"path": f"db-{secrets.token_hex(4)}.sqlite"}}
        require_service(kind)
        datasource, drop = _fresh_postgres() if kind == "postgresql" else _fresh_mysql()
        drops.append(drop)
        return datasource

    yield make
    for drop in drops:
        try:
            drop()
        except Exception:
            pass


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def backend(request):
    """Parametrises a test over every database backend."""
    return request.param


@pytest.fixture
def data_dir(tmp_path):
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def make_app(data_dir, fresh_datasource):
    """Build an app in APP mode (or SETUP with ``setup=True``) on a fresh database.

    ``make_app(plugins=[...], backend="postgresql", config={...})``. Apps built in
    one test share the data directory unless ``data_dir=`` is given.
    """
    hosts = []

    def make(plugins=(), *, backend="sqlite", config=None, setup=False, data_dir=data_dir,
             datasource=None, load_entry_points=False):
        if not setup and ds_file.read(data_dir) is None:
            ds_file.write(data_dir, datasource or fresh_datasource(backend))
        values = {"service.auth.token": TOKEN, "service.data-dir": str(data_dir)}
        values.update(config or {})
        app = create_app(Config(values), plugins, load_entry_points=load_entry_points)
        hosts.append(app.extensions["agenthost"])
        return app

    yield make
    for host in hosts:
        host.stop()


@pytest.fixture
def app(make_app):
    return make_app()


@pytest.fixture
def client(app):
    c = app.test_client()
    c.environ_base["HTTP_X_SERVICE_TOKEN"] = TOKEN
    return c


@pytest.fixture
def live_server():
    """``live_server(app)`` serves the app on a loopback port in this process; returns the base URL."""
    servers = []

    def start(app):
        from core.launcher import bind

        listener = bind(0)
        server = WSGIServer(listener, app, log=None, error_log=None)
        server.start()
        servers.append(server)
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    yield start
    for server in servers:
        server.stop(timeout=1)


class ServeProcess:
    """A real ``core serve`` child process."""

    def __init__(self, proc, port, token):
        self.proc, self.port, self.token = proc, port, token
        self.url = f"http://127.0.0.1:{port}"
        self.headers = {"X-Service-Token": token}

    def stop(self, sig=None):
        import signal
        if self.proc.poll() is None:
            self.proc.send_signal(sig or signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        return self.proc.returncode


@pytest.fixture
def serve_process():
    """``serve_process(data_dir, *args)`` starts ``core serve`` and waits for SERVICE_PORT."""
    procs = []

    def start(data_dir, *args, token=TOKEN, port="0", env=None, timeout=20):
        cmd = [sys.executable, "-m", "core", "serve", f"--token={token}", f"--port={port}",
               f"--data-dir={data_dir}", *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, **(env or {})})
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("SERVICE_PORT="):
                p = ServeProcess(proc, int(line.strip().split("=", 1)[1]), token)
                procs.append(p)
                return p
            if not line and proc.poll() is not None:
                break
            gevent.sleep(0)
        proc.kill()
        raise AssertionError(f"core serve did not announce a port: {line!r} {proc.stderr.read()}")

    yield start
    for p in procs:
        p.stop()
        for stream in (p.proc.stdout, p.proc.stderr):
            stream.close()
