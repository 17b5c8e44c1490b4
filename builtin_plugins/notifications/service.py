"""Notification center logic: persist first, then hook, then fan out."""
from sqlalchemy import delete, func, select, update

from core.db import isoformat, utcnow
from core.errors import NotFound

from .models import Notification

CHANNEL = "notifications"


def view(row):
    return {
        "id": row.id, "source": row.source, "level": row.level, "title": row.title,
        "body": row.body, "link": row.link, "read": bool(row.read),
        "createdAt": isoformat(row.created_at), "readAt": isoformat(row.read_at),
    }


class NotificationCenter:
    """The notifications service; other areas reach it with ``host.service("notifications")``."""

    def __init__(self, host):
        self.host = host

    def create(self, source, level, title, body=None, link=None):
        retained = self.host.config["notifications.retained"]
        with self.host.db.session() as s:
            row = Notification(source=source, level=level, title=title, body=body, link=link,
                               read=False, created_at=utcnow())
            s.add(row)
            s.flush()
            # Keep the newest `retained` rows per install; the oldest go.
            threshold = s.execute(select(Notification.id).order_by(Notification.id.desc())
                                  .offset(retained - 1).limit(1)).scalar()
            if threshold is not None:
                s.execute(delete(Notification).where(Notification.id < threshold))
            note = view(row)
        self.host.plugins.notify("notification_created", host=self.host, notification=note)
        self.host.events.publish(CHANNEL, "notification", note)
        return note

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
        with self.host.db.session() as s:
            row = s.get(Notification, note_id)
            if row is None:
                raise NotFound("notification")
            if not row.read:  # idempotent: the first read time stays
                row.read = True
                row.read_at = utcnow()
            return view(row)

    def read_all(self):
        with self.host.db.session() as s:
            result = s.execute(update(Notification).where(Notification.read.is_(False))
                               .values(read=True, read_at=utcnow()))
            return {"ok": True, "updated": result.rowcount}

    def delete(self, note_id):
        with self.host.db.session() as s:
            row = s.get(Notification, note_id)
            if row is None:
                raise NotFound("notification")
            s.delete(row)
        return {"ok": True, "id": note_id}
