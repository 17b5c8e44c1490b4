"""Settings logic: defaults merged with the stored document; partial updates."""
import json

from sqlalchemy import select

from core.db import utcnow

from .models import SettingsRow

OWNER = "local"

DEFAULTS = {
    "theme": "system",
    "language": "en",
    "sidebarCollapsed": False,
    "logLevel": "INFO",
    "computerUseEnabled": False,
    "computerUse": {
        "requireConfirmation": True,
        "screenshotScale": 1.0,
        "maxActionsPerTurn": 50,
        "allowedApps": [],
    },
}


def _merge(stored):
    merged = json.loads(json.dumps(DEFAULTS))
    for key, value in stored.items():
        if key == "computerUse" and isinstance(value, dict):
            merged["computerUse"].update(value)
        elif key in merged:
            merged[key] = value
    return merged


def get(host, owner=OWNER):
    with host.db.session() as s:
        row = s.get(SettingsRow, owner)
        return _merge(json.loads(row.data) if row else {})


def update(host, changes, owner=OWNER):
    """Apply a validated partial update; returns the full settings."""
    with host.db.session() as s:
        row = s.execute(select(SettingsRow).where(SettingsRow.owner == owner).with_for_update()).scalar_one_or_none()
        if row is None:
            row = SettingsRow(owner=owner, data="{}")
            s.add(row)
        stored = json.loads(row.data or "{}")
        before = _merge(stored)
        for key, value in changes.items():
            if key == "computerUse":
                stored["computerUse"] = {**stored.get("computerUse", {}), **value}
            else:
                stored[key] = value
        row.data = json.dumps(stored)
        row.updated_at = utcnow()
    after = _merge(stored)
    changed = sorted(k for k in after if after[k] != before[k])
    if "logLevel" in changed:
        host.set_log_level(after["logLevel"])
    if changed:
        host.plugins.notify("settings_changed", host=host, settings=after, changed=changed)
    return after


def reset_database(host):
    host.reset_datasource()
    return {"mode": host.mode, "backup": True}
