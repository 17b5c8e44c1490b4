"""Prepared statements (core.db.Prepared) read and write exactly what SQLAlchemy would, on every backend."""
import datetime as dt

import pytest
from sqlalchemy import Boolean, Integer, String, Text, bindparam, event, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from core.db import Database, Model, Prepared, UTCDateTime, update_where
from core.datasource import engine_url


class Sample(Model):
    __tablename__ = "prepared_samples"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    n: Mapped[int] = mapped_column(Integer, nullable=False)
    body: Mapped[str | None] = mapped_column(Text, nullable=True)
    flag: Mapped[bool] = mapped_column(Boolean, nullable=False)
    at: Mapped[object | None] = mapped_column(UTCDateTime, nullable=True)


class Numbered(Model):
    __tablename__ = "prepared_numbered"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    label: Mapped[str] = mapped_column(String(16), nullable=False)


_S, _N = Sample.__table__, Numbered.__table__
NUMBERED = Prepared(insert(_N))
INSERT = Prepared(insert(_S))
BY_KIND = Prepared(select(_S).where(_S.c.kind == bindparam("kind")).order_by(_S.c.n))
# A constant in the statement itself ("big"), a named parameter, and a labelled aggregate.
COUNTS = Prepared(select(_S.c.kind, func.count().label("n"), func.max(_S.c.at).label("latest"))
                  .where(_S.c.kind != "big", _S.c.n >= bindparam("least")).group_by(_S.c.kind).order_by(_S.c.kind))

AT = dt.datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=dt.timezone.utc)


@pytest.fixture
def db(backend, fresh_datasource, tmp_path):
    url, connect_args = engine_url(tmp_path, fresh_datasource(backend))
    database = Database(url, connect_args)
    Model.metadata.create_all(database.engine, tables=[_S, _N])
    yield database
    database.dispose()


def row(id_, kind="small", n=1, **extra):
    return {"id": id_, "kind": kind, "n": n, "body": None, "flag": False, "at": None, **extra}


def test_rows_read_back_as_sqlalchemy_reads_them(db):
    with db.engine.begin() as conn:
        assert INSERT.execute(conn, row("a", body="é" * 3, flag=True, at=AT)) == 1
        INSERT.execute(conn, [row("b", n=2), row("c", n=3, at=AT.astimezone(dt.timezone(dt.timedelta(hours=5))))])
    with db.engine.connect() as conn:
        prepared = BY_KIND.rows(conn, {"kind": "small"})
        plain = [dict(r._mapping) for r in conn.execute(BY_KIND.statement, {"kind": "small"})]
    assert prepared == plain
    assert [r.id for r in prepared] == ["a", "b", "c"]
    assert prepared[0].at == AT and prepared[0].at.tzinfo is not None
    assert prepared[0].flag is True and prepared[1].flag is False
    assert prepared[2].at == AT  # stored as UTC whatever the zone it was given in


def test_constants_labels_and_parameters(db):
    with db.engine.begin() as conn:
        INSERT.execute(conn, [row("a", n=1, at=AT), row("b", n=5), row("c", "big", 9), row("d", "other", 7)])
    with db.engine.connect() as conn:
        counts = COUNTS.rows(conn, {"least": 2})
    assert [(r.kind, r.n, r.latest) for r in counts] == [("other", 1, None), ("small", 1, None)]
    with db.engine.connect() as conn:
        assert [(r.kind, r.n, r.latest) for r in COUNTS.rows(conn, {"least": 0})] == [
            ("other", 1, None), ("small", 2, AT)]


def test_update_where_counts_matched_rows(db):
    with db.engine.begin() as conn:
        INSERT.execute(conn, [row("a"), row("b")])
        assert update_where(conn, _S, {"id": "a", "kind": "small"}, {"n": 7, "at": AT}) == 1
        assert update_where(conn, _S, {"id": "a", "kind": "small"}, {"n": 7, "at": AT}) == 1  # unchanged still matches
        assert update_where(conn, _S, {"id": "a", "kind": "big"}, {"n": 8}) == 0
    with db.engine.connect() as conn:
        assert [(r.id, r.n, r.at) for r in BY_KIND.rows(conn, {"kind": "small"})] == [("b", 1, None), ("a", 7, AT)]


def test_driver_errors_are_sqlalchemy_errors_and_roll_back(db):
    with db.engine.begin() as conn:
        INSERT.execute(conn, row("a"))
    with pytest.raises(IntegrityError):
        with db.engine.begin() as conn:
            INSERT.execute(conn, row("b"))
            INSERT.execute(conn, row("a"))  # duplicate key: the whole transaction goes
    with db.engine.connect() as conn:
        assert [r.id for r in BY_KIND.rows(conn, {"kind": "small"})] == ["a"]
        assert conn.execute(select(func.count()).select_from(_S)).scalar() == 1


def test_a_missing_parameter_is_refused(db):
    with db.engine.begin() as conn:
        with pytest.raises(KeyError):
            BY_KIND.rows(conn, {})


def test_cursor_listeners_still_see_every_statement(db):
    """With a cursor event listener (instrumentation, the tests' fault injection), statements
    go through SQLAlchemy so the listener sees them, with the same results."""
    seen = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement.split()[0])

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        with db.engine.begin() as conn:
            INSERT.execute(conn, [row("a"), row("b", n=2)])
            assert Prepared(update(_S).where(_S.c.id == bindparam("k")).values(n=bindparam("v"))).execute(
                conn, {"k": "a", "v": 3}) == 1
        with db.engine.connect() as conn:
            assert [(r.id, r.n) for r in BY_KIND.rows(conn, {"kind": "small"})] == [("b", 2), ("a", 3)]
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    assert seen == ["INSERT", "UPDATE", "SELECT"]


def test_insert_id_is_the_key_the_database_generated(db):
    with db.engine.begin() as conn:
        first = NUMBERED.insert_id(conn, {"label": "a"})
        second = NUMBERED.insert_id(conn, {"label": "b"})
    assert isinstance(first, int) and second > first
    with db.engine.connect() as conn:
        assert dict(conn.execute(select(_N.c.id, _N.c.label)).all()) == {first: "a", second: "b"}


def test_sqlite_timestamps_are_stored_in_sqlalchemys_own_text_format(tmp_path):
    """UTCDateTime writes SQLite's text in one step; it must be exactly what SQLAlchemy writes,
    or ordering and equality against older rows would break."""
    from sqlalchemy import DateTime
    from sqlalchemy.dialects import sqlite

    dialect = sqlite.dialect()
    ours = UTCDateTime().bind_processor(dialect)
    theirs = DateTime().dialect_impl(dialect).bind_processor(dialect)
    samples = [AT, AT.replace(microsecond=0), AT.astimezone(dt.timezone(dt.timedelta(hours=-9, minutes=-30))),
               dt.datetime(1999, 12, 31, 23, 59, 59, 999999), dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)]
    for value in samples:
        naive_utc = (value.astimezone(dt.timezone.utc) if value.tzinfo else value).replace(tzinfo=None)
        assert ours(value) == theirs(naive_utc)
    assert ours(None) is None


def test_a_computed_parameter_is_computed_at_each_execution(db):
    counter = iter(range(1, 100))
    numbered = Prepared(insert(_S).values(id=bindparam("id"), kind="small", flag=False,
                                          n=bindparam("n", callable_=lambda: next(counter))))
    with db.engine.begin() as conn:
        numbered.execute(conn, {"id": "a"})
        numbered.execute(conn, {"id": "b"})
    with db.engine.connect() as conn:
        assert [(r.id, r.n) for r in BY_KIND.rows(conn, {"kind": "small"})] == [("a", 1), ("b", 2)]
