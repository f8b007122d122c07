"""The gate a turn hands its model (models.base.Gate) for the calls of one run to one
endpoint: what ops/endpoints.py decides (the cap, the not-before, the pace, what a
response teaches), taken and given back around each try of a call."""

import threading
import time

from agentctl import clock
from agentctl.errors import TempFail
from agentctl.ops import lease
from agentctl.ops.endpoints import REFUSALS, blocked, cap, learn, name, wait_limit
from agentctl.store import endpoints as rows, events, registry
from agentctl.store.db import connect
from agentctl.store.waits import commits


class Gate:
    """What a turn hands its model (models.base.Gate) for the calls of one run to the
    endpoint `identity` (agentctl.endpoint.Identity): a slot taken before each try and given
    back after it when the endpoint is capped, the endpoint's not-before and pace waited
    for, what each response says shared. The calls run in a thread of their own
    (turn.runner.Interruptible): the gate has its own connection, and its writes are the
    run's (lease.holding: a run that lost its claim writes nothing)."""

    POLL = 0.05         # SQLite: how often a waiting call looks for a commit, at most

    def __init__(self, path, agent_id, identity):
        self.path, self.agent_id, self.identity = path, agent_id, identity
        self.endpoint = identity.name
        self.count = cap(identity.provider, identity.url)
        self.limit = wait_limit()
        self.conn = None
        self.row = None             # the endpoint's row as the last acquire() read it
        self.holding = False        # a slot is held for the try in flight
        self.sent = None            # when the try in flight was let through
        self.closed = threading.Event()
        self.lock = threading.Lock()
        self.sleeping = False       # _sleep() uses the connection outside the lock

    def _connection(self):
        if self.closed.is_set():
            raise TempFail(f"{self.identity.provider}: the turn ended")
        if self.conn is None:
            self.conn = connect(self.path)
        return self.conn

    def _check(self, conn, now):
        self.row = rows.get(conn, self.endpoint)
        count = self.count
        runs = rows.runs(conn, self.endpoint) if count else ()
        return blocked(self.row, runs, count, now, but=self.agent_id)

    def acquire(self):
        start = time.monotonic()
        marked = False          # agents.waiting says this run waits
        while True:
            with self.lock:
                conn = self._connection()
                now = clock.now()
                wait = self._check(conn, now)
                me = None if marked else registry.get(conn, self.agent_id)
                if wait is None and not self.count and not (self.row and self.row["spacing"]) \
                        and me is not None and me["endpoint"] == self.endpoint:
                    self.sent = now
                    return      # nothing to take, nothing to say: no write
                if wait is None or not marked:
                    wait = self._step(conn, marked)
                    marked = marked or wait is not None
                if wait is None:
                    self.sent = clock.now()
                    return
            left = start + self.limit - time.monotonic()
            if wait.until is not None and wait.until - clock.now() > left or left <= 0:
                raise TempFail(f"model API unavailable: {self.identity.provider}: "
                               f"{self.identity.url} {wait.text} (AGENTCTL_PROVIDER_WAIT="
                               f"{self.limit:g} s)", kind="throttled")
            self._sleep(conn, min(left, wait.until - clock.now() + 0.001 if wait.until
                                  else left))

    def _step(self, conn, marked):
        """Take a slot (and the pace's next start) when the endpoint allows a call now, in
        one transaction of the run; else mark the run as waiting. The Wait, or None."""
        with lease.holding(conn, self.agent_id):
            now = clock.now()
            name(conn, self.agent_id, self.identity)
            wait = self._check(conn, now)
            if wait is not None:
                if not marked:
                    registry.update(conn, self.agent_id, waiting=now)
                return wait
            if self.row["spacing"]:
                rows.update(conn, self.endpoint, next_at=now + self.row["spacing"])
            registry.update(conn, self.agent_id, waiting=None,
                            calling=now if self.count else None)
            self.holding = bool(self.count)
            return None

    def _sleep(self, conn, seconds):
        """Until another connection commits, `seconds` pass (a second at most: a slot's
        holder may die without a commit) or the gate is closed. The connection is used
        outside the lock meanwhile: close() leaves it to this thread to close (closing a
        connection another thread is reading from can crash the process)."""
        deadline = time.monotonic() + max(0.0, min(seconds, 1.0))
        with self.lock:
            if self.closed.is_set():
                raise TempFail(f"{self.identity.provider}: the turn ended")
            self.sleeping = True
        try:
            pause = None if conn.dialect == "postgresql" else self.closed.wait
            looks = commits(conn, deadline, most=self.POLL, pause=pause)
            next(looks)                 # at once: what was committed so far
            if not self.closed.is_set():
                next(looks, None)       # the next commit, the deadline, or close()
        finally:
            with self.lock:
                self.sleeping = False
                if self.closed.is_set():
                    self._close()
        if self.closed.is_set():
            raise TempFail(f"{self.identity.provider}: the turn ended")

    def release(self, said, backoff):
        """Give the slot back and share what the response said (models.base.Gate)."""
        refused = said is not None and said.status in REFUSALS
        if self.closed.is_set():
            return refused
        with self.lock:
            now = clock.now()
            if self.row is not None:
                changes, event = learn(self.row, said, now, backoff, self.sent)
                if not (self.holding or changes or event):
                    return refused
            try:
                with lease.holding(self._connection(), self.agent_id):
                    name(self.conn, self.agent_id, self.identity)
                    row = rows.get(self.conn, self.endpoint)
                    changes, event = learn(row, said, now, backoff, self.sent)
                    if self.holding:
                        registry.update(self.conn, self.agent_id, calling=None)
                    if changes:
                        rows.update(self.conn, self.endpoint, **changes)
                    if event:
                        events.record(self.conn, self.agent_id, event[0], **event[1])
            except lease.LostClaim:
                pass            # the agent is another run's now: its row is not ours
            finally:
                self.holding = False
        return refused

    def close(self):
        """The turn is over: a call still waiting gives up (at once), the connection is
        closed, here or by the call's thread when it is in _sleep()."""
        self.closed.set()
        with self.lock:
            if not self.sleeping:
                self._close()

    def _close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None
