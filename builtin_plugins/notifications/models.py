"""Notification table."""
from sqlalchemy import Boolean, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from core.db import Model, UTCDateTime, utcnow


class Notification(Model):
    __tablename__ = "notifications"
    # Ids are never reused (clients deduplicate live events by id); see migration 0002.
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(80), nullable=False)
    level: Mapped[str] = mapped_column(String(16), nullable=False)
    title: Mapped[str] = mapped_column(String(200), nullable=False)
    body: Mapped[str | None] = mapped_column(Text, nullable=True)
    link: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    read: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    created_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
    read_at: Mapped[object | None] = mapped_column(UTCDateTime, nullable=True)
