"""MCP server definitions; env and header values are stored sealed (core.secrets), names in the clear."""
from sqlalchemy import Float, String, Text
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, mapped_column

from core.db import Model, UTCDateTime, utcnow

LongText = Text().with_variant(mysql.LONGTEXT(), "mysql")


class McpServer(Model):
    __tablename__ = "mcp_servers"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    transport: Mapped[str] = mapped_column(String(16), nullable=False)  # STDIO | SSE | STREAMABLE_HTTP
    command: Mapped[str | None] = mapped_column(Text, nullable=True)
    args: Mapped[str | None] = mapped_column(LongText, nullable=True)  # JSON list
    cwd: Mapped[str | None] = mapped_column(Text, nullable=True)
    url: Mapped[str | None] = mapped_column(Text, nullable=True)
    env_names: Mapped[str] = mapped_column(Text, nullable=False, default="[]")  # JSON list
    env_sealed: Mapped[str | None] = mapped_column(LongText, nullable=True)
    header_names: Mapped[str] = mapped_column(Text, nullable=False, default="[]")  # JSON list
    headers_sealed: Mapped[str | None] = mapped_column(LongText, nullable=True)
    call_timeout: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
    updated_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
