"""Request rows (agentctl(5), requests): questions and approvals a paused agent waits
on, each decided at most once (the first decision wins)."""

from agentctl import clock
from agentctl.errors import NotFound, UsageError

PENDING = "decision IS NULL"
ELICITATION = "elicitation"     # an MCP server's question's kind (ops/elicitation.py)


def insert(conn, request_id, agent_id, turn_id, call_id, kind, question=None, tool=None,
           arguments=None, deadline=None):
    conn.execute("INSERT INTO requests (id, agent_id, turn_id, tool_call_id, kind, question, "
                 "tool, arguments, created_at, deadline) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (request_id, agent_id, turn_id, call_id, kind, question, tool, arguments,
                  clock.now(), deadline))


def of_call(conn, turn_id, call_id, kinds=("question", "approval")):
    """The call's latest request of one of `kinds`, or None."""
    marks = ", ".join("?" for _ in kinds)
    return conn.execute(f"SELECT * FROM requests WHERE turn_id = ? AND tool_call_id = ? "
                        f"AND kind IN ({marks}) ORDER BY created_at DESC, id LIMIT 1",
                        (turn_id, call_id, *kinds)).fetchone()


def all_of_call(conn, turn_id, call_id, kind):
    """The call's requests of `kind`, oldest first."""
    return conn.execute("SELECT * FROM requests WHERE turn_id = ? AND tool_call_id = ? "
                        "AND kind = ? ORDER BY created_at, id", (turn_id, call_id,
                                                                 kind)).fetchall()


def get(conn, request_id):
    return conn.execute("SELECT * FROM requests WHERE id = ?", (request_id,)).fetchone()


def resolve(conn, ref):
    """A request from its id or a unique prefix of at least 4 characters."""
    row = get(conn, ref)
    if row is not None:
        return row
    if len(ref) < 4:
        raise UsageError(f"{ref}: a request prefix has at least 4 characters")
    rows = conn.execute("SELECT * FROM requests WHERE substr(id, 1, ?) = ? LIMIT 2",
                        (len(ref), ref)).fetchall()
    if len(rows) > 1:
        raise UsageError(f"{ref}: more than one request has this prefix")
    if not rows:
        raise NotFound(f"no such request: {ref}")
    return rows[0]


def pending(conn, agent_id=None):
    """Undecided requests, oldest first, with their agent's name."""
    where = f"r.{PENDING}" + (" AND r.agent_id = ?" if agent_id else "")
    return conn.execute(f"SELECT r.*, a.name AS agent_name, a.parent_id AS parent_id "
                        f"FROM requests r JOIN agents a ON a.id = r.agent_id WHERE {where} "
                        "ORDER BY r.created_at, r.id", (agent_id,) if agent_id else ()).fetchall()


def decide(conn, request_id, decision, answer, by):
    """Whether this decision was the first (an undecided request took it)."""
    return conn.execute(f"UPDATE requests SET decision = ?, answer = ?, decided_by = ?, "
                        f"decided_at = ? WHERE id = ? AND {PENDING}",
                        (decision, answer, by, clock.now(), request_id)).rowcount > 0


def due(conn, now):
    return conn.execute(f"SELECT * FROM requests WHERE {PENDING} AND deadline <= ?",
                        (now,)).fetchall()


def next_deadline(conn):
    return conn.execute(f"SELECT min(deadline) FROM requests WHERE {PENDING}").fetchone()[0]
