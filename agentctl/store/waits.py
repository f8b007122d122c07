"""Waiting for another connection's commit: the one loop (commits()) under agent-mail
-w, agent-wait, agent-log -f, agent-top and a model call's gate, and the number a
commit changes (data_version()). Between two looks a SQLite wait reads nothing but
that number; PostgreSQL blocks on LISTEN until a NOTIFY."""

import time

from agentctl import clock


def commits(conn, deadline=None, *, next_due=None, most=0.5, pause=None):
    """The one loop that waits for another connection's commit: it yields at once, then
    each time another connection has committed, until `deadline` (time.monotonic();
    None: never) passes or `pause` says to stop. `next_due()`, asked after each yield,
    names a Unix time (deferred mail coming due) when it yields though nothing was
    committed. SQLite's looks read only PRAGMA data_version, backing off to `most`
    seconds apart; PostgreSQL blocks on LISTEN until a NOTIFY (or a time due).
    `pause(seconds)` waits instead on either backend; True stops the loop."""
    delay = 0.01
    version = due = None
    while True:
        current = data_version(conn)        # (PostgreSQL: LISTEN from the first call)
        came_due = due is not None and clock.now() >= due + 0.01   # SQL time is in ms
        if current != version or came_due:
            version = current
            yield
            due = next_due() if next_due else None
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        if pause is not None or conn.dialect != "postgresql":
            if (pause or time.sleep)(delay if left is None else min(delay, left)):
                return
            delay = min(delay * 2, most)
        else:
            wait = 3600.0 if left is None else left
            if due is not None:
                wait = max(0.01, min(wait, due + 0.01 - clock.now()))
            conn.wait_for_change(wait)


def wait_for_commit(conn, deadline, check, next_due=None, most=0.5):
    """Block until check() is true or the deadline passes (time.monotonic()), asking it
    again only when another connection has committed or a time `next_due()` names has
    come (commits()); whether it came true."""
    return any(check() for _ in commits(conn, deadline, next_due=next_due, most=most))


def data_version(conn):
    """A number that changes when another connection commits (and only then): a read
    of the WAL index in shared memory, no I/O (PostgreSQL: the notifications come)."""
    if conn.dialect == "postgresql":
        return conn.changes()
    return conn.execute("PRAGMA data_version").fetchone()[0]
