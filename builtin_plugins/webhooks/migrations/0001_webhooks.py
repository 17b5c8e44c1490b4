"""webhook triggers and delivery rows

Revision ID: webhooks_0001
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from core.db import UTCDateTime

revision = "webhooks_0001"
down_revision = None
branch_labels = ("webhooks",)
depends_on = None

LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql")


def upgrade():
    op.create_table(
        "webhook_triggers",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("workflow_id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("default_inputs", LongText, nullable=False),
        sa.Column("permission_mode", sa.String(8), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("secret_rotated_at", UTCDateTime, nullable=False),
        sa.Column("disabled_at", UTCDateTime, nullable=True),
        sa.Column("disabled_reason", sa.String(40), nullable=True),
    )
    op.create_index("ix_webhook_triggers_owner", "webhook_triggers", ["owner"])
    op.create_index("ix_webhook_triggers_workflow_id", "webhook_triggers", ["workflow_id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("trigger_id", sa.String(36), sa.ForeignKey("webhook_triggers.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("event_key", sa.String(64), nullable=True),
        sa.Column("task_id", sa.String(36), nullable=True),
        sa.Column("run_id", sa.String(36), nullable=True),
        sa.Column("received_at", UTCDateTime, nullable=False),
        sa.Column("idempotency_key_supplied", sa.Boolean, nullable=False),
        sa.UniqueConstraint("trigger_id", "event_key", name="uq_webhook_deliveries_event"),
    )
    op.create_index("ix_webhook_deliveries_trigger_received", "webhook_deliveries", ["trigger_id", "received_at"])


def downgrade():
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_triggers")
