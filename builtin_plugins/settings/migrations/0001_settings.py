"""settings table

Revision ID: settings_0001
"""
import sqlalchemy as sa
from alembic import op

from core.db import UTCDateTime, utcnow

revision = "settings_0001"
down_revision = None
branch_labels = ("settings",)
depends_on = None


def upgrade():
    table = op.create_table(
        "settings",
        sa.Column("owner", sa.String(64), primary_key=True),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    op.bulk_insert(table, [{"owner": "local", "data": "{}", "updated_at": utcnow()}])


def downgrade():
    op.drop_table("settings")
