"""Workflow definitions (the editable draft) and their immutable published snapshots."""
from sqlalchemy import Boolean, ForeignKey, Integer, String, Text
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, mapped_column

from core.db import Model, UTCDateTime, utcnow

# MySQL's TEXT holds 64 KiB; plans reach 512 KiB and layouts/graphs 1 MiB.
LongText = Text().with_variant(mysql.LONGTEXT(), "mysql")


class Workflow(Model):
    __tablename__ = "workflows"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    description: Mapped[str] = mapped_column(Text, nullable=False, default="")
    input_schema: Mapped[str] = mapped_column(LongText, nullable=False)
    plan: Mapped[str] = mapped_column(LongText, nullable=False)
    layout: Mapped[str | None] = mapped_column(LongText, nullable=True)
    graph: Mapped[str | None] = mapped_column(LongText, nullable=True)
    revision: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    published: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    active_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
    updated_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow)


class WorkflowRevision(Model):
    __tablename__ = "workflow_revisions"

    workflow_id: Mapped[str] = mapped_column(String(36), ForeignKey("workflows.id", ondelete="CASCADE"),
                                             primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    description: Mapped[str] = mapped_column(Text, nullable=False)
    input_schema: Mapped[str] = mapped_column(LongText, nullable=False)
    plan: Mapped[str] = mapped_column(LongText, nullable=False)
    layout: Mapped[str | None] = mapped_column(LongText, nullable=True)
    graph: Mapped[str | None] = mapped_column(LongText, nullable=True)
    published_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
