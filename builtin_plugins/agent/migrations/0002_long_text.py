"""agent: long text columns on MySQL (TEXT stops at 64 KiB)

Revision ID: agent_0002
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "agent_0002"
down_revision = "agent_0001"
branch_labels = None
depends_on = None

COLUMNS = [("agent_runs", "plan", True), ("agent_runs", "config", False), ("agent_runs", "inputs", False),
           ("agent_runs", "result", True), ("agent_steps", "result", True), ("agent_events", "data", False)]


def upgrade():
    if op.get_bind().dialect.name != "mysql":
        return
    for table, column, nullable in COLUMNS:
        op.alter_column(table, column, existing_type=sa.Text(), type_=mysql.LONGTEXT(), existing_nullable=nullable,
                        nullable=nullable)


def downgrade():
    if op.get_bind().dialect.name != "mysql":
        return
    for table, column, nullable in COLUMNS:
        op.alter_column(table, column, existing_type=mysql.LONGTEXT(), type_=sa.Text(), existing_nullable=nullable,
                        nullable=nullable)
