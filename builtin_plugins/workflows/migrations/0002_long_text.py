"""workflow documents as LONGTEXT on MySQL (TEXT stops at 64 KiB)

Revision ID: workflows_0002
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "workflows_0002"
down_revision = "workflows_0001"
branch_labels = None
depends_on = None

COLUMNS = {"input_schema": False, "plan": False, "layout": True, "graph": True}


def upgrade():
    if op.get_bind().dialect.name != "mysql":
        return  # PostgreSQL and SQLite text has no such limit
    for table in ("workflows", "workflow_revisions"):
        for column, nullable in COLUMNS.items():
            op.alter_column(table, column, type_=mysql.LONGTEXT(), existing_type=sa.Text(),
                            existing_nullable=nullable)


def downgrade():
    if op.get_bind().dialect.name != "mysql":
        return
    for table in ("workflows", "workflow_revisions"):
        for column, nullable in COLUMNS.items():
            op.alter_column(table, column, type_=sa.Text(), existing_type=mysql.LONGTEXT(),
                            existing_nullable=nullable)
