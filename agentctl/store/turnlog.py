"""Turn rows (agentctl(5), turns) and the questions asked of one turn's messages.
How a turn starts, ends and is voided is ops/turns.py's."""

from agentctl import clock, money
from agentctl.store import events
from agentctl.store.db import marks
from agentctl.text import cut

COUNTS = frozenset(("steps", "input_tokens", "output_tokens", "mail_read", "cache_read_tokens",
                    "cache_write_tokens"))
WRITABLE = frozenset(("first_msg_id", "woke_at", "stop_reason"))


def get(conn, turn_id):
    return conn.execute("SELECT * FROM turns WHERE id = ?", (turn_id,)).fetchone()


def is_open(alias="turns"):
    """The one condition of a turn still running (in progress, or cut short)."""
    return f"{alias}.status = 'running'"


def open_turn(conn, agent_id):
    """The agent's turn still running (in progress, or cut short), or None."""
    return conn.execute(f"SELECT * FROM turns WHERE agent_id = ? AND {is_open()} "
                        "ORDER BY id DESC LIMIT 1", (agent_id,)).fetchone()


def latest(conn, agent_id):
    """The agent's last turn (running or ended), or None."""
    return conn.execute("SELECT * FROM turns WHERE agent_id = ? ORDER BY id DESC LIMIT 1",
                        (agent_id,)).fetchone()


def insert(conn, agent_id, model, started_at):
    turn_id = conn.execute("INSERT INTO turns (agent_id, model, started_at) VALUES (?, ?, ?)",
                           (agent_id, model, started_at)).lastrowid
    events.record(conn, agent_id, "turn-start", turn=turn_id, model=model)
    return turn_id


def update(conn, turn_id, **fields):
    assert not set(fields) - WRITABLE, fields
    conn.execute(f"UPDATE turns SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?",
                 (*fields.values(), turn_id))


def add(conn, turn_id, **counts):
    """Add to the turn's counts (steps, tokens, mail read)."""
    assert not set(counts) - COUNTS, counts
    conn.execute(f"UPDATE turns SET {', '.join(f'{k} = {k} + ?' for k in counts)} "
                 "WHERE id = ?", (*counts.values(), turn_id))


def add_cost(conn, turn_id, cost):
    """Add a model call's cost (micros) to the turn's, or count a call without a price."""
    if cost is None:
        conn.execute("UPDATE turns SET unpriced = unpriced + 1 WHERE id = ?", (turn_id,))
    else:
        conn.execute("UPDATE turns SET cost = coalesce(cost, 0) + ? WHERE id = ?",
                     (cost, turn_id))


def finish(conn, turn_id, status="done", error=None):
    """End the turn, and say so in the event log: how it ended, what it cost."""
    now = clock.now()
    conn.execute("UPDATE turns SET status = ?, ended_at = ?, error = ? WHERE id = ?",
                 (status, now, error, turn_id))
    turn = get(conn, turn_id)
    events.record(conn, turn["agent_id"], "turn-end", turn=turn_id, model=turn["model"],
                  outcome=status, steps=turn["steps"], input_tokens=turn["input_tokens"],
                  output_tokens=turn["output_tokens"], mail_read=turn["mail_read"],
                  cache_read_tokens=turn["cache_read_tokens"] or None,
                  cache_write_tokens=turn["cache_write_tokens"] or None,
                  cost=money.dollars(turn["cost"]), unpriced=turn["unpriced"] or None,
                  seconds=round(now - turn["started_at"], 3),
                  error=error if error is None else cut(error, 200))


def unanswered(conn, turn_id):
    """The turn's tool calls still without a result, in order."""
    return conn.execute(
        "SELECT * FROM messages c WHERE c.turn_id = ? AND c.kind = 'tool_call' AND c.void = 0 "
        "AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.turn_id = c.turn_id "
        "AND r.kind = 'tool_result' AND r.tool_call_id = c.tool_call_id) ORDER BY c.id",
        (turn_id,)).fetchall()


def successful_calls(conn, turn_id, names):
    """(tool name, arguments) of the turn's calls of `names` whose result was no
    error, in order."""
    return conn.execute(
        "SELECT r.tool_name, c.content FROM messages r JOIN messages c ON c.turn_id = r.turn_id "
        "AND c.kind = 'tool_call' AND c.tool_call_id = r.tool_call_id "
        f"WHERE r.turn_id = ? AND r.kind = 'tool_result' AND r.tool_name IN "
        f"{marks(names)} AND r.content NOT {conn.sql.ilike} 'error:%' "
        "ORDER BY r.id",
        (turn_id, *names)).fetchall()


def last_kind(conn, turn_id):
    """The kind of the turn's newest message that counts, or None."""
    row = conn.execute("SELECT kind FROM messages WHERE turn_id = ? AND void = 0 "
                       "ORDER BY id DESC LIMIT 1", (turn_id,)).fetchone()
    return row and row[0]


def call_ids(conn, turn_id):
    """The tool call ids used in the turn so far."""
    return {r[0] for r in conn.execute("SELECT tool_call_id FROM messages WHERE turn_id = ? "
                                       "AND kind = 'tool_call'", (turn_id,))}


def final_text(conn, turn_id):
    """The turn's newest assistant text that is not empty, or ''."""
    row = conn.execute("SELECT content FROM messages WHERE turn_id = ? AND kind = 'assistant' "
                       "AND content != '' AND void = 0 ORDER BY id DESC LIMIT 1",
                       (turn_id,)).fetchone()
    return row[0] if row else ""
