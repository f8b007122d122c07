"""What a provider's response says of its limits (agent-run(1), Providers), read into one
form: how long it asks to be left alone (Retry-After), and what is left of its budgets
of requests and tokens and when they are whole again, in the headers of the family
each provider's row names (agentctl.modelspec: OpenAI's x-ratelimit-*, Anthropic's
anthropic-ratelimit-*). What the runs make of it together is ops/endpoints.py's;
nothing here does I/O or keeps state.

The formats, as the providers document them:
- Retry-After: seconds, or an HTTP date (RFC 9110); retry-after-ms (milliseconds),
  which both official SDKs read first.
- OpenAI: x-ratelimit-{limit,remaining}-{requests,tokens}, whole numbers, and
  x-ratelimit-reset-{requests,tokens}, the time until the budget is whole again as a
  Go duration ("1s", "6m0s", "12ms", "2m59.56s").
- Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
  {limit,remaining}, whole numbers, and -reset, the time it is whole again, RFC 3339
  ("2026-11-22T12:00:00Z").
"""

import datetime
import email.utils
import re
import time

from ..modelspec import PROVIDERS

# Patterns as text: re compiles each at its first use (and keeps it), not at every turn's start.
SECONDS = r"\s*([0-9]+(?:\.[0-9]+)?)\s*"
GO_PART = r"([0-9]+(?:\.[0-9]+)?)(h|ms|m|s|us|µs|ns)"
GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
LONGEST = 10 ** 7       # seconds: a wait or a reset beyond it is no answer at all
TOKEN_KINDS = ("tokens", "input-tokens", "output-tokens")
# The rate-limit header families, by the providers' rows: each a pattern of a header's
# name, with {field} (limit, remaining, reset) and {kind} (requests, or one of TOKEN_KINDS).
FAMILIES = tuple(dict.fromkeys(p.limits for p in PROVIDERS if p.limits))


class Budget:
    """One of a provider's budgets: `limit` (None when not said), `remaining`, and
    `reset`, the seconds until it is whole again (None when not said)."""

    def __init__(self, limit, remaining, reset):
        self.limit, self.remaining, self.reset = limit, remaining, reset

    def __repr__(self):
        return f"Budget({self.limit}, {self.remaining}, {self.reset})"


class Limits:
    """What one response said: its `status`, `retry_after` (seconds, or None), and its
    `requests` and `tokens` budgets (Budget, or None). Of several token budgets
    (Anthropic's input, output and both), the one with the least left for its limit."""

    def __init__(self, status, retry_after=None, requests=None, tokens=None):
        self.status, self.retry_after = status, retry_after
        self.requests, self.tokens = requests, tokens

    def __repr__(self):
        return (f"Limits({self.status}, retry_after={self.retry_after}, "
                f"requests={self.requests}, tokens={self.tokens})")


def read(status, headers, now=None):
    """The Limits of a response: its status and its headers (a mapping whose get() ignores
    case, as urllib3's does)."""
    now = time.time() if now is None else now
    requests = [b for family in FAMILIES
                if (b := _budget(headers, family, "requests", now)) is not None]
    tokens = [b for family in FAMILIES for kind in TOKEN_KINDS
              if (b := _budget(headers, family, kind, now)) is not None]
    return Limits(status, retry_after(headers, now), requests[0] if requests else None,
                  min(tokens, key=_share_left) if tokens else None)


def retry_after(headers, now=None):
    """The seconds a response asks to be left alone: retry-after-ms, else Retry-After (a
    number or an HTTP date), at most LONGEST; None for none, or one that can't be read."""
    now = time.time() if now is None else now
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None:
        return min(millis / 1000, LONGEST)
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return min(seconds, LONGEST)
    try:
        date = email.utils.parsedate_tz(value)
        return min(max(0.0, email.utils.mktime_tz(date) - now), LONGEST) if date else None
    except (TypeError, ValueError, OverflowError):
        return None


def _budget(headers, family, kind, now):
    def said(field):
        return headers.get(family.format(field=field, kind=kind))
    remaining = _whole(said("remaining"))
    if remaining is None:
        return None
    return Budget(_whole(said("limit")), remaining, reset_seconds(said("reset"), now))


def _share_left(budget):
    return budget.remaining / budget.limit if budget.limit else float(budget.remaining > 0)


def reset_seconds(value, now=None):
    """Seconds until a budget is whole again, from a Go duration (OpenAI), an RFC 3339
    time (Anthropic), a number of seconds, or Unix seconds; None when it can't be read."""
    if value is None:
        return None
    value = value.strip()
    now = time.time() if now is None else now
    if re.match(GO_PART, value):
        parts = re.findall(GO_PART, value)
        if "".join(n + u for n, u in parts) == value:
            return _bounded(sum(float(n) * GO_UNITS[u] for n, u in parts))
    seconds = _number(value)
    if seconds is not None:
        return _bounded(seconds - now if seconds > 10 ** 9 else seconds)
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return _bounded(max(0.0, when.timestamp() - now))


def _number(value):
    found = re.fullmatch(SECONDS, value) if isinstance(value, str) else None
    return float(found.group(1)) if found else None


def _whole(value):
    found = _number(value)
    return int(found) if found is not None and found == int(found) else None


def _bounded(seconds):
    return seconds if 0 <= seconds <= LONGEST else None
