"""Installed runtime plugins."""
from sqlalchemy import Boolean, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from core.db import Model, UTCDateTime, utcnow


class InstalledPlugin(Model):
    __tablename__ = "runtime_plugins"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), nullable=False)
    version: Mapped[str] = mapped_column(String(64), nullable=False)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    manifest: Mapped[str] = mapped_column(Text, nullable=False)
    installed_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
    updated_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
