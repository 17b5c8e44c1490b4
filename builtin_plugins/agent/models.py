"""Agent runs, their step executions and ordered audit events."""
from sqlalchemy import Boolean, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, mapped_column

from core.db import Model, UTCDateTime, utcnow

# MySQL's TEXT holds 64 KiB; plans (512 KiB), step results and plan_ready events are larger.
LongText = Text().with_variant(mysql.LONGTEXT(), "mysql")


class Run(Model):
    __tablename__ = "agent_runs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    goal: Mapped[str] = mapped_column(Text, nullable=False, default="")
    status: Mapped[str] = mapped_column(String(32), nullable=False)
    plan: Mapped[str | None] = mapped_column(LongText, nullable=True)
    config: Mapped[str] = mapped_column(LongText, nullable=False, default="{}")
    inputs: Mapped[str] = mapped_column(LongText, nullable=False, default="{}")
    workflow_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    workflow_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    parent_run_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    result: Mapped[str | None] = mapped_column(LongText, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
    updated_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow, index=True)
    finished_at: Mapped[object | None] = mapped_column(UTCDateTime, nullable=True)


class StepExecution(Model):
    __tablename__ = "agent_steps"

    run_id: Mapped[str] = mapped_column(String(36), ForeignKey("agent_runs.id", ondelete="CASCADE"),
                                        primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    step_id: Mapped[str] = mapped_column(String(64), nullable=False)
    invocation_id: Mapped[str] = mapped_column(String(36), nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    started_at: Mapped[object | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[object | None] = mapped_column(UTCDateTime, nullable=True)
    result: Mapped[str | None] = mapped_column(LongText, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    result_truncated: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)


class RunEvent(Model):
    __tablename__ = "agent_events"
    __table_args__ = (UniqueConstraint("run_id", "seq", name="uq_agent_events_run_seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36), ForeignKey("agent_runs.id", ondelete="CASCADE"),
                                        nullable=False)
    seq: Mapped[int] = mapped_column(Integer, nullable=False)
    type: Mapped[str] = mapped_column(String(40), nullable=False)
    data: Mapped[str] = mapped_column(LongText, nullable=False)
    streamed: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    created_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
