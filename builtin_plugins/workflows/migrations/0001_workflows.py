"""workflows and their published revisions

Revision ID: workflows_0001
"""
import sqlalchemy as sa
from alembic import op

from core.db import UTCDateTime

revision = "workflows_0001"
down_revision = None
branch_labels = ("workflows",)
depends_on = None


def upgrade():
    op.create_table(
        "workflows",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("input_schema", sa.Text, nullable=False),
        sa.Column("plan", sa.Text, nullable=False),
        sa.Column("layout", sa.Text, nullable=True),
        sa.Column("graph", sa.Text, nullable=True),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("published", sa.Boolean, nullable=False),
        sa.Column("active_revision", sa.Integer, nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_workflows_owner", "workflows", ["owner"])
    op.create_table(
        "workflow_revisions",
        sa.Column("workflow_id", sa.String(36), sa.ForeignKey("workflows.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("revision", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("input_schema", sa.Text, nullable=False),
        sa.Column("plan", sa.Text, nullable=False),
        sa.Column("layout", sa.Text, nullable=True),
        sa.Column("graph", sa.Text, nullable=True),
        sa.Column("published_at", UTCDateTime, nullable=False),
    )


def downgrade():
    op.drop_table("workflow_revisions")
    op.drop_table("workflows")
