"""Settings table: one JSON document per owner."""
from sqlalchemy import String, Text
from sqlalchemy.orm import Mapped, mapped_column

from core.db import Model, UTCDateTime, utcnow


class SettingsRow(Model):
    __tablename__ = "settings"

    owner: Mapped[str] = mapped_column(String(64), primary_key=True)
    data: Mapped[str] = mapped_column(Text, nullable=False, default="{}")
    updated_at: Mapped[object] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
