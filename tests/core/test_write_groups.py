"""Group commit (core.write_groups.WriteGroup): writes ready together share one transaction, on every
backend; a failure in the group leaves each write to succeed or fail alone."""
import gevent
import gevent.event
import pytest
from sqlalchemy import Integer, String, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from core.datasource import engine_url
from core.db import Database, Model
from core.write_groups import WriteGroup
from tests.transactions import committed_transactions, counts


class Entry(Model):
    __tablename__ = "write_group_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    label: Mapped[str] = mapped_column(String(16), nullable=False)


_E = Entry.__table__


@pytest.fixture
def db(backend, fresh_datasource, tmp_path):
    url, connect_args = engine_url(tmp_path, fresh_datasource(backend))
    database = Database(url, connect_args)
    Model.metadata.create_all(database.engine, tables=[_E])
    yield database
    database.dispose()


@pytest.fixture
def commits(db):
    """Every transaction committed during the test (see tests/transactions.py)."""
    with committed_transactions(db.engine) as transactions:
        yield transactions


def inserts(commits):
    """The number of rows each committed transaction inserted (those without inserts left out)."""
    return counts(commits, "INSERT INTO WRITE_GROUP_ENTRIES")


def stored(db):
    with db.engine.connect() as conn:
        return dict(conn.execute(select(_E.c.id, _E.c.label).order_by(_E.c.id)).all())


def writer(n, label=None):
    def write(conn):
        conn.execute(insert(_E).values(id=n, label=label or f"row-{n}"))
        return n * 10
    return write


def together_started(*calls):
    """Start every call in its own greenlet in one turn of the event loop; returns the greenlets."""
    return [gevent.spawn(call) for call in calls]


def together(*calls):
    """Start every call in its own greenlet in one turn of the event loop; returns the greenlets, joined."""
    greenlets = [gevent.spawn(call) for call in calls]
    gevent.joinall(greenlets, timeout=30)
    return greenlets


def test_writes_ready_together_commit_once_and_each_caller_gets_its_answer(db, commits):
    group = WriteGroup(lambda: db.engine)
    done = []
    greenlets = together(*[lambda n=n: group.run(writer(n), committed=done.append) for n in range(1, 7)])
    assert [g.value for g in greenlets] == [10, 20, 30, 40, 50, 60]
    assert inserts(commits) == [6]
    assert sorted(done) == [10, 20, 30, 40, 50, 60]
    assert stored(db) == {n: f"row-{n}" for n in range(1, 7)}


def test_a_failing_write_rolls_the_group_back_and_each_writes_alone(db, commits):
    group = WriteGroup(lambda: db.engine)
    with db.engine.begin() as conn:
        conn.execute(insert(_E).values(id=3, label="taken"))
    commits.clear()
    undone = []
    calls = [lambda n=n: group.run(writer(n), undo=lambda n=n: undone.append(n)) for n in (1, 2, 3, 4)]
    greenlets = together(*calls)
    assert sorted(undone) == [1, 2, 3, 4]  # the group's transaction rolled back whole
    assert [g.value for g in greenlets if g.successful()] == [10, 20, 40]
    assert isinstance(greenlets[2].exception, IntegrityError)  # its own error, to its own caller
    assert inserts(commits) == [1, 1, 1]  # then each alone
    assert stored(db) == {1: "row-1", 2: "row-2", 3: "taken", 4: "row-4"}


def test_writers_that_arrive_during_a_group_form_the_next_one(db, commits):
    group = WriteGroup(lambda: db.engine, max_size=3)
    greenlets = together(*[lambda n=n: group.run(writer(n)) for n in range(1, 9)])
    assert [g.value for g in greenlets] == [n * 10 for n in range(1, 9)]
    assert inserts(commits) == [3, 3, 2]  # at most max_size per group; the leader hands over
    assert len(stored(db)) == 8
    # And the group is free again afterwards.
    assert group.run(writer(9)) == 90 and inserts(commits)[-1] == 1


def slowly(n, busy):
    """A write that keeps its group's transaction open for a while (others queue meanwhile)."""
    def write(conn):
        busy.set()
        gevent.sleep(0.2)
        return writer(n)(conn)
    return write


def test_a_writer_killed_while_it_waits_for_the_next_group_never_writes(db):
    group = WriteGroup(lambda: db.engine)
    busy = gevent.event.Event()
    first = together_started(lambda: group.run(slowly(1, busy)), lambda: group.run(writer(2)))
    busy.wait(10)
    waiting = gevent.spawn(group.run, writer(3))
    gevent.sleep(0.05)  # it queued behind the running group
    waiting.kill()
    gevent.joinall(first, timeout=10)
    assert [g.value for g in first] == [10, 20]
    assert stored(db) == {1: "row-1", 2: "row-2"}
    assert group.run(writer(4)) == 40  # nobody is left waiting for a leader
    assert stored(db) == {1: "row-1", 2: "row-2", 4: "row-4"}


def test_a_writer_killed_as_it_is_handed_the_lead_passes_it_on(db):
    group = WriteGroup(lambda: db.engine, max_size=2)
    busy, waiting = gevent.event.Event(), {}

    def kill_the_next_leader(_):
        # Runs right after the group commits, before the lead is handed to "third".
        waiting["third"].kill(block=False)

    first = together_started(lambda: group.run(slowly(1, busy), committed=kill_the_next_leader),
                             lambda: group.run(writer(2)))
    busy.wait(10)
    waiting["third"] = gevent.spawn(group.run, writer(3))
    fourth = gevent.spawn(group.run, writer(4))
    gevent.joinall([*first, fourth], timeout=10)
    assert [g.value for g in first] == [10, 20]
    assert fourth.value == 40  # the lead reached it
    assert stored(db) == {1: "row-1", 2: "row-2", 4: "row-4"}


def test_a_group_of_one_is_size_one(db, commits):
    group = WriteGroup(lambda: db.engine, max_size=1)
    greenlets = together(*[lambda n=n: group.run(writer(n)) for n in (1, 2, 3)])
    assert [g.value for g in greenlets] == [10, 20, 30]
    assert inserts(commits) == [1, 1, 1]
    with db.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(_E)).scalar() == 3
