"""durable workflow schedules

Revision ID: schedules_0001
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from core.db import UTCDateTime

revision = "schedules_0001"
down_revision = None
branch_labels = ("schedules",)
depends_on = None


def upgrade():
    op.create_table(
        "schedules",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("workflow_id", sa.String(36), nullable=False),
        sa.Column("inputs", sa.Text().with_variant(mysql.LONGTEXT(), "mysql"), nullable=False),
        sa.Column("interval_seconds", sa.Integer, nullable=True),
        sa.Column("recurring", sa.Boolean, nullable=False),
        sa.Column("calendar", sa.Text, nullable=True),
        sa.Column("immediate_pending", sa.Boolean, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("next_fire_at", UTCDateTime, nullable=True),
        sa.Column("fires", sa.Integer, nullable=False),
        sa.Column("missed_fires", sa.Integer, nullable=False),
        sa.Column("last_task_id", sa.String(36), nullable=True),
        sa.Column("last_run_id", sa.String(36), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("last_fired_at", UTCDateTime, nullable=True),
        sa.Column("expires_at", UTCDateTime, nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("ended_at", UTCDateTime, nullable=True),
    )
    op.create_index("ix_schedules_workflow_id", "schedules", ["workflow_id"])
    op.create_index("ix_schedules_state_next", "schedules", ["state", "next_fire_at"])


def downgrade():
    op.drop_table("schedules")
