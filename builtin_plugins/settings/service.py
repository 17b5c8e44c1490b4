"""Settings logic: defaults merged with the stored document; partial updates."""
import json
import random
import time

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, IntegrityError

from core.db import utcnow

from .models import SettingsRow

OWNER = "local"
ATTEMPTS = 5  # a deadlock victim is retried; the database picks one and asks for exactly that

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


def _load(text):
    try:
        stored = json.loads(text or "{}")
    except ValueError:
        return {}
    return stored if isinstance(stored, dict) else {}


def _merge(stored):
    merged = json.loads(json.dumps(DEFAULTS))
    for key, value in stored.items():
        if key == "computerUse":
            if isinstance(value, dict):
                merged["computerUse"].update(value)
        elif key in merged:
            merged[key] = value
    return merged


def get(host, owner=OWNER):
    with host.db.session() as s:
        row = s.get(SettingsRow, owner)
        return _merge(_load(row.data) if row else {})


def update(host, changes, owner=OWNER):
    """Apply a validated partial update; returns the full settings.

    The row is read with a lock held to the commit, so concurrent partial
    updates of different fields all survive.
    """
    for attempt in range(1, ATTEMPTS + 1):
        try:
            result = _locked_update(host, changes, owner)
            if result is None:
                _create_row(host, owner)
                result = _locked_update(host, changes, owner)
            if result is not None:
                break
        except DBAPIError as exc:
            if attempt == ATTEMPTS or not _is_deadlock(exc):
                raise
        time.sleep(random.uniform(0.002, 0.01) * attempt)
    else:
        raise RuntimeError("the settings row could not be created")
    before, after = result
    changed = sorted(k for k in after if after[k] != before[k])
    if "logLevel" in changed:
        host.set_log_level(after["logLevel"])
    if changed:
        host.plugins.notify("settings_changed", host=host, settings=after, changed=changed)
    return after


def _is_deadlock(exc):
    # InnoDB may pick a victim among requests racing to create the row (gap locks).
    orig = getattr(exc, "orig", None)
    if getattr(orig, "sqlstate", None) in ("40001", "40P01"):  # PostgreSQL
        return True
    args = getattr(orig, "args", ())
    return bool(args) and args[0] == 1213  # MySQL/MariaDB ER_LOCK_DEADLOCK


def _locked_update(host, changes, owner):
    """(before, after) merged settings, or None when the owner has no row yet."""
    with host.db.session() as s:
        row = s.execute(select(SettingsRow).where(SettingsRow.owner == owner)
                        .with_for_update()).scalar_one_or_none()
        if row is None:
            return None
        stored = _load(row.data)
        before = _merge(stored)
        for key, value in changes.items():
            if key == "computerUse":
                current = stored.get("computerUse")
                stored["computerUse"] = {**(current if isinstance(current, dict) else {}), **value}
            else:
                stored[key] = value
        row.data = json.dumps(stored)
        row.updated_at = utcnow()
    return before, _merge(stored)


def _create_row(host, owner):
    # The migration seeds the local owner's row; this covers any other owner. Two
    # requests may race to create it: the loser's duplicate key is harmless.
    try:
        with host.db.session() as s:
            s.add(SettingsRow(owner=owner, data="{}", updated_at=utcnow()))
    except IntegrityError:
        pass


def reset_database(host):
    host.reset_datasource()
    return {"mode": host.mode, "backup": True}
