"""mcp_servers table

Revision ID: mcp_0001
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from core.db import UTCDateTime

# args and the sealed maps may pass MySQL's 64 KiB TEXT (100 env values of 16 KiB).
LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql")

revision = "mcp_0001"
down_revision = None
branch_labels = ("mcp",)
depends_on = None


def upgrade():
    op.create_table(
        "mcp_servers",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("transport", sa.String(16), nullable=False),
        sa.Column("command", sa.Text, nullable=True),
        sa.Column("args", LONG_TEXT, nullable=True),
        sa.Column("cwd", sa.Text, nullable=True),
        sa.Column("url", sa.Text, nullable=True),
        sa.Column("env_names", sa.Text, nullable=False),
        sa.Column("env_sealed", LONG_TEXT, nullable=True),
        sa.Column("header_names", sa.Text, nullable=False),
        sa.Column("headers_sealed", LONG_TEXT, nullable=True),
        sa.Column("call_timeout", sa.Float, nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.UniqueConstraint("name", name="uq_mcp_servers_name"),
    )


def downgrade():
    op.drop_table("mcp_servers")
