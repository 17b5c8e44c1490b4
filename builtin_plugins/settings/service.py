"""Settings logic: defaults merged with the stored document; partial updates."""
import json
import random
import time
import weakref

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


class _Cache:
    """Stored settings text per owner, for one Database."""

    def __init__(self):
        self.generation = 0
        self.text = {}
        self.body = {}  # owner -> the serialized GET response, built from ``text``


# Keyed by the Database object: a mode switch brings a new one, and so an empty cache.
_caches = weakref.WeakKeyDictionary()


def _cache(host):
    cache = _caches.get(host.db)
    if cache is None:
        cache = _caches[host.db] = _Cache()
    return cache


def get(host, owner=OWNER):
    cache = _cache(host)
    text = cache.text.get(owner)
    if text is None:
        generation = cache.generation
        with host.db.session() as s:
            row = s.get(SettingsRow, owner)
            text = row.data if row else "{}"
        # An update that committed while this read ran has bumped the generation:
        # what was read may be stale, so it is not kept.
        if cache.generation == generation:
            cache.text[owner] = text
    return _merge(_load(text))


def get_body(host, render, owner=OWNER):
    """The settings as response bytes, rendered by ``render(settings)`` once per stored version.

    ``GET /api/settings`` is the shell's hottest read; between updates its answer
    never changes, so it is served from this cache (dropped by every update).
    """
    cache = _cache(host)
    body = cache.body.get(owner)
    if body is None:
        generation = cache.generation
        body = render(get(host, owner))
        if cache.generation == generation:
            cache.body[owner] = body
    return body


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
    try:
        return _update_row(host, changes, owner)
    finally:
        # After the commit or rollback: the next read goes to the database.
        cache = _cache(host)
        cache.generation += 1
        cache.text.pop(owner, None)
        cache.body.pop(owner, None)


def _update_row(host, changes, owner):
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
