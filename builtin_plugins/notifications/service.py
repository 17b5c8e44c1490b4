"""Notification center logic: persist first, then hook, then fan out."""
import logging

from sqlalchemy import bindparam, delete, func, insert, select, update

from core.db import Prepared, Record, isoformat, utcnow
from core.errors import NotFound

from .models import Notification
from .schemas import NotificationIn

log = logging.getLogger("agenthost.notifications")

CHANNEL = "notifications"

# The id column is a 32-bit INTEGER on PostgreSQL and MySQL; a larger id in a URL
# cannot name a row, and handing it to the driver would fail with a 500.
MAX_ID = 2**31 - 1


_N = Notification.__table__
# The create path's statements, built once: the agent writes one notification per run end.
_INSERT = Prepared(insert(_N))
_PRUNE_THRESHOLD = Prepared(select(_N.c.id).order_by(_N.c.id.desc()).offset(bindparam("skip")).limit(1))
_PRUNE = Prepared(delete(_N).where(_N.c.id < bindparam("threshold")))
# One statement where the database allows a subquery on the table it deletes from (SQLite).
_PRUNE_OLDEST = Prepared(delete(_N).where(_N.c.id < (select(_N.c.id).order_by(_N.c.id.desc())
                                                     .offset(bindparam("skip")).limit(1).scalar_subquery())))
_CHECK = NotificationIn()  # a schema instance is reusable, and costly to build per call


def view(row):
    return {
        "id": row.id, "source": row.source, "level": row.level, "title": row.title,
        "body": row.body, "link": row.link, "read": bool(row.read),
        "createdAt": isoformat(row.created_at), "readAt": isoformat(row.read_at),
    }


def _check_id(note_id):
    if not 1 <= note_id <= MAX_ID:
        raise NotFound("notification")


class NotificationCenter:
    """The notifications service; other areas reach it with ``host.service("notifications")``."""

    def __init__(self, host):
        self.host = host

    def create(self, source, level, title, body=None, link=None):
        """Persist, prune to the retained count, call ``notification_created``, then broadcast.

        Input is validated here too, so producers other than the HTTP route (the plugin
        bridge, the agent) cannot store what the API would refuse; a bad value raises
        ``marshmallow.ValidationError``.
        """
        values = self.check(source, level, title, body, link)
        with self.host.db.engine.begin() as conn:
            note = self.insert(conn, values)
        self.announce(note)
        return note

    # A producer whose own transaction should carry the notification (a run's end) uses
    # the three steps of create: check before its transaction, insert in it, announce after.

    def check(self, source, level, title, body=None, link=None):
        """The row values of a notification, validated (``marshmallow.ValidationError``)."""
        fields = _CHECK.load({"source": source, "level": level, "title": title, "body": body, "link": link})
        return {**fields, "read": False, "created_at": utcnow(), "read_at": None}

    def insert(self, conn, values):
        """Write checked values on ``conn`` (the caller commits); returns the notification's view."""
        note_id = _INSERT.insert_id(conn, values)
        if self._serialised_writes:
            # SQLite runs one write transaction at a time, and this one sees every row
            # committed before it: pruning here is exact, and saves a transaction.
            self._prune_on(conn)
        return view(Record({**values, "id": note_id}))

    def announce(self, note):
        """After the insert committed: prune, call ``notification_created``, broadcast."""
        if not self._serialised_writes:
            self._prune()
        self.host.plugins.notify("notification_created", host=self.host, notification=note)
        self.host.events.publish(CHANNEL, "notification", note)

    def _prune(self):
        """Keep the newest ``notifications.retained`` rows; the oldest go (PostgreSQL, MySQL).

        This runs in its own transaction after the insert committed: a prune inside the
        insert's transaction cannot see rows that concurrent writers commit meanwhile,
        so racing creates could leave more rows than retained. Run afterwards, the prune
        of the last commit sees every row. A failed prune is only logged: the row is
        committed, and the next create prunes again.
        """
        try:
            with self.host.db.engine.begin() as conn:
                self._prune_on(conn)
        except Exception:
            log.warning("pruning old notifications failed; the next create retries", exc_info=True)

    def _prune_on(self, conn):
        if self._serialised_writes:
            _PRUNE_OLDEST.execute(conn, {"skip": self.host.config["notifications.retained"] - 1})
            return
        threshold = _PRUNE_THRESHOLD.first(conn, {"skip": self.host.config["notifications.retained"] - 1})
        if threshold is not None:
            _PRUNE.execute(conn, {"threshold": threshold.id})

    @property
    def _serialised_writes(self):
        return self.host.db.kind == "sqlite"

    def list(self, limit=50, unread_only=False):
        query = select(Notification).order_by(Notification.id.desc()).limit(limit)
        if unread_only:
            query = query.where(Notification.read.is_(False))
        with self.host.db.session() as s:
            return [view(r) for r in s.execute(query).scalars()]

    def unread_count(self):
        with self.host.db.session() as s:
            return s.execute(select(func.count()).select_from(Notification)
                             .where(Notification.read.is_(False))).scalar_one()

    def mark_read(self, note_id):
        """Acknowledge one. Idempotent: the first read time stays, even under racing reads."""
        _check_id(note_id)
        with self.host.db.session() as s:
            # One conditional UPDATE, so two racing reads cannot both stamp readAt.
            s.execute(update(Notification)
                      .where(Notification.id == note_id, Notification.read.is_(False))
                      .values(read=True, read_at=utcnow()))
            row = s.get(Notification, note_id)
            if row is None:
                raise NotFound("notification")
            return view(row)

    def read_all(self):
        with self.host.db.session() as s:
            result = s.execute(update(Notification).where(Notification.read.is_(False))
                               .values(read=True, read_at=utcnow()))
            return {"ok": True, "updated": result.rowcount}

    def delete(self, note_id):
        """Remove one. Of two racing deletes of one id, one succeeds and the other is a 404."""
        _check_id(note_id)
        with self.host.db.session() as s:
            result = s.execute(delete(Notification).where(Notification.id == note_id))
            if result.rowcount == 0:
                raise NotFound("notification")
        return {"ok": True, "id": note_id}
