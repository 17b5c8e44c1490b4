"""SQLite's write-ahead log is copied into the database by the host's background checkpointer,
not by the commits of requests and tasks."""
import sqlite3

import gevent

from core.db import AUTOCHECKPOINT_PAGES
from tests.conftest import HEADERS


def db_file(host):
    return host.db.url.database


def rows_in_the_database_file(path):
    """Notification titles as the main database file holds them, ignoring the log (immutable=1)."""
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        return {title for (title,) in conn.execute("SELECT title FROM notifications")}
    except sqlite3.OperationalError:  # not even the table yet: the migrations are still in the log
        return set()
    finally:
        conn.close()


def create_note(client, title):
    resp = client.post("/api/notifications", json={"source": "host", "level": "info", "title": title},
                       headers=HEADERS)
    assert resp.status_code == 201, resp.get_data(as_text=True)


def wait_for(predicate, timeout=5.0):
    with gevent.Timeout(timeout, AssertionError("condition not reached")):
        while not predicate():
            gevent.sleep(0.02)


def test_committed_rows_reach_the_database_file_without_a_commit_checkpointing(make_app):
    app = make_app(config={"service.sqlite-checkpoint-seconds": 0.05})
    host, client = app.extensions["agenthost"], app.test_client()
    with host.db.engine.connect() as conn:
        # The connections' own checkpoint is only a backstop far above SQLite's 1000 pages.
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == AUTOCHECKPOINT_PAGES
    create_note(client, "first")
    wait_for(lambda: "first" in rows_in_the_database_file(db_file(host)))
    create_note(client, "second")
    wait_for(lambda: {"first", "second"} <= rows_in_the_database_file(db_file(host)))


def test_an_idle_log_is_not_checkpointed_again(make_app):
    app = make_app(config={"service.sqlite-checkpoint-seconds": 0.02})
    host, client = app.extensions["agenthost"], app.test_client()
    checkpointer = host.db._checkpointer
    calls = []
    original = checkpointer.checkpoint
    checkpointer.checkpoint = lambda: calls.append(1) or original()
    create_note(client, "once")
    wait_for(lambda: calls)
    settled = len(calls)
    gevent.sleep(0.3)  # 15 intervals with no writes
    assert len(calls) == settled
    create_note(client, "again")
    wait_for(lambda: len(calls) > settled)


def test_the_checkpointer_stops_with_the_host(make_app):
    app = make_app(config={"service.sqlite-checkpoint-seconds": 0.02})
    host = app.extensions["agenthost"]
    checkpointer = host.db._checkpointer
    assert checkpointer is not None and not checkpointer._greenlet.dead
    greenlet = checkpointer._greenlet
    host.stop()
    assert greenlet.dead and host.db is None
