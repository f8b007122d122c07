"""The event log (agentctl(5), events; agent-log(1)): a row for every change of
state, written in the transaction that makes the change, numbered by a sequence
that only grows (AUTOINCREMENT: pruning never hands a number out again)."""

import math
from agentctl import clock

KINDS = ("fork", "turn-start", "turn-end", "tool", "mail", "read", "signal", "status", "exit",
         "reparent", "reap", "compaction", "timer", "wake", "budget", "restart", "ask", "answer")
COLUMNS = "e.id, e.agent_id, e.kind, e.detail, e.actor_id, e.created_at, e.data, a.name"

# JSON without importing json (a program's start-up): what an event carries is flat,
# numbers and short texts.
_ESCAPES = {**{c: f"\\u{c:04x}" for c in range(32)}, ord('"'): '\\"', ord("\\"): "\\\\",
            8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r", 0x2028: "\\u2028",
            0x2029: "\\u2029"}


def _value(value):
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "null"
    return '"' + str(value).encode("utf-8", "replace").decode("utf-8").translate(_ESCAPES) + '"'


def payload(data):
    """A flat dict as a JSON object; None values left out."""
    return "{" + ", ".join(f"{_value(k)}: {_value(v)}" for k, v in data.items()
                           if v is not None) + "}"


def record(conn, agent_id, kind, detail=None, actor=None, **data):
    """One event, in the caller's transaction."""
    conn.execute("INSERT INTO events (agent_id, kind, detail, actor_id, created_at, data) "
                 "VALUES (?, ?, ?, ?, ?, ?)",
                 (agent_id, kind, detail, actor, clock.now(), payload(data) if data else None))


def latest_detail(conn, agent_id, kind):
    """The detail of the agent's newest event of `kind`, or None."""
    row = conn.execute("SELECT detail FROM events WHERE agent_id = ? AND kind = ? "
                       "ORDER BY id DESC LIMIT 1", (agent_id, kind)).fetchone()
    return row and row[0]


def _where(agents, kinds, since, after):
    clauses, params = [], []
    if agents is not None:
        clauses.append(f"e.agent_id IN ({', '.join('?' * len(agents))})")
        params += list(agents)
    if kinds:
        clauses.append(f"e.kind IN ({', '.join('?' * len(kinds))})")
        params += list(kinds)
    if since is not None:
        clauses.append("e.created_at >= ?")
        params.append(since)
    if after is not None:
        clauses.append("e.id > ?")
        params.append(after)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def select(conn, agents=None, kinds=None, since=None, after=None, last=None):
    """Events in sequence order, as tuples of COLUMNS (a listing may be 100,000 long):
    of `agents` (ids; None: all), of `kinds`, created at or after `since`, numbered
    above `after`; only the `last` N of those."""
    where, params = _where(agents, kinds, since, after)
    query = f"SELECT {COLUMNS} FROM events e JOIN agents a ON a.id = e.agent_id{where}"
    cursor = conn.cursor()
    cursor.row_factory = None
    if last is None:
        return cursor.execute(query + " ORDER BY e.id", params).fetchall()
    rows = cursor.execute(query + " ORDER BY e.id DESC LIMIT ?", (*params, last)).fetchall()
    return rows[::-1]


def newest(conn):
    """The newest event's number (0: none)."""
    return conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0]


def prune(conn, before):
    """Delete the events created before `before` (the toolkit's one deletion), but
    the newest event and each agent's newest budget event (budgets read it).
    Returns how many were deleted."""
    return conn.execute(
        "DELETE FROM events WHERE created_at < ? "
        "AND id != (SELECT max(id) FROM events) "
        "AND id NOT IN (SELECT max(id) FROM events WHERE kind = 'budget' GROUP BY agent_id)",
        (before,)).rowcount
