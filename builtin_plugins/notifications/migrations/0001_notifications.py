"""notifications table

Revision ID: notifications_0001
"""
import sqlalchemy as sa
from alembic import op

from core.db import UTCDateTime

revision = "notifications_0001"
down_revision = None
branch_labels = ("notifications",)
depends_on = None


def upgrade():
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(80), nullable=False),
        sa.Column("level", sa.String(16), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("body", sa.Text, nullable=True),
        sa.Column("link", sa.String(2048), nullable=True),
        sa.Column("read", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("read_at", UTCDateTime, nullable=True),
    )
    op.create_index("ix_notifications_read_id", "notifications", ["read", "id"])


def downgrade():
    op.drop_table("notifications")
