"""What agent-top shows (agent-top(1)): a view of the agents kept up to date from the
event log, and what each one is doing now.

The view is read whole once (store.top.agents); after that, a change of the database
is read as the events committed since the last look (every change of state records
one, in its transaction), and only the agents they name are read again. A change no
event names (a lease renewed, a message counted) is picked up by reading the whole
view again, at most every FULL_EVERY seconds and only while the database changes: a
database that does not change costs nothing but the look (store.waits.data_version)."""

import time

from agentctl import clock, money
from agentctl.clock import age
from agentctl.ops import endpoints, proctable, why
from agentctl.store import events, registry, top as stored

RECENT = 3600.0         # seconds: how far back the exits shown with -a (or x) go
FULL_EVERY = 30.0       # seconds between two whole reads while the database changes
MANY = 500              # more agents than this named by new events: a whole read
MINUTE = 60.0           # the header's rates: tokens and cost over the last minute
DOING_FOR = 10.0        # seconds a reason line (it says "2m ago") is shown before asked again


class View:
    """The agents shown (not dead, and with `exits` those that died in the last RECENT
    seconds), each as agent-ps sees it (ops.proctable.seen) with its open turn."""

    def __init__(self, conn, exits=False):
        self.conn, self.exits = conn, exits
        self.raw, self.rows, self._order, self._doing = {}, {}, None, {}
        self.calls = []         # (time, tokens, cost in micros or None) of the last minute
        self.nets = []          # (time, refused) of its tools' connections in the last minute
        self.seq = 0
        self.load()

    def load(self):
        """Read the whole view (and the model calls of the last minute)."""
        now = clock.now()
        seq = events.newest(self.conn)      # first: what comes after it is read again
        self.raw = {r["id"]: r for r in stored.agents(self.conn, dead_since=self._since(now))}
        self.calls, self.nets = [], []
        for row in events.select(self.conn, kinds=["call", "net"], since=now - MINUTE):
            self._count(row)
        self.seq, self.full_at = seq, time.monotonic()
        self._seen_all(now)

    def update(self):
        """Read what changed since the last look; whether anything shown did."""
        if time.monotonic() - self.full_at >= FULL_EVERY:
            self.load()
            return True
        batch = events.select(self.conn, after=self.seq)
        if not batch:
            return False
        self.seq = batch[-1][0]
        changed = set()
        batches = False
        for row in batch:       # (seq, agent, kind, detail, actor, time, data, name)
            changed.add(row[1])
            if row[2] == "mail" and row[6]:
                d = events.fields("mail", row[3], row[6])
                changed.add(d.get("to"))
                batches = batches or "count" in d   # agent-send --jsonl: whose, it does not say
            elif row[2] in ("call", "net"):
                self._count(row)
        changed.discard(None)
        if len(changed) > MANY or batches:
            self.load()
            return True
        now = clock.now()
        found = {r["id"]: r for r in stored.agents(self.conn, ids=sorted(changed),
                                                   dead_since=self._since(now))}
        for agent_id in changed:
            self._doing.pop(agent_id, None)
            self._timed.discard(agent_id)
            if agent_id in found:
                self.raw[agent_id] = found[agent_id]
                self.rows[agent_id] = proctable.seen(found[agent_id], now)
                if _timed(found[agent_id]):
                    self._timed.add(agent_id)
            else:
                self.raw.pop(agent_id, None)
                self.rows.pop(agent_id, None)
        self._order = self._totals = None
        return True

    def _count(self, row):
        """A model call's or a connection's event, counted in the last minute's."""
        if row[2] == "net":
            self.nets.append((row[5], events.fields("net", row[3], row[6]).get("outcome")
                              == "refused"))
        else:
            call = _call(row)
            if call:
                self.calls.append(call)

    def show_exits(self, exits):
        self.exits = exits
        self.load()

    def tick(self, now=None):
        """What time alone changes: a run's lease that ran out (or whose process is
        gone), a grace period's end, a zombie overdue for reaping; the calls of the
        last minute. Only the rows that time can change are looked at."""
        now = clock.now() if now is None else now
        for agent_id in self._timed:
            seen = proctable.seen(self.raw[agent_id], now)
            if seen["status"] != self.rows[agent_id]["status"]:
                self.rows[agent_id] = seen
                self._order = self._totals = None
                self._doing.pop(agent_id, None)
        self.calls = [c for c in self.calls if c[0] >= now - MINUTE]
        self.nets = [c for c in self.nets if c[0] >= now - MINUTE]

    def _seen_all(self, now):
        self.rows = {i: proctable.seen(r, now) for i, r in self.raw.items()}
        self._timed = {i for i, r in self.raw.items() if _timed(r)}
        self._order, self._doing, self._totals = None, {}, None

    def _since(self, now):
        return now - RECENT if self.exits else None

    def ordered(self, pattern=None):
        """The rows shown, as a tree by lifecycle parent (each with its depth), those
        that match `pattern` only (matches())."""
        if self._order is None:
            shown = [r for r in self.rows.values() if self.exits or r["status"] != "X"]
            self._order = proctable.as_tree(shown)
        if not pattern:
            return self._order
        return [r for r in self._order if matches(r, pattern)]

    def subtree(self, agent_id):
        """How many live descendants of the agent the view holds."""
        children = {}
        for row in self.rows.values():
            children.setdefault(row["parent_id"], []).append(row)
        count, stack = 0, [agent_id]
        while stack:
            for child in children.get(stack.pop(), ()):
                if child["id"] != agent_id:
                    count += registry.is_live(child)
                    stack.append(child["id"])
        return count

    def totals(self, now=None):
        """The header's numbers: how many agents in each state, the model calls in
        flight, tokens and cost (micros; None: unpriced) of the last minute's calls, its
        tools' connections through the egress proxy (and those refused), and
        the total of the agents shown (read again only when a row changed)."""
        now = clock.now() if now is None else now
        if self._totals is None:
            rows = self.rows.values()
            counts = {}
            for row in rows:        # (a held agent is counted held, not sleeping)
                counts[proctable.state(row)] = counts.get(proctable.state(row), 0) + 1
            costs = [r["cost"] for r in rows if r["cost"] is not None]
            self._totals = {"counts": counts, "in_flight": sum(map(in_call, rows)),
                            "tokens": sum(r["tokens_in"] + r["tokens_out"] for r in rows),
                            "cost": sum(costs) if costs else None,
                            "unpriced": sum(r["unpriced"] for r in rows)}
        recent = [c for c in self.calls if c[0] >= now - MINUTE]
        priced = [c[2] for c in recent if c[2] is not None]
        nets = [refused for at, refused in self.nets if at >= now - MINUTE]
        return dict(self._totals, minute_tokens=sum(c[1] for c in recent),
                    minute_cost=sum(priced) if priced else None,
                    minute_unpriced=len(recent) - len(priced),
                    minute_connections=len(nets), minute_refused=sum(nets))

    def doing(self, row, now=None):
        """What the agent is doing now, as a line (doing())."""
        now = clock.now() if now is None else now
        if in_turn(row):
            return doing(self.conn, row, now)      # (from the row: a query only while it waits)
        cached = self._doing.get(row["id"])
        if cached is None or cached[1] <= time.monotonic():
            cached = self._doing[row["id"]] = (doing(self.conn, row, now),
                                               time.monotonic() + DOING_FOR)
        return cached[0]


def _timed(row):
    """Whether time alone can change how a stored row is seen (ops.proctable.seen): a
    run's lease, a grace period, a zombie's reaping."""
    return row["status"] in ("R", "Z") or row["kill_at"] is not None


def in_turn(row):
    """Whether a run holds the agent now (its status as seen is R)."""
    return row["status"] == "R" and row["turn"] is not None


def in_call(row):
    """Whether the agent waits for its model's reply now (not for its provider: a slot,
    a throttle's end)."""
    return in_turn(row) and row["tool"] is None and row["waiting"] is None


def doing(conn, row, now):
    """What an agent is doing now, as a line: a running agent's model call or tool
    call and for how long; else the first reason agent-why gives that it runs no
    turn (ops.why.REASONS, in its order: paused on which request, stopped, budget
    spent, held after a failure or in a mail loop, backing off until when ... and
    every reason added there, as a provider's rate limit), or what its next turn
    would take."""
    if in_turn(row):
        since = age(now - step_began(row))
        if row["tool"]:
            return f"tool {row['tool']} ({since})"
        if row["waiting"] is not None:      # for a slot, a throttle's end or the pace
            wait = endpoints.waiting(conn, row, now)
            return (f"waiting for its provider ({age(now - row['waiting'])})"
                    + (f": {wait.text}" if wait is not None else ""))
        return f"model call ({since})"
    lines = why.reasons(conn, row, now)
    line = lines[0] if lines else why.pending(conn, row, now)
    found = why.unmerged(conn, row) if row["cwd"] else None
    if found:                   # (its workspace's work, not merged yet: agent-why says more)
        line += f"; {found[0]} path{'s' if found[0] != 1 else ''} to merge"
    return line


def step_began(row):
    """When the step a running agent is in began (its model call, or its tool call):
    the latest of its turn's start, its turn's newest message (a step's end: the next
    began; the prompts the turn took are older than it), a run taking up the turn again
    (a resumed turn's first step) and the model call its run has in flight (calling:
    where its endpoint has a cap)."""
    return max(t for t in (row["turn_at"], row["step_at"], row["run_at"], row["calling"])
               if t is not None)


def matches(row, pattern):
    """Whether a row matches a filter: its name, id, role or model holds the text, in
    any case."""
    pattern = pattern.lower()
    return any(pattern in (row[k] or "").lower() for k in ("name", "id", "role", "model"))


def _call(row):
    """(time, tokens, cost in micros or None) of a call event."""
    d = events.fields("call", row[3], row[6])
    if not d:
        return None
    cost = d.get("cost")
    return (row[5], d.get("input_tokens", 0) + d.get("output_tokens", 0),
            None if cost is None else money.of_dollars(cost))

