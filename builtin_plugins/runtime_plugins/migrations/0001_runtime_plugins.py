"""runtime_plugins table

Revision ID: runtime_plugins_0001
"""
import sqlalchemy as sa
from alembic import op

from core.db import UTCDateTime

revision = "runtime_plugins_0001"
down_revision = None
branch_labels = ("runtime_plugins",)
depends_on = None


def upgrade():
    op.create_table(
        "runtime_plugins",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("manifest", sa.Text, nullable=False),
        sa.Column("installed_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )


def downgrade():
    op.drop_table("runtime_plugins")
