"""The schedules table: one row per durable workflow schedule, active until cancelled or ended."""
from sqlalchemy import Boolean, Index, Integer, String, Text
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, mapped_column

from core.db import Model, UTCDateTime

# MySQL's TEXT holds 64 KiB; inputs may reach the 256 KiB body limit.
LongText = Text().with_variant(mysql.LONGTEXT(), "mysql")

ACTIVE, CANCELLED, EXPIRED, COMPLETED, FAILED = "active", "cancelled", "expired", "completed", "failed"


class Schedule(Model):
    __tablename__ = "schedules"
    __table_args__ = (Index("ix_schedules_state_next", "state", "next_fire_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), nullable=False)
    workflow_id: Mapped[str] = mapped_column(String(36), nullable=False, index=True)
    inputs: Mapped[str] = mapped_column(LongText, nullable=False)
    interval_seconds: Mapped[int | None] = mapped_column(Integer, nullable=True)
    recurring: Mapped[bool] = mapped_column(Boolean, nullable=False)
    calendar: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The first regular fire (creation + interval, or the calendar's first) is still ahead of
    # a pending fireImmediately fire: a one-shot interval schedule must not end at the extra one.
    immediate_pending: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    next_fire_at: Mapped[object | None] = mapped_column(UTCDateTime, nullable=True)
    fires: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    missed_fires: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    last_task_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    last_run_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    last_fired_at: Mapped[object | None] = mapped_column(UTCDateTime, nullable=True)
    expires_at: Mapped[object | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False)
    ended_at: Mapped[object | None] = mapped_column(UTCDateTime, nullable=True)
