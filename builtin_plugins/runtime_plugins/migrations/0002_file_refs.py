"""plugin_file_refs table: files and directories granted to runtime plugins

Revision ID: runtime_plugins_0002
"""
import sqlalchemy as sa
from alembic import op

from core.db import UTCDateTime

revision = "runtime_plugins_0002"
down_revision = "runtime_plugins_0001"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "plugin_file_refs",
        sa.Column("ref", sa.String(64), primary_key=True),
        sa.Column("plugin_id", sa.String(64), sa.ForeignKey("runtime_plugins.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("access", sa.String(16), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_plugin_file_refs_plugin_id", "plugin_file_refs", ["plugin_id"])


def downgrade():
    op.drop_index("ix_plugin_file_refs_plugin_id", table_name="plugin_file_refs")
    op.drop_table("plugin_file_refs")
