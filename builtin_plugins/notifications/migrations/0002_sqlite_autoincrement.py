"""notification ids are never reused on SQLite

SQLite gives a plain INTEGER PRIMARY KEY the largest id plus one, so deleting the
newest notification let the next one take its id, and clients deduplicate live
events by id. AUTOINCREMENT keeps a high-water mark instead. PostgreSQL sequences
and MariaDB's persisted AUTO_INCREMENT never reuse ids, so only SQLite changes.

Revision ID: notifications_0002
"""
from alembic import op

revision = "notifications_0002"
down_revision = "notifications_0001"
branch_labels = None
depends_on = None


def upgrade():
    if op.get_bind().dialect.name != "sqlite":
        return
    # Batch mode rebuilds the table (copying rows, keeping the index); the copy also
    # seeds sqlite_sequence with the current largest id.
    with op.batch_alter_table("notifications", recreate="always",
                              table_kwargs={"sqlite_autoincrement": True}):
        pass


def downgrade():
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table("notifications", recreate="always"):
        pass
