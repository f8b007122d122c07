"""Many runners, one provider (agent-run(1), Providers): what the runs that share a
database agree on about each endpoint (a provider's base URL and key), so that their
calls together stay within what it allows:

- a cap on the calls in flight to it ($AGENTCTL_CONCURRENCY): a call holds a slot
  (agents.calling) while it is in flight, and a slot of a run that died is free as its
  lease is (lease.alive: its process probed on this host, its expiry on another);
- a time before which no call starts (endpoints.not_before): a refusal's Retry-After
  (429, 503, 529), or a budget the provider says is spent;
- a pace (endpoints.spacing, next_at): while the provider says its budget of requests
  is low, calls start that far apart, so that it is spent no faster than it comes back.

The Gate a turn hands its model is ops/gate.py's; waiting() answers agent-ps and
agent-why; room() is agent-run --all's.
"""

import os

from agentctl import clock, env, modelspec
from agentctl.errors import UsageError
from agentctl.ops import lease
from agentctl.store import endpoints as rows, registry

REFUSALS = frozenset((429, 503, 529))   # a refusal to be left alone: every run waits
READY = 2           # --all: runs on their way to a slot of an endpoint, for each slot
HOLD_BACK = 5.0     # --all: seconds of a throttle it starts no run for
SLOWER = 1.1        # the pace's spacing after a response that says no request is left
FASTER = 0.98       # and after one that says one or more are
LOW_REQUESTS = 0.5  # a budget of requests with less than this share left is paced
LOW_TOKENS = 0.05   # a budget of tokens with less than this share left is waited for
SEEN_EVERY = 5.0    # seconds: what the provider said is written at most this often alone
WAIT = 300.0        # $AGENTCTL_PROVIDER_WAIT's default


# -- settings ----------------------------------------------------------------------------------

def shared():
    """Whether the runs share what they know of endpoints ($AGENTCTL_ENDPOINT_STATE, on
    by default; off: each call retries on its own, and no cap holds)."""
    value = os.environ.get("AGENTCTL_ENDPOINT_STATE", "").strip().lower() or "on"
    if value not in ("on", "off"):
        raise UsageError(f"AGENTCTL_ENDPOINT_STATE must be on or off, not {env.shown(value)}")
    return value == "on"


def caps():
    """$AGENTCTL_CONCURRENCY as [(key, n)]: KEY=N entries separated by commas, KEY a
    provider's name, an endpoint's base URL (or a part of it ending at a /), or *."""
    raw = os.environ.get("AGENTCTL_CONCURRENCY", "").strip()
    found = []
    for entry in filter(None, (e.strip() for e in raw.split(","))):
        key, equals, count = entry.rpartition("=")
        key = key.strip().rstrip("/").lower()
        count = count.strip()
        if not (equals and key and count.isascii() and count.isdigit() and 0 < int(count)
                and (key == "*" or key.isidentifier() or key.startswith(("http://",
                                                                         "https://")))):
            raise UsageError(f"AGENTCTL_CONCURRENCY must be KEY=N entries separated by commas "
                             f"(KEY a provider, a base URL or *; N 1 or more), not "
                             f"{env.shown(entry)}")
        found.append((key, int(count)))
    return found


def cap(provider, url):
    """The most calls in flight to the endpoint at `url` of `provider` at once, or None:
    the entry of the longest base URL it begins with, else of its provider, else *."""
    url = url.lower()
    best = None
    for key, count in caps():
        if key.startswith(("http://", "https://")):
            if url == key or url.startswith(key + "/"):
                rank = len(key) + 2
            else:
                continue
        else:
            rank = 1 if key == provider else 0 if key == "*" else -1
        if rank >= 0 and (best is None or rank >= best[0]):
            best = (rank, count)
    return best and best[1]


def wait_limit():
    """$AGENTCTL_PROVIDER_WAIT: the longest a call waits for its endpoint (a slot, the end
    of a throttle or of the pace), a duration (default 300 s)."""
    return env.duration("AGENTCTL_PROVIDER_WAIT", WAIT)


# -- what an endpoint's state says -------------------------------------------------------------

class Wait:
    """Why calls to `endpoint` can't start now: `why` throttled (the provider refused a
    call, or said a budget is spent), paced or full; `until` when it ends (None: when a
    slot frees); `text`, the line agent-ps and agent-why show; when full, `busy` of
    `count` are taken."""

    def __init__(self, endpoint, why, until, text, busy=None, count=None):
        self.endpoint, self.why, self.until, self.text = endpoint, why, until, text
        self.busy, self.count = busy, count

    def __repr__(self):
        return f"Wait({self.endpoint!r}, {self.why!r}, {self.until!r})"


def callers(runs, now, but=None):
    """Of an endpoint's runs (rows.runs), the ids of those with a call in flight whose run
    still holds its lease, `but` aside."""
    return [r["id"] for r in runs if r["calling"] is not None and r["id"] != but
            and lease.alive(r["lease_owner"], r["lease_until"], now)]


def blocked(row, runs, count, now, but=None):
    """Why a call to the endpoint of `row` (its runs, its cap `count`) can't start now
    (a Wait), or None."""
    if row is None:
        return None
    if (row["not_before"] or 0) > now:
        return Wait(row["id"], "throttled", row["not_before"],
                    f"throttled until {clock.iso(row['not_before'])}: {row['reason']}")
    if row["spacing"] and (row["next_at"] or 0) > now:
        return Wait(row["id"], "paced", row["next_at"],
                    f"paced: a call every {row['spacing']:.2g} s")
    if count:
        busy = len(callers(runs, now, but))
        if busy >= count:
            return Wait(row["id"], "full", None, f"full: {busy} of {count} calls in flight",
                        busy, count)
    return None


def waiting(conn, agent, now=None):
    """Is this agent's endpoint throttled, paced or full, and until when: a Wait, or None.
    For agent-ps (its PROVIDER column) and agent-why ("waiting for its provider").

    The endpoint is endpoint_of() the agent; its cap is the one its runs last had
    (endpoints.cap: name()), not the asker's environment's. Whether the agent would call it now (its run waits:
    agents.waiting; or it sleeps with input pending) is for the caller to say: this
    answers for its endpoint."""
    known = rows.every(conn)
    endpoint = endpoint_of(agent, known)
    if endpoint is None:
        return None
    now = now or clock.now()
    row = known.get(endpoint)
    count = row and row["cap"]
    return blocked(row, rows.runs(conn, endpoint) if count else (), count, now,
                   but=agent["id"])


def endpoint_of(agent, known):
    """The endpoint the agent's runs call: the one its latest run named (agents.endpoint),
    else, for an agent that never ran, the one of its model's provider that `known` (the
    endpoints' rows by id) holds when there is exactly one, else the one its run would
    call as this environment names it (as agent-run --all does); else None."""
    if agent["endpoint"]:
        return agent["endpoint"]
    spec = modelspec.chosen(agent)
    provider = modelspec.provider(spec)
    ids = [i for i, row in known.items() if row["provider"] == provider]
    if len(ids) == 1:
        return ids[0]
    if not ids:
        return None
    from agentctl.endpoint import identity_of  # (start-up: 1 ms, only then)
    identity = identity_of(spec)
    return identity.name if identity is not None and identity.name in known else None


def wants_call(agent, has_input):
    """Whether the agent would call its endpoint now, so that the endpoint's state is
    its wait (agent-ps's PROVIDER, agent-why): its run waits for the endpoint, or it
    sleeps (its status as seen: a dead run's agent sleeps) with input a run would take
    (`has_input()`, asked only then)."""
    return (agent["status"] == "R" and agent["waiting"] is not None
            or agent["status"] == "S" and bool(has_input()))


def states(conn, ids, found, now=None):
    """{endpoint: a Wait, or None} for the endpoints named by `ids` (agent-ps): whether
    calls to each can't start now, and why (`found`: the endpoints' rows by id)."""
    now = now or clock.now()
    counts = {i: r["cap"] for i, r in found.items()}
    runs = rows.runs_of(conn, [i for i, count in counts.items() if count])
    return {i: blocked(found.get(i), runs.get(i, ()), counts.get(i), now) for i in ids}


def room(conn, identity, now=None):
    """agent-run --all: why no run of an agent of the endpoint (agentctl.endpoint.Identity)
    may start now (a Wait), or None. None while it is throttled for more than
    HOLD_BACK seconds (a shorter wait is over by the time a run has started). With a
    cap, as many runs may be calling it as it has slots, and READY times as many more
    be on their way to a slot (starting, waiting for one, or ending: a run takes a
    while to start), counted among the runs under way (marked R, their lease alive),
    whoever started them."""
    now = now or clock.now()
    row = rows.get(conn, identity.name)
    if row is not None and (row["not_before"] or 0) > now + HOLD_BACK:
        return blocked(row, (), None, now)
    count = cap(identity.provider, identity.url)
    if count:
        under_way = [r for r in rows.runs(conn, identity.name)
                     if lease.alive(r["lease_owner"], r["lease_until"], now)]
        calling = sum(1 for r in under_way if r["calling"] is not None)
        if len(under_way) - min(calling, count) >= READY * count:
            return Wait(identity.name, "full", None,
                        f"full: {len(under_way)} runs under way for {count} slots",
                        len(under_way), count)
    return None


def name(conn, agent_id, identity):
    """The agent's run calls the endpoint `identity` (in the caller's transaction): its
    row made when it is first named, its cap as this run has it ($AGENTCTL_CONCURRENCY,
    which the readers take from the row), and the agent's agents.endpoint."""
    row = rows.ensure(conn, identity.name, identity.provider, identity.url)
    count = cap(identity.provider, identity.url)
    if row["cap"] != count:
        rows.update(conn, identity.name, cap=count)
    if registry.get(conn, agent_id)["endpoint"] != identity.name:
        registry.update(conn, agent_id, endpoint=identity.name)


# -- what a response teaches ---------------------------------------------------------------------

def learn(row, said, now, backoff, sent=None):
    """(changes to the endpoint's row, the event to record as (kind, fields) or None) for
    a response that said `said` (models.limits.Limits; None when none came), `backoff`
    the wait of the run that saw it. A budget's reset is counted from when the request
    was `sent` (when given): the provider counted it then, a response's time later."""
    if said is None:
        return {}, None
    changes, event = {}, None
    counted = min(sent or now, now)
    not_before = row["not_before"] or 0

    def wait_until(until, reason):
        nonlocal not_before
        if until > not_before:
            not_before = changes["not_before"] = until
            changes["reason"] = reason

    if said.status in REFUSALS:
        asked = said.retry_after
        wait_until(now + (asked if asked is not None else backoff),
                   f"HTTP {said.status}" + (f", Retry-After {asked:g} s" if asked else ""))
        if row["refused_at"] is None:
            changes["refused_at"] = now
            event = ("throttle", {"endpoint": row["id"], "until": not_before,
                                  "reason": changes.get("reason") or row["reason"]
                                  or f"HTTP {said.status}"})
    elif 200 <= said.status < 300 and row["refused_at"] is not None and now >= not_before:
        changes["refused_at"] = None
        event = ("recover", {"endpoint": row["id"], "seconds": round(now - row["refused_at"], 3)})
    requests, tokens = said.requests, said.tokens
    if requests is not None:
        limit, left, reset = requests.limit, requests.remaining, requests.reset
        if left <= 0 and reset:     # none left: not before one is back (whole: at most)
            wait_until(counted + reset / max(1, limit or 1),
                       f"requests spent (0 of {limit or '?'} left)")
        changes.update(pace(row["spacing"], requests, said.status in REFUSALS))
    if tokens is not None and tokens.reset:
        limit, left = tokens.limit, tokens.remaining
        need = LOW_TOKENS * limit if limit else 1
        if left < need:
            share = (need - left) / (limit - left) if limit and limit > left else 1.0
            wait_until(counted + tokens.reset * share,
                       f"tokens low ({left} of {limit or '?'} left)")
    if changes or now - (row["seen_at"] or 0) >= SEEN_EVERY:
        if requests is not None or tokens is not None:
            changes.update(requests_left=requests and requests.remaining,
                           tokens_left=tokens and tokens.remaining, seen_at=now)
    return changes, event


def pace(spacing, requests, refused):
    """{"spacing": the seconds between the starts of two calls} when a budget of requests
    (models.limits.Budget) changes the pace `spacing` (None: none), else {}.

    A budget half spent or more starts the pace at the rate it comes back: the time
    until it is whole over the requests used. A provider counts whole requests, so
    that rate is only near (between the time over the requests used and over one
    fewer): from then on each response that says none is left makes the calls a tenth
    further apart (at most a tenth more than the slower bound), each that says one or
    more are left 2% closer (never closer than the faster bound), so that the budget
    is spent as fast as it comes back and no faster; a refusal makes them a tenth
    further apart (what it says of the budget counts no request). A budget more than
    half left ends the pace."""
    limit, left, reset = requests.limit, requests.remaining, requests.reset
    if not limit or left > LOW_REQUESTS * limit:
        return {"spacing": None} if spacing is not None else {}
    if refused:
        return {"spacing": spacing * SLOWER} if spacing else {}
    if not reset:
        return {}
    fast, slow = reset / max(1, limit - left), reset / max(1, limit - left - 1)
    if spacing is None:
        new = fast
    elif left <= 0:
        new = max(fast, min(spacing, slow) * SLOWER)
    else:
        new = max(fast, spacing * FASTER)
    return {"spacing": new}
