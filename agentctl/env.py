"""Settings from the environment, checked: a value that is no finite number (inf,
nan, text) or is out of range is a usage error that names the variable, never a
silent default."""

import math
import os

from agentctl.clock import parse_duration
from agentctl.errors import UsageError
from agentctl.text import cut


LARGEST = 2 ** 63 - 1      # SQLite's largest INTEGER: no setting is beyond it


def shown(raw, width=40):
    """A value quoted in a message, cut: a setting may be thousands of characters."""
    return repr(cut(raw, width))


def _raw(name):
    raw = os.environ.get(name, "").strip()
    return raw or None


def number(name, default, minimum=0.0, whole=False):
    """$name as a finite number >= minimum (a whole one with `whole`), else the default
    when it is unset or empty."""
    raw = _raw(name)
    if raw is None:
        return default
    try:       # ASCII only: int() and float() also take other scripts' digits
        value = (int(raw) if whole else float(raw)) if raw.isascii() else None
    except ValueError:                  # (or a few thousand digits)
        value = None
    if value is None or not math.isfinite(value) or value < minimum or value > LARGEST:
        what = "a whole number" if whole else "a number"
        raise UsageError(f"{name} must be {what} >= {minimum:g}, not {shown(raw)}")
    return value


def duration(name, default):
    """$name as a duration (90, 90s, 10m, 24h, 1d), in seconds, else the default."""
    raw = _raw(name)
    if raw is None:
        return default
    return _duration(name, raw)


def durations(name, defaults):
    """$name as FIRST[,SECOND] durations; what is not given keeps its default."""
    raw = _raw(name)
    if raw is None:
        return defaults
    parts = raw.split(",")
    if len(parts) > len(defaults):
        raise UsageError(f"{name} must be at most {len(defaults)} durations "
                         f"separated by commas, not {shown(raw)}")
    given = [_duration(name, part) for part in parts]
    return tuple(given) + tuple(defaults[len(given):])


def _duration(name, raw):
    try:
        seconds = parse_duration(raw)
    except UsageError:
        seconds = None
    if seconds is None or not math.isfinite(seconds):
        raise UsageError(f"{name} must be a duration such as 90, 90s, 10m or 24h, "
                         f"not {shown(raw)}")
    return seconds


def host():
    """This host's name, as a lease names it: $AGENTCTL_HOST when set (containers
    often share a host name), else the system's (uname's node name, which is what
    gethostname() returns, without importing socket)."""
    given = os.environ.get("AGENTCTL_HOST", "").strip()
    if given:
        if ":" in given or not given.isprintable():
            raise UsageError(f"AGENTCTL_HOST must be a host name (no colon), not {given!r}")
        return given
    return os.uname().nodename
