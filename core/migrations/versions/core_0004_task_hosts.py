"""which host admitted and which claimed a task

Revision ID: core_0004
"""
import sqlalchemy as sa
from alembic import op

revision = "core_0004"
down_revision = "core_0003"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("admitted_by", sa.String(64), nullable=True))
        batch.add_column(sa.Column("claimed_by", sa.String(64), nullable=True))


def downgrade():
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("claimed_by")
        batch.drop_column("admitted_by")
