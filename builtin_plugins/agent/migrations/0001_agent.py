"""agent runs, steps and events

Revision ID: agent_0001
"""
import sqlalchemy as sa
from alembic import op

from core.db import UTCDateTime

revision = "agent_0001"
down_revision = None
branch_labels = ("agent",)
depends_on = None


def upgrade():
    op.create_table(
        "agent_runs",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("goal", sa.Text, nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("plan", sa.Text, nullable=True),
        sa.Column("config", sa.Text, nullable=False),
        sa.Column("inputs", sa.Text, nullable=False),
        sa.Column("workflow_id", sa.String(36), nullable=True),
        sa.Column("workflow_revision", sa.Integer, nullable=True),
        sa.Column("parent_run_id", sa.String(36), nullable=True),
        sa.Column("result", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime, nullable=True),
    )
    op.create_index("ix_agent_runs_owner", "agent_runs", ["owner"])
    op.create_index("ix_agent_runs_updated_at", "agent_runs", ["updated_at"])
    op.create_table(
        "agent_steps",
        sa.Column("run_id", sa.String(36), sa.ForeignKey("agent_runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("index", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("step_id", sa.String(64), nullable=False),
        sa.Column("invocation_id", sa.String(36), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("started_at", UTCDateTime, nullable=True),
        sa.Column("finished_at", UTCDateTime, nullable=True),
        sa.Column("result", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("result_truncated", sa.Boolean, nullable=False),
    )
    op.create_table(
        "agent_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(36), sa.ForeignKey("agent_runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("streamed", sa.Boolean, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.UniqueConstraint("run_id", "seq", name="uq_agent_events_run_seq"),
    )


def downgrade():
    op.drop_table("agent_events")
    op.drop_table("agent_steps")
    op.drop_table("agent_runs")
