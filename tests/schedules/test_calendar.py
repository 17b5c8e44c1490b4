"""Calendar rules against an independent oracle (dateutil's rrule and tz), DST edges and validation."""
import datetime as dt

import pytest
from dateutil import rrule, tz

from builtin_plugins.schedules import calendar as cal

UTC = dt.timezone.utc
START = dt.datetime(2024, 1, 1, tzinfo=UTC)
END = dt.datetime(2029, 1, 1, tzinfo=UTC)  # five years: leap 2024 and 2028, every DST change in between

# Wall times that fall into the gaps and overlaps of each zone's DST changes (and one that never does).
ZONE_TIMES = {
    "Europe/Berlin": ["02:30", "02:00", "09:00"],                  # 02:00-03:00 gap / overlap
    "America/New_York": ["02:30", "01:30", "00:00"],               # 02:00-03:00 gap, 01:00-02:00 overlap
    "Australia/Sydney": ["02:30", "03:00", "23:59"],               # southern hemisphere: gap in October
    # A 30-minute DST: 02:00-02:30 gap, 01:30-02:00 overlap.
    "Australia/Lord_Howe": ["02:15", "01:45", "02:00", "12:00"],
    "UTC": ["00:00"],
}
WALLS = [(zone, time) for zone, times in ZONE_TIMES.items() for time in times]
DST_ZONES = [z for z in ZONE_TIMES if z != "UTC"]


def oracle_instant(wall, zone_id):
    """The fire instant of a naive wall time by DESIGN §4.11, worked out with dateutil alone."""
    zone = tz.gettz(zone_id)
    if not tz.datetime_exists(wall, zone):
        # A spring-forward gap: the first wall minute after it is where the gap ends.
        while not tz.datetime_exists(wall, zone):
            wall += dt.timedelta(minutes=1)
        return wall.replace(tzinfo=zone).astimezone(UTC)
    return tz.enfold(wall.replace(tzinfo=zone), fold=0).astimezone(UTC)  # an overlap fires at its first occurrence


def oracle(rule, start=START, end=END):
    hour, minute = (int(p) for p in rule["time"].split(":"))
    freq = {"DAILY": rrule.DAILY, "WEEKLY": rrule.WEEKLY, "MONTHLY": rrule.MONTHLY}[rule["frequency"]]
    kwargs = {"byhour": hour, "byminute": minute, "bysecond": 0}
    if rule.get("weekdays"):
        kwargs["byweekday"] = [d - 1 for d in rule["weekdays"]]  # dateutil counts Monday as 0
    month_day = rule.get("monthDay")
    if month_day == -1:
        kwargs["bymonthday"] = -1
    elif month_day is not None and month_day > 28:
        # Clamp a short month to its last day: the last of 28..monthDay that the month has.
        kwargs.update(bymonthday=tuple(range(28, month_day + 1)), bysetpos=-1)
    elif month_day is not None:
        kwargs["bymonthday"] = month_day
    zone = tz.gettz(rule["zoneId"])
    first_day = start.astimezone(zone).replace(tzinfo=None).replace(hour=0, minute=0) - dt.timedelta(days=2)
    last_day = end.astimezone(zone).replace(tzinfo=None) + dt.timedelta(days=2)
    instants = (oracle_instant(w, rule["zoneId"])
                for w in rrule.rrule(freq, dtstart=first_day, until=last_day, **kwargs))
    return [i for i in instants if start < i <= end]


def ours(rule, start=START, end=END):
    fires, cursor = [], start
    while True:
        cursor = cal.next_fire(rule, cursor)
        if cursor > end:
            return fires
        fires.append(cursor)


@pytest.mark.parametrize("zone,time", WALLS)
def test_daily_rule_matches_oracle_over_five_years(zone, time):
    rule = cal.normalise({"frequency": "DAILY", "time": time, "zoneId": zone})
    expected = oracle(rule)
    assert len(expected) > 1800
    assert ours(rule) == expected


@pytest.mark.parametrize("zone,time", WALLS)
@pytest.mark.parametrize("weekdays", [[7], [1, 3, 5, 7], [6, 7]])
def test_weekly_rule_matches_oracle(zone, time, weekdays):
    """Sunday rules land on every DST change of these zones (EU, US and AU all switch on Sundays)."""
    rule = cal.normalise({"frequency": "WEEKLY", "time": time, "zoneId": zone, "weekdays": weekdays})
    expected = oracle(rule)
    assert len(expected) >= 260 * len(weekdays)
    assert ours(rule) == expected


@pytest.mark.parametrize("zone", DST_ZONES)
@pytest.mark.parametrize("month_day", [1, 15, 28, 29, 30, 31, -1])
def test_monthly_rule_matches_oracle(zone, month_day):
    rule = cal.normalise({"frequency": "MONTHLY", "time": "02:30", "zoneId": zone, "monthDay": month_day})
    expected = oracle(rule)
    assert len(expected) == 60
    assert ours(rule) == expected


def test_daily_rule_with_weekdays_fires_only_on_those_days():
    rule = cal.normalise({"frequency": "DAILY", "time": "08:00", "zoneId": "Europe/Berlin",
                          "weekdays": [5, 1, 1]})
    assert rule["weekdays"] == [1, 5]
    fires = ours(rule)
    assert fires == oracle(rule)
    assert {f.astimezone(tz.gettz("Europe/Berlin")).isoweekday() for f in fires} == {1, 5}


def local(zone_id, *args, fold=0):
    return dt.datetime(*args, tzinfo=tz.gettz(zone_id), fold=fold).astimezone(UTC)


def u(*args):
    return dt.datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize("zone,time,after,expected", [
    # Spring forward: the wall time does not exist, the fire is the first instant after the gap.
    ("Europe/Berlin", "02:30", u(2026, 3, 28, 12), u(2026, 3, 29, 1, 0)),          # 03:00 CEST
    ("America/New_York", "02:30", u(2026, 3, 7, 12), u(2026, 3, 8, 7, 0)),         # 03:00 EDT
    ("Australia/Sydney", "02:30", u(2026, 10, 3, 0), u(2026, 10, 3, 16, 0)),       # 03:00 AEDT
    ("Australia/Lord_Howe", "02:15", u(2026, 10, 3, 0), u(2026, 10, 3, 15, 30)),   # 02:30 +11
    # Fall back: the wall time happens twice, the fire is the first occurrence only.
    ("Europe/Berlin", "02:30", u(2026, 10, 24, 12), u(2026, 10, 25, 0, 30)),       # 02:30 CEST
    ("America/New_York", "01:30", u(2026, 10, 31, 12), u(2026, 11, 1, 5, 30)),     # 01:30 EDT
    ("Australia/Sydney", "02:30", u(2026, 4, 4, 0), u(2026, 4, 4, 15, 30)),        # 02:30 AEDT
    ("Australia/Lord_Howe", "01:45", u(2026, 4, 4, 0), u(2026, 4, 4, 14, 45)),     # 01:45 +11
])
def test_dst_edges_by_hand(zone, time, after, expected):
    """Instants worked out by hand from the published offsets of each zone."""
    rule = cal.normalise({"frequency": "DAILY", "time": time, "zoneId": zone})
    first = cal.next_fire(rule, after)
    assert first == expected
    # The following fire is one local day later, never the second occurrence of an ambiguous time.
    second = cal.next_fire(rule, first)
    assert (second - first) > dt.timedelta(hours=22)


def test_ambiguous_time_fires_once_even_when_asked_between_the_occurrences():
    rule = cal.normalise({"frequency": "DAILY", "time": "02:30", "zoneId": "Europe/Berlin"})
    first = local("Europe/Berlin", 2026, 10, 25, 2, 30, fold=0)
    between = first + dt.timedelta(minutes=30)  # before the second 02:30 (fold=1)
    assert cal.next_fire(rule, between) == local("Europe/Berlin", 2026, 10, 26, 2, 30)


def test_short_months_clamp_to_their_last_day():
    rule = cal.normalise({"frequency": "MONTHLY", "time": "09:00", "zoneId": "UTC", "monthDay": 31})
    fires = ours(rule, dt.datetime(2027, 12, 31, 12, tzinfo=UTC), dt.datetime(2028, 12, 31, 12, tzinfo=UTC))
    assert [f.day for f in fires] == [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    last = cal.normalise({"frequency": "MONTHLY", "time": "09:00", "zoneId": "UTC", "monthDay": -1})
    assert [f.day for f in ours(last, dt.datetime(2026, 12, 31, 12, tzinfo=UTC),
                                dt.datetime(2027, 3, 31, 12, tzinfo=UTC))] == [31, 28, 31]


def test_next_fire_is_strictly_after():
    rule = cal.normalise({"frequency": "DAILY", "time": "09:00", "zoneId": "UTC"})
    at = dt.datetime(2026, 5, 5, 9, 0, tzinfo=UTC)
    assert cal.next_fire(rule, at) == at + dt.timedelta(days=1)
    assert cal.next_fire(rule, at - dt.timedelta(microseconds=1)) == at


def test_fires_between_counts_and_caps():
    rule = cal.normalise({"frequency": "DAILY", "time": "09:00", "zoneId": "UTC"})
    start = dt.datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    count, upcoming = cal.fires_between(rule, start, start + dt.timedelta(days=10, hours=1), 1000)
    assert (count, upcoming) == (10, start + dt.timedelta(days=11))
    count, upcoming = cal.fires_between(rule, start, start + dt.timedelta(days=10, hours=1), 3)
    assert (count, upcoming) == (3, start + dt.timedelta(days=11))


@pytest.mark.parametrize("rule,field", [
    ({"frequency": "DAILY", "time": "09:00", "zoneId": "Mars/Olympus"}, "zoneId"),
    ({"frequency": "DAILY", "time": "09:00", "zoneId": "../../etc/passwd"}, "zoneId"),
    ({"frequency": "DAILY", "time": "09:00", "zoneId": ""}, "zoneId"),
    ({"frequency": "DAILY", "time": "09:00", "zoneId": 5}, "zoneId"),
    ({"frequency": "DAILY", "time": "09:00", "zoneId": "E" * 300}, "zoneId"),
    ({"frequency": "DAILY", "time": "09:00"}, "zoneId"),
    ({"frequency": "WEEKLY", "time": "09:00", "zoneId": "UTC", "weekdays": [0]}, "weekdays"),
    ({"frequency": "WEEKLY", "time": "09:00", "zoneId": "UTC", "weekdays": [8]}, "weekdays"),
    ({"frequency": "WEEKLY", "time": "09:00", "zoneId": "UTC", "weekdays": [True]}, "weekdays"),
    ({"frequency": "WEEKLY", "time": "09:00", "zoneId": "UTC", "weekdays": []}, "weekdays"),
    ({"frequency": "WEEKLY", "time": "09:00", "zoneId": "UTC", "weekdays": "1"}, "weekdays"),
    ({"frequency": "WEEKLY", "time": "09:00", "zoneId": "UTC"}, "weekdays"),
    ({"frequency": "MONTHLY", "time": "09:00", "zoneId": "UTC", "monthDay": 0}, "monthDay"),
    ({"frequency": "MONTHLY", "time": "09:00", "zoneId": "UTC", "monthDay": 32}, "monthDay"),
    ({"frequency": "MONTHLY", "time": "09:00", "zoneId": "UTC", "monthDay": -2}, "monthDay"),
    ({"frequency": "MONTHLY", "time": "09:00", "zoneId": "UTC", "monthDay": 1.0}, "monthDay"),
    ({"frequency": "MONTHLY", "time": "09:00", "zoneId": "UTC"}, "monthDay"),
    ({"frequency": "DAILY", "time": "09:00", "zoneId": "UTC", "monthDay": 3}, "monthDay"),
    ({"frequency": "MONTHLY", "time": "09:00", "zoneId": "UTC", "monthDay": 3, "weekdays": [1]}, "weekdays"),
    ({"frequency": "DAILY", "time": "25:00", "zoneId": "UTC"}, "time"),
    ({"frequency": "DAILY", "time": "7:5", "zoneId": "UTC"}, "time"),
    ({"frequency": "DAILY", "time": "07:60", "zoneId": "UTC"}, "time"),
    ({"frequency": "DAILY", "time": "24:00", "zoneId": "UTC"}, "time"),
    ({"frequency": "DAILY", "time": "07:05:00", "zoneId": "UTC"}, "time"),
    ({"frequency": "DAILY", "time": "07:05\n", "zoneId": "UTC"}, "time"),
    ({"frequency": "DAILY", "time": 700, "zoneId": "UTC"}, "time"),
    ({"frequency": "HOURLY", "time": "07:05", "zoneId": "UTC"}, "frequency"),
    ({"frequency": "daily", "time": "07:05", "zoneId": "UTC"}, "frequency"),
    ({"time": "07:05", "zoneId": "UTC"}, "frequency"),
    ({"frequency": "DAILY", "time": "07:05", "zoneId": "UTC", "every": 2}, "every"),
])
def test_invalid_rules_name_the_field(rule, field):
    with pytest.raises(cal.CalendarError) as info:
        cal.normalise(rule)
    assert field in info.value.errors


def test_valid_rule_is_normalised():
    assert cal.normalise({"frequency": "WEEKLY", "time": "23:59", "zoneId": "Asia/Kolkata",
                          "weekdays": [7, 1, 7]}) == {
        "frequency": "WEEKLY", "time": "23:59", "zoneId": "Asia/Kolkata", "weekdays": [1, 7]}
