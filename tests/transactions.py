"""Test helper: the statements of each transaction an engine commits, seen through its events."""
from contextlib import contextmanager

from sqlalchemy import event


@contextmanager
def committed_transactions(engine):
    """Yields a list that fills with one list of statements per committed transaction.

    Each statement is given by its first three words, upper-cased ("INSERT INTO TASKS").
    Statements are kept per connection, since transactions interleave on PostgreSQL and
    MySQL; a rolled-back transaction's statements are dropped.
    """
    committed, open_ = [], {}

    def statement(conn, cursor, sql, parameters, context, executemany):
        open_.setdefault(id(conn), []).append(" ".join(sql.split()[:3]).upper())

    def commit(conn):
        committed.append(open_.pop(id(conn), []))

    def rollback(conn):
        open_.pop(id(conn), None)

    listeners = (("before_cursor_execute", statement), ("commit", commit), ("rollback", rollback))
    for name, listener in listeners:
        event.listen(engine, name, listener)
    try:
        yield committed
    finally:
        for name, listener in listeners:
            event.remove(engine, name, listener)


def counts(transactions, statement):
    """How many times ``statement`` ran in each committed transaction that ran it at all."""
    return [n for n in (t.count(statement) for t in transactions) if n]
