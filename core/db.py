"""The database: engine per datasource, sessions, the startup probe and Alembic migrations."""
import datetime as dt
import functools
import logging
import re
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import DateTime, bindparam, create_engine, event, text, update
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
    return (update(table)
            .where(*[table.c[k] == bindparam("k_" + k, type_=table.c[k].type) for k in keys])
            .values({c: bindparam("v_" + c, type_=table.c[c].type) for c in columns}))


def update_where(conn, table, where, values):
    """``UPDATE table SET values WHERE column = value ...`` through a statement built once per shape.

    Hot paths (a run's status and step changes) would otherwise rebuild the statement
    and its cache key on every call, which costs more than the database's own work.
    Returns the result (``rowcount``).
    """
    stmt = _update_statement(table, tuple(where), tuple(values))
    params = {"k_" + k: v for k, v in where.items()}
    params.update({"v_" + c: v for c, v in values.items()})
    return conn.execute(stmt, params)


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

    def dispose(self):
        self.engine.dispose()


def _sqlite_pragmas(dbapi_conn, _record):
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
