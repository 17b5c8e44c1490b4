"""Optimistic concurrency under real concurrent writers, and large documents, on every database backend."""
import secrets

import gevent
import gevent.event
import pytest
import sqlalchemy as sa

from core import datasource as ds_file
from core.app import create_app
from core.config import Config
from tests.conftest import HEADERS, TOKEN, _fresh_mysql, _fresh_postgres, require_service
from tests.workflows.support import FlowTools, body, create, get, tools_of

WRITERS = 8


@pytest.fixture(scope="module", params=["sqlite", "postgresql", "mysql"])
def backend_app(request, tmp_path_factory):
    """One app per database backend for the whole module (building one migrates every area)."""
    drop = None
    if request.param == "sqlite":
        datasource = {"type": "sqlite", "params": {"path": f"db-{secrets.token_hex(4)}.sqlite"}}
    else:
        require_service(request.param)
        datasource, drop = _fresh_postgres() if request.param == "postgresql" else _fresh_mysql()
    data_dir = tmp_path_factory.mktemp("data")
    ds_file.write(data_dir, datasource)
    app = create_app(Config({"service.auth.token": TOKEN, "service.data-dir": str(data_dir)}), [FlowTools()],
                     load_entry_points=False)
    assert app.extensions["agenthost"].db.kind == {"postgresql": "postgresql", "mysql": "mysql"}.get(
        request.param, "sqlite")
    yield app
    app.extensions["agenthost"].stop()
    if drop:
        drop()


def lock_waits(conn):
    """How many sessions of this database wait for a row lock (the holder is the only one holding one)."""
    if conn.dialect.name == "postgresql":
        sql = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
               "AND wait_event_type = 'Lock'")
    else:
        # MariaDB's innodb_trx lags; the process list shows every statement queued on the row.
        sql = ("SELECT count(*) FROM information_schema.processlist WHERE db = DATABASE() "
               "AND id <> CONNECTION_ID() AND command = 'Query' "
               "AND (info LIKE 'UPDATE workflows %' OR info LIKE '%FOR UPDATE%')")
    count = conn.execute(sa.text(sql)).scalar()
    conn.rollback()  # PostgreSQL keeps one statistics snapshot per transaction
    return count


def together(app, workflow_id, calls):
    """Run each ``call(client)`` in its own greenlet, all overlapping; returns the responses.

    Local databases answer so fast that greenlets would rarely overlap on their own. On
    PostgreSQL and MySQL the workflow's row is held locked until every request has read
    it and waits for the lock: then all of them act on the same revision at once. SQLite
    serialises writers anyway; there the requests are just released together.
    """
    db = app.extensions["agenthost"].db
    go = gevent.event.Event()

    def one(call):
        client = app.test_client()
        go.wait()
        return call(client)

    greenlets = [gevent.spawn(one, call) for call in calls]
    gevent.sleep(0)
    if db.kind == "sqlite":
        go.set()
    else:
        with db.engine.connect() as holder, db.engine.connect() as watcher:
            holder.execute(sa.select(sa.text("id")).select_from(sa.text("workflows"))
                           .where(sa.text("id = :id")).with_for_update(), {"id": workflow_id})
            go.set()
            deadline = gevent.get_hub().loop.now() + 20
            while lock_waits(watcher) < len(calls):
                assert gevent.get_hub().loop.now() < deadline, "the requests never queued on the row lock"
                assert not any(g.dead for g in greenlets), [g.value for g in greenlets]
                gevent.sleep(0.005)
            holder.commit()
    gevent.joinall(greenlets, timeout=30, raise_error=True)
    return [g.value for g in greenlets]


def test_concurrent_puts_with_one_expected_revision_let_exactly_one_win(backend_app):
    app = backend_app
    client = app.test_client()
    wf = create(client)

    def writer(n):
        return lambda c: c.put(f"/api/workflows/{wf['id']}", json=body(name=f"writer {n}", expectedRevision=1),
                               headers=HEADERS)

    responses = together(app, wf["id"], [writer(n) for n in range(WRITERS)])
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [409] * (WRITERS - 1), [r.get_json() for r in responses]
    winner = next(r.json for r in responses if r.status_code == 200)
    assert all(r.json["code"] == "stale_revision" for r in responses if r.status_code == 409)
    assert winner["revision"] == 2
    assert get(client, wf["id"]) == winner


def test_writers_that_read_the_same_revision_are_stopped_by_the_conditional_update(backend_app):
    """Without expectedRevision every writer passes the read check; the UPDATE ... WHERE revision still lets one win."""
    app = backend_app
    client = app.test_client()
    wf = create(client)

    def writer(n):
        return lambda c: c.put(f"/api/workflows/{wf['id']}", json=body(name=f"writer {n}"), headers=HEADERS)

    responses = together(app, wf["id"], [writer(n) for n in range(WRITERS)])
    assert {r.status_code for r in responses} <= {200, 409}, [r.get_json() for r in responses]
    wins = [r.json for r in responses if r.status_code == 200]
    assert get(client, wf["id"])["revision"] == 1 + len(wins)
    assert sorted(w["revision"] for w in wins) == list(range(2, 2 + len(wins)))
    if app.extensions["agenthost"].db.kind != "sqlite":
        # Every writer read revision 1 before any wrote: one wins, the rest lose at the UPDATE.
        assert len(wins) == 1
        assert {r.json["detail"] for r in responses if r.status_code == 409} == {
            "The draft changed meanwhile; reload it."}


def test_concurrent_publishes_make_one_snapshot(backend_app):
    app = backend_app
    client = app.test_client()
    wf = create(client)
    publish = lambda c: c.post(f"/api/workflows/{wf['id']}/publish", json={"published": True},  # noqa: E731
                               headers=HEADERS)
    responses = together(app, wf["id"], [publish] * 4)
    assert [r.status_code for r in responses] == [200] * 4, [r.get_json() for r in responses]
    revisions = client.get(f"/api/workflows/{wf['id']}/revisions", headers=HEADERS).json
    assert [(r["revision"], r["active"]) for r in revisions] == [(1, True)]
    assert get(client, wf["id"])["toolName"] in tools_of(client)


def test_a_publish_racing_an_edit_snapshots_only_what_it_saw(backend_app):
    app = backend_app
    client = app.test_client()
    wf = create(client)
    responses = together(app, wf["id"], [
        lambda c: c.post(f"/api/workflows/{wf['id']}/publish", json={"published": True, "expectedRevision": 1},
                         headers=HEADERS),
        lambda c: c.put(f"/api/workflows/{wf['id']}", json=body(name="edited", expectedRevision=1),
                        headers=HEADERS),
    ])
    published, edited = responses
    # Both read revision 1; whichever takes the row first wins, and the other never half-applies.
    assert {published.status_code, edited.status_code} <= {200, 409}
    assert 200 in (published.status_code, edited.status_code)
    snapshots = client.get(f"/api/workflows/{wf['id']}/revisions", headers=HEADERS).json
    if published.status_code == 200:
        snap = client.get(f"/api/workflows/{wf['id']}/revisions/1", headers=HEADERS).json
        assert snap["name"] == "Fetch report" and [s["revision"] for s in snapshots] == [1]
    else:
        assert snapshots == [] and get(client, wf["id"])["published"] is False
    if edited.status_code == 200:
        assert get(client, wf["id"])["name"] == "edited"


def test_a_delete_racing_publishes_leaves_no_tool_behind(backend_app):
    app = backend_app
    client = app.test_client()
    wf = create(client)
    publish = lambda c: c.post(f"/api/workflows/{wf['id']}/publish", json={"published": True},  # noqa: E731
                               headers=HEADERS)
    delete = lambda c: c.delete(f"/api/workflows/{wf['id']}", headers=HEADERS)  # noqa: E731
    responses = together(app, wf["id"], [publish, delete, publish])
    assert responses[1].status_code == 200, responses[1].get_json()
    assert {r.status_code for r in responses[::2]} <= {200, 404, 409}, [r.get_json() for r in responses]
    assert client.get(f"/api/workflows/{wf['id']}", headers=HEADERS).status_code == 404
    assert not [name for name in tools_of(client) if name.endswith(wf["id"][:8])]


def test_near_limit_documents_round_trip_on_every_backend(backend_app):
    client = backend_app.test_client()
    plan = {"goal": "big", "steps": [{"id": "a", "tool": "echo", "arguments": {"blob": "é" * (80 * 1024)}}]}
    graph = {"nodes": [{"id": "note", "type": "sticky-note", "data": {"text": "ü" * (150 * 1024)}}], "edges": []}
    layout = {str(i): {"x": i, "y": -i} for i in range(5000)}
    wf = create(client, plan=plan, graph=graph, layout=layout)
    again = get(client, wf["id"])
    assert again["plan"] == plan and again["graph"] == graph and again["layout"] == layout
    published = client.post(f"/api/workflows/{wf['id']}/publish", json={"published": True}, headers=HEADERS)
    assert published.status_code == 200, published.get_json()
    snap = client.get(f"/api/workflows/{wf['id']}/revisions/1", headers=HEADERS).json
    assert snap["plan"] == plan and snap["graph"] == graph


@pytest.mark.parametrize("name", ["Ünïcödé ✓ 日本語 🚀", "quote ' \" ; -- DROP TABLE workflows"])
def test_names_are_stored_as_sent(backend_app, name):
    client = backend_app.test_client()
    wf = create(client, name=name)
    assert get(client, wf["id"])["name"] == name
