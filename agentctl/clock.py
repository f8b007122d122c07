"""Times: the ones the operator gives (agent-send --at, --in) and how times
are written for people (ages, countdowns) and machines (ISO 8601, UTC)."""

import datetime
import math
import re
import time

from agentctl.errors import UsageError

UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
# Patterns as text: re compiles each at its first use (and keeps it), not at every
# program's start.
DURATION = r"(\d+(?:\.\d+)?)([smhd]?)"
CLOCK = r"([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?"

# How far the database's clock is ahead of this host's: 0 for a SQLite file, measured
# when a PostgreSQL database is opened (store/pg.py), so that hosts whose clocks
# disagree still agree on leases, timers and deadlines.
skew = 0.0


def now():
    """The current Unix time, by the database's clock: every time agentctl stores or
    compares with a stored one comes from here."""
    return time.time() + skew


def _given(when):
    """`when`, or now() when it is None (for the functions whose argument `now` hides
    the function's name)."""
    return now() if when is None else when


def parse_duration(text):
    """Seconds from 90, 90s, 15m, 2h or 1d."""
    found = re.fullmatch(DURATION, text.strip().lower())
    if not found:
        raise UsageError(f"bad duration: {text!r} (want a number with s, m, h or d, e.g. 15m)")
    return float(found.group(1)) * UNITS[found.group(2)]


def checked(when):
    """`when` if it is a time agentctl can write (ISO 8601, before the year
    10000), else a usage error: a far-off time must not break agent-ps later.
    A time before 1970 is 1970: in the past, so due at once, however far."""
    if when < 0:
        return 0.0
    try:
        datetime.datetime.fromtimestamp(when, datetime.timezone.utc)
    except (OverflowError, ValueError, OSError):
        raise UsageError("that time is out of range (the year must be before 10000)") from None
    return when


def after(seconds, now=None):
    """The time `seconds` from now, checked."""
    return checked(_given(now) + seconds)


def parse_time(text, now=None, zone=None):
    """A Unix time from ISO 8601 (2026-11-22T09:30, with or without a zone) or
    HH:MM[:SS] (its next occurrence); a time with no zone is in `zone`, by
    default local time."""
    now = _given(now)
    text = text.strip()
    clock = re.fullmatch(CLOCK, text)
    if clock:
        hour, minute, second = (int(g or 0) for g in clock.groups())
        today = datetime.datetime.fromtimestamp(now, zone)     # zone None: local, naive
        when = today.replace(hour=hour, minute=minute, second=second, microsecond=0)
        if when.timestamp() <= now:
            when += datetime.timedelta(days=1)      # wall-clock arithmetic, across DST too
        return when.timestamp()
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"bad time: {text!r} (want ISO 8601 such as 2026-11-22T09:30, "
                         "or HH:MM)") from None
    if when.tzinfo is None and zone is not None:
        when = when.replace(tzinfo=zone)
    try:
        return checked(when.timestamp())     # a naive datetime is local time
    except (OverflowError, ValueError, OSError):    # local time in the year 1, say
        if when.year < 9999:
            return 0.0                          # the past: due at once
        raise UsageError("that time is out of range (the year must be before 10000)") from None


def age(seconds):
    """A ps-style age: 45s, 12m, 3h, 2d."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def until(timestamp, now=None):
    """How long until a time: in 45s, in 12m30s, in 1h59m, in 2d3h (two units,
    so a wake-up set for 2h does not read "in 1h" a second later); due once it
    has passed; - for none."""
    if timestamp is None:
        return "-"
    ahead = math.ceil(timestamp - _given(now))
    if ahead <= 0:
        return "due"
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    for index, (unit, size) in enumerate(units[:-1]):
        if ahead >= size:
            rest, (small, small_size) = ahead % size, units[index + 1]
            return f"in {ahead // size}{unit}" + (
                f"{rest // small_size}{small}" if rest >= small_size else "")
    return f"in {ahead}s"


def iso(timestamp):
    if timestamp is None:
        return None
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).isoformat(
        timespec="seconds").replace("+00:00", "Z")
