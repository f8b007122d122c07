"""The limits on each sandboxed tool call (agent-fork --limit, agentctl(7), SANDBOX):
CPU seconds, memory (address space), processes, file size and open files. Written
KEY=VALUE,... (`cpu=60,mem=1G,procs=64,fsize=100M,files=256`); a key not given has
its default, and `unlimited` lifts one. An agent's limits are stored as it was given
them, with the keys it was given; a child's are at most its parent's, key by key.
"""

import math

from agentctl.clock import parse_duration
from agentctl.errors import UsageError

UNLIMITED = None

# key: (what it limits, its default, whether its value is a size in bytes)
KEYS = {
    "cpu": ("CPU seconds of each call (RLIMIT_CPU)", 600, False),
    "mem": ("bytes of address space of each process (RLIMIT_AS)", 4 << 30, True),
    "procs": ("processes at once in a call's sandbox", 256, False),
    "fsize": ("bytes of the largest file a call writes (RLIMIT_FSIZE), and of its /tmp",
              1 << 30, True),
    "files": ("open files of each process (RLIMIT_NOFILE)", 1024, False),
}
DEFAULTS = {key: default for key, (_, default, _) in KEYS.items()}
SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
LARGEST = 2 ** 63 - 1


def _value(key, text):
    text = text.strip().lower()
    if text in ("unlimited", "none"):
        return UNLIMITED
    try:
        if key == "cpu":
            value = parse_duration(text)
        elif KEYS[key][2]:
            number, unit = (text[:-1], text[-1]) if text[-1:] in SIZE_UNITS else (text, "")
            value = float(number) * SIZE_UNITS[unit] if number.replace(".", "", 1).isdigit() \
                else None
        else:
            value = int(text) if text.isascii() and text.isdigit() else None
    except UsageError:
        value = None
    if value is None or not math.isfinite(value) or not 1 <= value <= LARGEST:
        unit = {"cpu": "seconds, or a duration such as 10m", "mem": "bytes, or 512M, 4G",
                "fsize": "bytes, or 100M, 1G"}.get(key, "a whole number")
        raise UsageError(f"--limit {key}={text}: want {unit} (at least 1), or unlimited")
    return int(math.ceil(value))


def parse(given):
    """{key: value} from KEY=VALUE[,KEY=VALUE...] texts (a list, or one text); a usage
    error for an unknown key or a bad value. A key given twice keeps the last."""
    texts = [given] if isinstance(given, str) else list(given or ())
    found = {}
    for text in texts:
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            key, equals, value = part.partition("=")
            key = key.strip().lower()
            if key not in KEYS or not equals:
                raise UsageError(f"--limit {part}: want KEY=VALUE, KEY one of "
                                 f"{', '.join(KEYS)}")
            found[key] = _value(key, value)
    return found


def stored(limits):
    """The text kept in the agents table: the keys given, in KEYS's order; None for
    none."""
    if not limits:
        return None
    return ",".join(f"{k}={'unlimited' if limits[k] is None else limits[k]}"
                    for k in KEYS if k in limits)


def read(text):
    """The limits an agent's stored text gives (keys not given: the defaults)."""
    values = dict(DEFAULTS)
    values.update(parse(text) if text else {})
    return values


def _size(n):
    for unit, factor in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def shown(text):
    """An agent's stored limits as people read them: sizes in K, M, G."""
    if not text:
        return "-"
    out = []
    for key, value in parse(text).items():
        out.append(f"{key}={'unlimited' if value is None else _size(value) if KEYS[key][2] else value}")
    return ",".join(out)


def within(new, old):
    """Whether limits `new` (stored text) are each at most `old`'s (defaults for keys
    not given, unlimited the most); the keys of `new` that are not, else []."""
    mine, theirs = read(new), read(old)
    return [k for k in KEYS if theirs[k] is not None
            and (mine[k] is None or mine[k] > theirs[k])]


def child(parent, given):
    """A child's stored limits: its parent's, with the keys `given` (parsed) on top."""
    merged = parse(parent) if parent else {}
    merged.update(given)
    return stored(merged)
