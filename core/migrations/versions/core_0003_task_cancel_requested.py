"""a cancel asked for while a task waits in another executor

Revision ID: core_0003
"""
import sqlalchemy as sa
from alembic import op

revision = "core_0003"
down_revision = "core_0002"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade():
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("cancel_requested")
