"""Webhook triggers and their delivery rows (one per admitted delivery; it holds the event-id claim)."""
from sqlalchemy import Boolean, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, mapped_column

from core.db import Model, UTCDateTime

# defaultInputs may reach 256 KiB; MySQL's TEXT stops at 64 KiB.
LongText = Text().with_variant(mysql.LONGTEXT(), "mysql")


class WebhookTrigger(Model):
    __tablename__ = "webhook_triggers"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    workflow_id: Mapped[str] = mapped_column(String(36), nullable=False, index=True)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    default_inputs: Mapped[str] = mapped_column(LongText, nullable=False)
    permission_mode: Mapped[str] = mapped_column(String(8), nullable=False)
    # sha256 hex of the secret; emptied when the trigger is disabled.
    secret_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    active: Mapped[bool] = mapped_column(Boolean, nullable=False)
    created_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False)
    secret_rotated_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False)
    disabled_at: Mapped[object | None] = mapped_column(UTCDateTime, nullable=True)
    disabled_reason: Mapped[str | None] = mapped_column(String(40), nullable=True)


class WebhookDelivery(Model):
    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        # The event-id claim: concurrent deliveries of one event id can insert only one row.
        # Rows without an event id have a NULL key, which never collides.
        UniqueConstraint("trigger_id", "event_key", name="uq_webhook_deliveries_event"),
        Index("ix_webhook_deliveries_trigger_received", "trigger_id", "received_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    trigger_id: Mapped[str] = mapped_column(String(36), ForeignKey("webhook_triggers.id", ondelete="CASCADE"),
                                            nullable=False)
    # sha256 hex of the X-Service-Event-Id value: the id itself is never stored.
    event_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    task_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    run_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    received_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False)
    idempotency_key_supplied: Mapped[bool] = mapped_column(Boolean, nullable=False)
