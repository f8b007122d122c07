"""Endpoint rows (agentctl(5), endpoints): what every run that shares the database
knows of a provider's endpoint (when it may be called next, at what pace, what it
said of its budgets), and the runs that call it or wait for it, as the agents' rows
hold them (agents.endpoint, calling, waiting). What the rows mean (a slot held or
free, a throttle, the pace) is ops/endpoints.py's."""

from agentctl.store.db import marks

COLUMNS = ("id, provider, url, not_before, reason, refused_at, spacing, next_at, "
           "requests_left, tokens_left, seen_at, cap")
# Columns update() may write: the rest are set once, when the endpoint is first named.
WRITABLE = frozenset(("not_before", "reason", "refused_at", "spacing", "next_at",
                      "requests_left", "tokens_left", "seen_at", "cap"))
RUN_COLUMNS = "id, name, lease_owner, lease_until, calling, waiting"


def get(conn, endpoint_id):
    return conn.execute(f"SELECT {COLUMNS} FROM endpoints WHERE id = ?",
                        (endpoint_id,)).fetchone()


def every(conn):
    """{id: row} of every endpoint (a few: one for each provider's URL and key)."""
    return {row["id"]: row for row in conn.execute(f"SELECT {COLUMNS} FROM endpoints")}


def ensure(conn, endpoint_id, provider, url):
    """The endpoint's row, made when it is first named (in the caller's transaction)."""
    row = get(conn, endpoint_id)
    if row is None:
        conn.execute("INSERT INTO endpoints (id, provider, url) VALUES (?, ?, ?)",
                     (endpoint_id, provider, url))
        row = get(conn, endpoint_id)
    return row


def update(conn, endpoint_id, **fields):
    unknown = set(fields) - WRITABLE
    assert not unknown, unknown
    conn.execute(f"UPDATE endpoints SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?",
                 (*fields.values(), endpoint_id))


def runs(conn, endpoint_id):
    """The agents marked running (R) whose run names the endpoint: whether each run
    is alive, and whether it has a call in flight or waits, is ops'."""
    return conn.execute(f"SELECT {RUN_COLUMNS} FROM agents WHERE endpoint = ? AND status = 'R'",
                        (endpoint_id,)).fetchall()


def runs_of(conn, ids):
    """{endpoint: [rows as runs() gives them]} for the endpoints named by `ids`."""
    ids = sorted(set(i for i in ids if i))
    found = {i: [] for i in ids}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for row in conn.execute(f"SELECT endpoint, {RUN_COLUMNS} FROM agents WHERE status = 'R' "
                                f"AND endpoint IN {marks(chunk)}", chunk):
            found[row["endpoint"]].append(row)
    return found
