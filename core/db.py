"""The database: engine per datasource, sessions, the startup probe and Alembic migrations."""
import datetime as dt
import functools
import logging
import os
import re
import sqlite3
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import DateTime, Insert, bindparam, create_engine, event, text, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.pool import NullPool
from sqlalchemy.types import TypeDecorator

from . import datasource as ds_file

log = logging.getLogger("agenthost.db")

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


class Model(DeclarativeBase):
    """Base class of every area's tables (each area keeps its own in its models.py)."""


class UTCDateTime(TypeDecorator):
    """A UTC timestamp with microseconds on every backend, returned timezone-aware."""

    impl = DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect):
        if dialect.name == "mysql":
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime())

    def bind_processor(self, dialect):
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        # SQLite stores text: SQLAlchemy's own format for it, written in one step (this runs
        # for every timestamp of every hot statement).
        def process(value):
            if value is None:
                return None
            if value.tzinfo is not None:
                value = value.astimezone(dt.timezone.utc)
            return (f"{value.year:04d}-{value.month:02d}-{value.day:02d} {value.hour:02d}:{value.minute:02d}:"
                    f"{value.second:02d}.{value.microsecond:06d}")
        return process

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
        return value.replace(tzinfo=None)

    def process_result_value(self, value, dialect):
        return None if value is None else value.replace(tzinfo=dt.timezone.utc)


def utcnow():
    return dt.datetime.now(dt.timezone.utc)


def isoformat(value):
    """``2026-11-21T15:25:56.123Z``: the one timestamp format of the API."""
    if value is None:
        return None
    return value.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def connection_of(unit):
    """The Core connection of a unit of work: an ORM session's, or the given connection itself."""
    return unit.connection() if isinstance(unit, Session) else unit


class Record(dict):
    """Values written with a Core insert, read like the row they became (``record.status``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@functools.lru_cache(maxsize=512)
def _update_statement(table, keys, columns):
    return Prepared(update(table)
                    .where(*[table.c[k] == bindparam("k_" + k, type_=table.c[k].type) for k in keys])
                    .values({c: bindparam("v_" + c, type_=table.c[c].type) for c in columns}))


def update_where(conn, table, where, values):
    """``UPDATE table SET values WHERE column = value ...`` through a statement prepared once per shape.

    Hot paths (a run's status and step changes) would otherwise rebuild the statement
    and its cache key on every call, which costs more than the database's own work.
    Returns the number of rows matched.
    """
    stmt = _update_statement(table, tuple(where), tuple(values))
    params = {"k_" + k: v for k, v in where.items()}
    params.update({"v_" + c: v for c, v in values.items()})
    return stmt.execute(conn, params)


_REQUIRED = object()  # a bind that has no value of its own: the caller must give one


class _Computed:
    """A bind whose value comes from a callable at each execution (``bindparam(callable_=...)``)."""

    def __init__(self, compute):
        self.compute = compute


class Prepared:
    """A hot statement compiled once per dialect and run on the connection's DB-API cursor.

    SQLAlchemy's per-execution work (cache key, parameter construction, execution
    context, result wrapping) costs several times what SQLite spends on a small
    statement; the run and task hot paths execute a dozen per webhook delivery
    (docs/performance.md). The statement runs inside the caller's SQLAlchemy
    transaction (same DB-API connection); type conversion uses the columns' own bind and
    result processors, so values read and written are exactly what SQLAlchemy would
    produce. When the engine has cursor event listeners, or echoes SQL, execution goes
    through SQLAlchemy as usual so those still see every statement.

    ``execute`` returns the row count; ``rows`` the rows as ``Record`` objects.
    """

    def __init__(self, statement):
        self.original = statement  # what SQLAlchemy runs when it executes instead (keeps RETURNING)
        if isinstance(statement, Insert):
            statement = statement.inline()  # no implicit RETURNING on the cursor: see insert_id
        self.statement = statement
        self._plans = {}  # (dialect name, paramstyle, parameter keys) -> (sql, binds, positional, results)
        self._columns = (list(statement.selected_columns.keys())
                         if hasattr(statement, "selected_columns") else None)

    def _plan(self, dialect, keys):
        cache_key = (dialect.name, dialect.paramstyle, keys)
        plan = self._plans.get(cache_key)
        if plan is not None:
            return plan
        compiled = self.statement.compile(dialect=dialect, column_keys=list(keys) if keys else None)
        sql = compiled.string
        if "POSTCOMPILE" in sql:
            raise ValueError("a Prepared statement cannot have expanding or post-compiled parameters")
        names = compiled.positiontup if compiled.positional else list(compiled.bind_names.values())
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        binds = []
        for name in names:
            bind = by_name[name]
            if bind.required:
                default = _REQUIRED
            elif bind.callable is not None:
                default = _Computed(bind.callable)  # a value computed at each execution
            else:
                default = bind.value
            binds.append((name, bind.key, default, bind.type.dialect_impl(dialect).bind_processor(dialect)))
        results = None
        if self._columns is not None:
            results = [col.type.dialect_impl(dialect).result_processor(dialect, None)
                       for col in self.statement.selected_columns]
        plan = self._plans[cache_key] = (sql, binds, compiled.positional, results)
        return plan

    @staticmethod
    def _values(binds, positional, params):
        values = []
        for name, key, default, process in binds:
            value = params.get(key, default)
            if value is _REQUIRED:
                raise KeyError(f"no value for the parameter {key!r}")
            if type(value) is _Computed:
                value = value.compute()
            values.append(process(value) if process is not None else value)
        return values if positional else dict(zip((b[0] for b in binds), values))

    @staticmethod
    def _direct(conn):
        # Engine-level listeners only: nothing here listens on single connections.
        dispatch = conn.engine.dispatch
        return not (dispatch.before_cursor_execute or dispatch.after_cursor_execute or conn.engine.echo)

    def execute(self, conn, params=None):
        """Run it with one parameter dict, or a list of them (executemany); returns the row count
        (for a list, whatever the driver reports, which may be -1)."""
        if not self._direct(conn):
            return conn.execute(self.original, params).rowcount
        many = isinstance(params, list)
        first = (params[0] if many else params) or {}
        sql, binds, positional, _ = self._plan(conn.dialect, tuple(first))
        if many:
            values = [self._values(binds, positional, p) for p in params]
            return _on_cursor(conn, sql, values, _executemany)
        return _on_cursor(conn, sql, self._values(binds, positional, first), _execute)

    def insert_id(self, conn, params):
        """Run an INSERT of one row; returns the key the database generated for it.

        SQLite and MySQL report it on the cursor (``lastrowid``); PostgreSQL needs
        ``RETURNING``, so there SQLAlchemy runs it.
        """
        if not self._direct(conn) or conn.dialect.name not in ("sqlite", "mysql"):
            return conn.execute(self.original, params).inserted_primary_key[0]
        sql, binds, positional, _ = self._plan(conn.dialect, tuple(params))
        return _on_cursor(conn, sql, self._values(binds, positional, params), _lastrowid)

    def rows(self, conn, params=None):
        """The selected rows as ``Record`` objects (columns by name and as attributes)."""
        if not self._direct(conn):
            return [Record(row._mapping) for row in conn.execute(self.original, params)]
        sql, binds, positional, results = self._plan(conn.dialect, ())
        values = self._values(binds, positional, params or {})
        fetched = _on_cursor(conn, sql, values, _fetchall)
        columns = self._columns
        return [Record(zip(columns, [p(v) if p is not None else v for p, v in zip(results, row)]))
                for row in fetched]

    def first(self, conn, params=None):
        """The first selected row as a ``Record``, or None."""
        rows = self.rows(conn, params)
        return rows[0] if rows else None


def _execute(cursor, sql, values):
    cursor.execute(sql, values)
    return cursor.rowcount


def _executemany(cursor, sql, values):
    cursor.executemany(sql, values)
    return cursor.rowcount


def _lastrowid(cursor, sql, values):
    cursor.execute(sql, values)
    return cursor.lastrowid


def _fetchall(cursor, sql, values):
    cursor.execute(sql, values)
    return cursor.fetchall()


def _on_cursor(conn, sql, values, work):
    """``work(cursor, sql, values)`` on a new cursor of ``conn``'s DB-API connection, with the driver's
    errors raised as SQLAlchemy's (``IntegrityError``, ``OperationalError`` ...) and a lost
    connection invalidated, as ``Connection.execute`` would."""
    dialect = conn.dialect
    fairy = conn.connection
    raw = fairy.dbapi_connection
    # One cursor per DB-API connection, reused: results are always read whole before the
    # next statement, and creating a cursor per statement was a measurable share.
    kept = fairy.info.get("prepared_cursor")
    if kept is None or kept[0] is not raw:
        kept = fairy.info["prepared_cursor"] = (raw, raw.cursor())
    cursor = kept[1]
    try:
        return work(cursor, sql, values)
    except dialect.loaded_dbapi.Error as exc:
        fairy.info.pop("prepared_cursor", None)
        try:
            cursor.close()
        except Exception:  # a cursor of a lost connection
            pass
        disconnected = dialect.is_disconnect(exc, raw, cursor)
        if disconnected:
            conn.invalidate(exc)
        raise sa_exc.DBAPIError.instance(sql, values, exc, dialect.loaded_dbapi.Error,
                                         connection_invalidated=disconnected, dialect=dialect) from exc


class Database:
    """An engine and session factory for one datasource."""

    def __init__(self, url, connect_args=None):
        self.url = url
        self.kind = url.get_backend_name()
        kwargs = {"future": True}
        connect_args = dict(connect_args or {})
        self.connect_args = connect_args  # kept so the login timeout can be checked
        if self.kind == "sqlite":
            # Greenlets share pooled connections; sqlite's own thread check would refuse that.
            connect_args["check_same_thread"] = False
        else:
            kwargs.update(pool_pre_ping=True, pool_size=10, max_overflow=20, pool_recycle=1800)
        self.engine = create_engine(url, connect_args=connect_args, **kwargs)
        if self.kind == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._checkpointer = None

    @classmethod
    def from_datasource(cls, data_dir, datasource, timeout=5):
        url, connect_args = ds_file.engine_url(data_dir, datasource, timeout)
        if url.get_backend_name() == "sqlite":
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        return cls(url, connect_args)

    def probe(self):
        """Run the trivial query within the login timeout; raises on any failure."""
        engine = self.engine
        login_timeout = self.connect_args.get("connect_timeout")
        if self.kind == "mysql" and login_timeout:
            # pymysql's connect_timeout covers only the TCP connect: the server greeting and
            # the login are read under read_timeout. The probe gets a connection of its own
            # whose every step is bounded by the login timeout.
            engine = create_engine(self.url, poolclass=NullPool, connect_args={
                **self.connect_args, "read_timeout": login_timeout, "write_timeout": login_timeout})
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        finally:
            if engine is not self.engine:
                engine.dispose()

    @contextmanager
    def session(self):
        """A unit of work: commits on success, rolls back on error."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def migrate(self, folders, version_table="alembic_version"):
        """Upgrade one plugin's migration folders to their head.

        Each plugin keeps its own version table, so a disabled plugin's applied
        revisions never confuse another plugin's upgrade, and one plugin's broken
        migration cannot block the others.
        """
        from alembic.config import Config as AlembicConfig
        from alembic.runtime.environment import EnvironmentContext
        from alembic.script import ScriptDirectory

        folders = [str(f) for f in folders]
        if not folders:
            return
        script = ScriptDirectory(str(MIGRATIONS_DIR), version_locations=folders)

        def upgrade(rev, context):
            return script._upgrade_revs("heads", rev)

        with self.engine.begin() as conn:
            env = EnvironmentContext(AlembicConfig(), script, fn=upgrade,
                                     destination_rev="heads")
            with env:
                env.configure(connection=conn, version_table=version_table)
                with env.begin_transaction():
                    env.run_migrations()

    @staticmethod
    def version_table(plugin_name):
        return "alembic_version_" + re.sub(r"[^a-z0-9_]", "_", plugin_name.lower())[:40]

    def start_background_checkpoints(self, interval=1.0):
        """SQLite: copy the write-ahead log into the database from a native thread (see WalCheckpointer)."""
        if self.kind == "sqlite" and self._checkpointer is None and self.url.database not in (None, "", ":memory:"):
            self._checkpointer = WalCheckpointer(self.url.database, interval)
            self._checkpointer.start()

    def dispose(self):
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        self.engine.dispose()


# Every connection checkpoints the write-ahead log itself once it holds this many pages:
# the backstop. With the host's WalCheckpointer running, the log rarely gets there.
AUTOCHECKPOINT_PAGES = 10000


def _sqlite_pragmas(dbapi_conn, _record):
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")
    cur.close()


class WalCheckpointer:
    """Checkpoints an SQLite database's write-ahead log in a native thread.

    By default SQLite checkpoints inside the commit that takes the log past 1000 pages:
    that commit copies 4 MB into the database file and syncs it, on the host's one
    event-loop thread, while every request and task waits (measured: 1 % of commits
    took 46 % of all commit time, up to 5 ms each). Here a greenlet looks at the log
    file once per ``interval`` (a stat, nothing else, while idle) and, when it has
    changed, runs a PASSIVE checkpoint on its own connection in gevent's thread pool:
    SQLite releases the GIL while it copies and syncs, so that work leaves the
    event loop's core. PASSIVE never blocks writers or readers; what it cannot copy
    yet is copied next time.
    """

    def __init__(self, path, interval):
        self.path = path
        self.interval = interval
        self._greenlet = None
        self._seen = None

    def start(self):
        import gevent
        self._greenlet = gevent.spawn(self._loop)

    def stop(self):
        # A checkpoint already running in its thread finishes there on its own connection.
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=5)
            self._greenlet = None

    def _loop(self):
        import gevent
        pool = gevent.get_hub().threadpool
        while True:
            gevent.sleep(self.interval)
            try:
                stat = os.stat(self.path + "-wal")
            except OSError:
                continue
            seen = (stat.st_mtime_ns, stat.st_size)
            if seen == self._seen:
                continue
            try:
                pool.apply(self.checkpoint)
                self._seen = seen
            except Exception:
                log.warning("checkpointing the SQLite log failed; trying again later", exc_info=True)

    def checkpoint(self):
        """One PASSIVE checkpoint (in the calling thread); returns SQLite's (busy, log pages, copied pages).

        A connection of its own each time (at most once per interval): nothing is shared
        with the thread that may still be running one when the host stops.
        """
        conn = sqlite3.connect(self.path, timeout=5, isolation_level=None)
        try:
            return conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            conn.close()
