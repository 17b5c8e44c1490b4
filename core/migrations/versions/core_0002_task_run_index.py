"""index tasks by run

Revision ID: core_0002
"""
from alembic import op

revision = "core_0002"
down_revision = "core_0001"
branch_labels = None
depends_on = None


def upgrade():
    op.create_index("ix_tasks_run_id", "tasks", ["run_id"])


def downgrade():
    op.drop_index("ix_tasks_run_id", "tasks")
