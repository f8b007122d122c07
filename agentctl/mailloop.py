"""Mail loops (agentctl(7), Lifecycle): two agents that answer each other's mail can
echo for hours. Here, the mail_loop setting's value (N/DURATION, or off) and the rule
that finds a loop in the mails two agents exchanged (tripped()); ops/mail.py reads the
rows at each delivery and holds the pair.

A loop: the same two agents exchanged N mails (both ways) within DURATION with no other
input to either (no mail from anyone else: another agent, the operator, a notice), or
each of them sent the other the same words SAME times in a row in that run. The
count starts again after either was held for a loop."""

import math
import re

from agentctl import env
from agentctl.clock import parse_duration
from agentctl.errors import UsageError

DEFAULT = (20, 3600.0)      # a mail_loop unset: 20 mails within an hour (agent-fork(1))
OFF = "off"
LEAST = 2                   # the fewest mails a loop takes: one each way
SAME = 3                    # the same words each way, so many times in a row, is a loop
WORDS = 4096                # the characters of a body compared (its start)
_UNITS = (("d", 86400), ("h", 3600), ("m", 60))
# (patterns compiled at their first use, and a plain class: every program loads this
# module through the settings table, and typing or a compile at import costs its start)


class Loop:
    """A loop found: the mails of the run within the window (N, when they are N or more;
    those the same words were found in), the window, and SAME when the same words
    found it (else 0)."""
    __slots__ = ("count", "seconds", "same")

    def __init__(self, count, seconds, same):
        self.count, self.seconds, self.same = count, seconds, same

    def __iter__(self):
        return iter((self.count, self.seconds, self.same))

    def __eq__(self, other):
        return tuple(self) == tuple(other)

    def __repr__(self):
        return f"Loop({self.count}, {self.seconds}, {self.same})"


def span(seconds):
    """A window as mail_loop writes it: its largest whole unit (1h, 90m, 45s)."""
    for unit, size in _UNITS:
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def parse(text):
    """The stored form of a mail_loop value given as text: N/DURATION written back by
    span() (20/1h, 50/90m), or off for off or 0; None for anything else."""
    text = text.strip().lower()
    if text in (OFF, "0"):
        return OFF
    count, slash, window = text.partition("/")
    n = int(count) if count.isascii() and count.isdigit() else None
    try:
        seconds = parse_duration(window) if slash else None
    except UsageError:
        return None
    if n is None or not LEAST <= n <= env.LARGEST or seconds is None \
            or not 0 < seconds < math.inf:
        return None
    return f"{n}/{span(seconds)}"


def read(stored):
    """(N, seconds) of a stored value (None: the default), or None when it is off."""
    if stored is None:
        return DEFAULT
    if stored == OFF:
        return None
    count, _, window = stored.partition("/")
    return int(count), parse_duration(window)


def shown(stored):
    """A stored value as people read it: the default's when unset."""
    return stored or f"{DEFAULT[0]}/{span(DEFAULT[1])}"


def sooner(old, new):
    """Whether the check `new` (stored) finds a loop at least as soon as `old`: at most
    as many mails within at least as long a window; anything is sooner than off."""
    was, now = read(old), read(new)
    return was is None or (now is not None and now[0] <= was[0] and now[1] >= was[1])


def words(body):
    """What the same-words rule compares of a body: its start, in one case, each run of
    white space one space and each number 0 (a counter in an echo changes nothing)."""
    return re.sub(r"\s+", " ", re.sub(r"\d+", "0", body[:WORDS].casefold())).strip()


def tripped(run, rules, now):
    """The Loop that `run` makes by one of `rules` ((N, seconds) each, as read()) at
    `now`, or None. `run`: the mails between two agents, newest first, as (sender,
    body, sent at), with no other input to either among them or since."""
    for n, seconds in rules:
        within = [m for m in run if m[2] >= now - seconds]
        senders = {m[0] for m in within}
        if len(senders) < 2:
            continue        # no exchange: one wrote, the other never answered
        if len(within) >= n:
            return Loop(n, seconds, 0)      # (at least: a check turned on late finds more)
        if all(_repeated([m[1] for m in within if m[0] == s]) for s in senders):
            return Loop(len(within), seconds, SAME)
    return None


def _repeated(bodies):
    """Whether the newest SAME of `bodies` (newest first) say the same words."""
    return len(bodies) >= SAME and len({words(b) for b in bodies[:SAME]}) == 1


def looping(row):
    """Whether the agent of `row` is held for a mail loop (not after a failure): the hold
    that the loop set is the latest."""
    return (row["held_at"] is not None and row["looped_at"] is not None
            and row["looped_at"] >= row["held_at"])
