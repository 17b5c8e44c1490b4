"""background task queue

Revision ID: core_0001
"""
import sqlalchemy as sa
from alembic import op

from core.db import UTCDateTime

revision = "core_0001"
down_revision = None
branch_labels = ("core",)
depends_on = None


def upgrade():
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("priority", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("source", sa.String(80), nullable=True),
        sa.Column("run_id", sa.String(36), nullable=True),
        sa.Column("queued_at", UTCDateTime, nullable=False),
        sa.Column("started_at", UTCDateTime, nullable=True),
        sa.Column("finished_at", UTCDateTime, nullable=True),
        sa.Column("output", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("executor", sa.String(16), nullable=True),
    )
    op.create_index("ix_tasks_state_owner_priority", "tasks", ["state", "owner", "priority", "queued_at"])
    op.create_index("ix_tasks_owner_queued", "tasks", ["owner", "queued_at"])
    op.create_table(
        "task_locks",
        sa.Column("name", sa.String(32), primary_key=True),
    )
    op.bulk_insert(sa.table("task_locks", sa.column("name", sa.String)), [{"name": "admission"}])


def downgrade():
    op.drop_table("task_locks")
    op.drop_table("tasks")
