"""Calendar rules: validation and the pure next-fire computation in the rule's IANA zone.

A rule is ``{frequency, time, zoneId, weekdays?, monthDay?}``. Wall times are
turned into instants with ``zoneinfo`` by DESIGN §4.11: a wall time that does
not exist (spring-forward gap) fires at the first instant after the gap, and an
ambiguous one (fall-back) fires once, at its first occurrence.
"""
import calendar as _cal
import datetime as dt
import functools
import re
import zoneinfo

FREQUENCIES = ("DAILY", "WEEKLY", "MONTHLY")
TIME_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])\Z")
MAX_ZONE_ID = 64
UTC = dt.timezone.utc
# A valid rule fires at least once in any 31 consecutive days (monthly days clamp),
# so a search that finds nothing in this many days means a bug, not a rare rule.
SEARCH_DAYS = 400


class CalendarError(ValueError):
    """A rule that cannot be used; ``errors`` maps field names to messages."""

    def __init__(self, errors):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


@functools.lru_cache(maxsize=1)
def _zone_names():
    return frozenset(zoneinfo.available_timezones())


def _zone(zone_id):
    if zone_id not in _zone_names():
        raise KeyError(zone_id)
    return zoneinfo.ZoneInfo(zone_id)


def normalise(rule):
    """Check a rule (as parsed from JSON) and return it in canonical form; raises CalendarError.

    Rules: ``weekdays`` (1-7, Monday 1) filter DAILY rules and are required for
    WEEKLY ones; ``monthDay`` (1-31 or -1) is required for MONTHLY and refused
    elsewhere, as are weekdays on MONTHLY rules.
    """
    errors = {}
    if not isinstance(rule, dict):
        raise CalendarError({"calendar": ["Must be an object."]})
    unknown = sorted(set(rule) - {"frequency", "time", "zoneId", "weekdays", "monthDay"})
    for key in unknown:
        errors[key[:100]] = ["Unknown field."]
    frequency = rule.get("frequency")
    if frequency is None:
        errors["frequency"] = ["Missing data for required field."]
    elif frequency not in FREQUENCIES:
        errors["frequency"] = [f"Must be one of {', '.join(FREQUENCIES)}."]
    time = rule.get("time")
    if time is None:
        errors["time"] = ["Missing data for required field."]
    elif not isinstance(time, str) or not TIME_RE.match(time):
        errors["time"] = ["Must be a 24-hour time HH:mm, for example 07:05 or 23:30."]
    zone_id = rule.get("zoneId")
    if zone_id is None:
        errors["zoneId"] = ["Missing data for required field."]
    elif not isinstance(zone_id, str) or len(zone_id) > MAX_ZONE_ID:
        errors["zoneId"] = ["Must be an IANA time-zone identifier such as Europe/Berlin."]
    else:
        try:
            _zone(zone_id)
        except (KeyError, ValueError, zoneinfo.ZoneInfoNotFoundError):
            errors["zoneId"] = ["Unknown IANA time-zone identifier."]
    weekdays = rule.get("weekdays")
    if weekdays is not None:
        if (not isinstance(weekdays, list) or not weekdays
                or any(isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= 7 for d in weekdays)):
            errors["weekdays"] = ["Must be a non-empty list of integers 1 to 7 (Monday is 1)."]
        elif frequency == "MONTHLY":
            errors["weekdays"] = ["Not used by MONTHLY rules; use monthDay."]
        else:
            weekdays = sorted(set(weekdays))
    elif frequency == "WEEKLY":
        errors["weekdays"] = ["Required for WEEKLY rules."]
    month_day = rule.get("monthDay")
    if month_day is not None:
        if isinstance(month_day, bool) or not isinstance(month_day, int) or not (
                1 <= month_day <= 31 or month_day == -1):
            errors["monthDay"] = ["Must be an integer 1 to 31, or -1 for the last day of the month."]
        elif frequency in ("DAILY", "WEEKLY"):
            errors["monthDay"] = ["Only MONTHLY rules take monthDay."]
    elif frequency == "MONTHLY":
        errors["monthDay"] = ["Required for MONTHLY rules."]
    if errors:
        raise CalendarError(errors)
    out = {"frequency": frequency, "time": time, "zoneId": zone_id}
    if weekdays is not None:
        out["weekdays"] = weekdays
    if month_day is not None:
        out["monthDay"] = month_day
    return out


def _fires_on(rule, day):
    frequency = rule["frequency"]
    if frequency == "MONTHLY":
        last = _cal.monthrange(day.year, day.month)[1]
        wanted = rule["monthDay"]
        return day.day == (last if wanted == -1 else min(wanted, last))
    weekdays = rule.get("weekdays")
    return weekdays is None or day.isoweekday() in weekdays


def resolve(local, zone):
    """The instant (UTC) at which the naive wall time ``local`` fires in ``zone``."""
    first = local.replace(tzinfo=zone, fold=0)
    instant = first.astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) == local:
        return instant  # exists; when ambiguous, fold=0 is the first occurrence
    # In a gap: fold=1 reads the wall time with the offset after the transition,
    # which lands before the transition; fold=0 reads it with the earlier offset,
    # which lands after it. The transition (the first instant after the gap) lies
    # between: find it to the second (zone transitions are on whole seconds).
    low = local.replace(tzinfo=zone, fold=1).astimezone(UTC)
    high = instant
    target = _offset_at(zone, high)
    lo, hi = 0, int((high - low).total_seconds())
    while lo < hi:
        mid = (lo + hi) // 2
        if _offset_at(zone, low + dt.timedelta(seconds=mid)) == target:
            hi = mid
        else:
            lo = mid + 1
    return low + dt.timedelta(seconds=lo)


def _offset_at(zone, instant):
    return instant.astimezone(zone).utcoffset()


def next_fire(rule, after):
    """The first fire of ``rule`` strictly after the aware instant ``after`` (returned in UTC)."""
    zone = _zone(rule["zoneId"])
    hour, minute = (int(p) for p in rule["time"].split(":"))
    wall = dt.time(hour, minute)
    # Start a day early: the zone's date at ``after`` may lag the fire's date by a day.
    day = after.astimezone(zone).date() - dt.timedelta(days=1)
    for _ in range(SEARCH_DAYS):
        if _fires_on(rule, day):
            instant = resolve(dt.datetime.combine(day, wall), zone)
            if instant > after:
                return instant
        day += dt.timedelta(days=1)
    raise RuntimeError(f"no fire of {rule!r} within {SEARCH_DAYS} days")  # unreachable for valid rules


def fires_between(rule, start, end, limit):
    """Fires in ``(start, end]``, at most ``limit`` of them; returns (count, first fire after ``end``)."""
    count, cursor = 0, start
    while True:
        cursor = next_fire(rule, cursor)
        if cursor > end:
            return count, cursor
        count += 1
        if count >= limit:
            return count, next_fire(rule, end)
