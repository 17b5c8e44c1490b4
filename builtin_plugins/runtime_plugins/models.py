"""Installed runtime plugins and the files granted to them."""
from sqlalchemy import BigInteger, Boolean, ForeignKey, String, Text
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


class FileRef(Model):
    """A file or directory granted to one plugin; ``ref`` is the opaque id the plugin and shell see."""

    __tablename__ = "plugin_file_refs"

    ref: Mapped[str] = mapped_column(String(64), primary_key=True)
    # Grants die with the plugin: uninstalling deletes the plugin row, and the database cascades.
    plugin_id: Mapped[str] = mapped_column(String(64), ForeignKey("runtime_plugins.id", ondelete="CASCADE"),
                                           nullable=False, index=True)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)      # file | directory
    access: Mapped[str] = mapped_column(String(16), nullable=False)    # read | read-write
    source: Mapped[str] = mapped_column(String(16), nullable=False)    # upload | directory | native | output
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    path: Mapped[str] = mapped_column(Text, nullable=False)
    size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
