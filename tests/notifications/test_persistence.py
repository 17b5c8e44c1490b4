"""Notification persistence: every backend, restarts, racing writers, SIGKILL, upgrades."""
import gevent
import requests
from sqlalchemy import inspect, select, text

from builtin_plugins.notifications.models import Notification
from core import datasource as ds_file
from core.db import Database, utcnow
from tests.conftest import HEADERS
from tests.notifications.support import NOTE, authed

TITLE = ("Ünïcødé ✓ 🚀 " * 20)[:200]
BODY = ("Zeile ü 你好 🚀\n" * 300)[:4000]
LINK = "https://example.test/" + "p" * (2048 - len("https://example.test/"))


def stored_ids(app):
    with app.extensions["agenthost"].db.session() as s:
        return list(s.execute(select(Notification.id).order_by(Notification.id)).scalars())


def test_round_trip_and_restart_on_every_backend(make_app, backend):
    app = make_app(backend=backend)
    client = authed(app)
    full = client.post("/api/notifications", json={
        "source": "plugin:com.example.hello", "level": "warning",
        "title": TITLE, "body": BODY, "link": LINK}).json
    assert (full["title"], full["body"], full["link"]) == (TITLE, BODY, LINK)
    plain = client.post("/api/notifications", json={**NOTE, "source": "agent"}).json
    doomed = client.post("/api/notifications", json={**NOTE, "level": "error"}).json
    assert client.get("/api/notifications").json == [doomed, plain, full]

    first_read = client.post(f"/api/notifications/{full['id']}/read").json
    assert client.post(f"/api/notifications/{full['id']}/read").json == first_read
    assert client.get("/api/notifications/unread-count").json == {"count": 2}
    assert client.delete(f"/api/notifications/{doomed['id']}").status_code == 200
    assert client.get("/api/notifications?unreadOnly=true").json == [plain]
    for unknown in (doomed["id"], 2147483647, 2147483648):
        assert client.post(f"/api/notifications/{unknown}/read").status_code == 404
        assert client.delete(f"/api/notifications/{unknown}").status_code == 404
    before = client.get("/api/notifications").json
    assert before == [plain, first_read]

    app.extensions["agenthost"].stop()
    restarted = authed(make_app(backend=backend))  # same data directory, same datasource
    assert restarted.get("/api/notifications").json == before
    assert restarted.post("/api/notifications/read-all").json == {"ok": True, "updated": 1}
    after = restarted.get("/api/notifications").json
    assert after[1] == first_read  # read-all leaves an earlier read time alone
    # Ids are never reused, even the deleted newest one after a restart.
    newest = restarted.post("/api/notifications", json=NOTE).json
    assert newest["id"] > doomed["id"]


def test_racing_writers_on_every_backend(make_app, backend, live_server):
    app = make_app(backend=backend)
    base = live_server(app)

    def post(i):
        return requests.post(f"{base}/api/notifications", json={**NOTE, "title": f"w{i}"},
                             headers=HEADERS, timeout=30)

    jobs = [gevent.spawn(post, i) for i in range(20)]
    gevent.joinall(jobs, raise_error=True)
    created = [job.value for job in jobs]
    assert [r.status_code for r in created] == [201] * 20
    ids = [r.json()["id"] for r in created]
    assert len(set(ids)) == 20
    assert stored_ids(app) == sorted(ids)
    listed = authed(app).get("/api/notifications?limit=100").json
    assert [n["id"] for n in listed] == sorted(ids, reverse=True)
    assert {n["title"] for n in listed} == {f"w{i}" for i in range(20)}

    target = ids[0]
    reads = [gevent.spawn(requests.post, f"{base}/api/notifications/{target}/read",
                          headers=HEADERS, timeout=30) for _ in range(10)]
    gevent.joinall(reads, raise_error=True)
    assert {job.value.status_code for job in reads} == {200}
    assert len({job.value.json()["readAt"] for job in reads}) == 1  # one read time, however raced

    deletes = [gevent.spawn(requests.delete, f"{base}/api/notifications/{target}",
                            headers=HEADERS, timeout=30) for _ in range(10)]
    gevent.joinall(deletes, raise_error=True)
    assert sorted(job.value.status_code for job in deletes) == [200] + [404] * 9
    assert target not in stored_ids(app)


def test_retention_holds_under_racing_writers_on_every_backend(make_app, backend, live_server):
    app = make_app(backend=backend)
    with app.extensions["agenthost"].db.session() as s:
        s.add_all(Notification(source="host", level="info", title=f"old{i}", read=False,
                               created_at=utcnow()) for i in range(190))
    old = stored_ids(app)
    base = live_server(app)
    jobs = [gevent.spawn(requests.post, f"{base}/api/notifications", json=NOTE,
                         headers=HEADERS, timeout=30) for _ in range(20)]
    gevent.joinall(jobs, raise_error=True)
    assert {job.value.status_code for job in jobs} == {201}
    new = sorted(job.value.json()["id"] for job in jobs)
    assert stored_ids(app) == old[10:] + new


def test_sigkill_loses_no_committed_notification(data_dir, serve_process):
    ds_file.write(data_dir, {"type": "sqlite", "params": {}})
    host = serve_process(data_dir)
    with requests.Session() as http:
        http.headers.update(HEADERS)
        ids = [http.post(f"{host.url}/api/notifications",
                         json={**NOTE, "title": f"k{i}"}).json()["id"] for i in range(25)]
        http.post(f"{host.url}/api/notifications/{ids[3]}/read")
        http.delete(f"{host.url}/api/notifications/{ids[7]}")
        http.delete(f"{host.url}/api/notifications/{ids[-1]}")
        last = http.post(f"{host.url}/api/notifications", json={**NOTE, "title": "last"}).json()
        before = http.get(f"{host.url}/api/notifications?limit=100").json()
    host.proc.kill()  # SIGKILL: no shutdown hook, no checkpoint
    host.proc.wait(10)
    assert len(before) == 24 and before[0] == last

    again = serve_process(data_dir)
    with requests.Session() as http:
        http.headers.update(HEADERS)
        assert http.get(f"{again.url}/api/notifications?limit=100").json() == before
        assert http.get(f"{again.url}/api/notifications/unread-count").json() == {"count": 23}
        assert http.post(f"{again.url}/api/notifications", json=NOTE).json()["id"] > last["id"]


INSERT = text("INSERT INTO notifications (source, level, title, read, created_at) "
              "VALUES ('host', 'info', :title, 0, '2026-01-01 00:00:00.000000')")


def upgrade_to(db, folders, revision):
    """Run the notification migrations up to ``revision`` only (the host always goes to heads)."""
    from alembic.config import Config as AlembicConfig
    from alembic.runtime.environment import EnvironmentContext
    from alembic.script import ScriptDirectory

    from core.db import MIGRATIONS_DIR

    script = ScriptDirectory(str(MIGRATIONS_DIR), version_locations=folders)
    with db.engine.begin() as conn:
        env = EnvironmentContext(AlembicConfig(), script, destination_rev=revision,
                                 fn=lambda rev, ctx: script._upgrade_revs(revision, rev))
        with env:
            env.configure(connection=conn)
            with env.begin_transaction():
                env.run_migrations()


def test_upgrading_a_sqlite_database_keeps_rows_and_stops_id_reuse(data_dir):
    """Migration 0002 rebuilds the SQLite table with AUTOINCREMENT and loses nothing."""
    from builtin_plugins.notifications import plugin

    folders = [str(f) for f in plugin.register_models(host=None)]
    db = Database.from_datasource(data_dir, {"type": "sqlite", "params": {}})
    try:
        upgrade_to(db, folders, "notifications_0001")
        with db.engine.begin() as conn:
            for title in ("a", "b", "c"):
                conn.execute(INSERT, {"title": title})
            conn.execute(text("DELETE FROM notifications WHERE title = 'c'"))

        db.migrate(folders)
        with db.engine.begin() as conn:
            rows = conn.execute(text("SELECT id, title FROM notifications ORDER BY id")).all()
            assert [tuple(r) for r in rows] == [(1, "a"), (2, "b")]
            newest = conn.execute(INSERT, {"title": "d"}).lastrowid
            conn.execute(text("DELETE FROM notifications WHERE id = :id"), {"id": newest})
            after = conn.execute(INSERT, {"title": "e"}).lastrowid
        assert after > newest  # before 0002, 'e' took the deleted newest id again
        indexes = {ix["name"] for ix in inspect(db.engine).get_indexes("notifications")}
        assert "ix_notifications_read_id" in indexes
    finally:
        db.dispose()
