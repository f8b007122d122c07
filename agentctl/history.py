"""Conversation history: one messages table for every agent, delta storage, replay.

A child stores only its own messages plus where it forked from (forked_from,
fork_msg_id). Replay "walks backwards, plays forwards": from the leaf up the
history parents to the latest clear or compaction (or the root), each step
giving a range (agent, after, through) of message ids; the ranges reversed
and read in order are the context. Message ids are global and only grow, so
an ancestor's part of the context is bounded by the smallest fork point met
on the way up.
"""

import time

# Kinds a message can have. 'clear' ends the context before it (and is not
# part of it); 'compaction' starts the context with its summary.
KINDS = ("system", "user", "assistant", "tool_call", "tool_result", "clear",
         "compaction", "event")
BOUNDARY_KINDS = ("clear", "compaction")
NO_LIMIT = 2 ** 63 - 1

MESSAGE_COLUMNS = "id, agent_id, kind, content, tool_name, tool_call_id, turn_id, created_at"


def append(conn, agent_id, kind, content="", tool_name=None, tool_call_id=None,
           turn_id=None):
    cur = conn.execute(
        "INSERT INTO messages (agent_id, kind, content, tool_name, tool_call_id, "
        "turn_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (agent_id, kind, content, tool_name, tool_call_id, turn_id, time.time()))
    return cur.lastrowid


def latest(conn, agent):
    """The id of the newest message in `agent`'s context: its own newest, else
    the point it forked at, else 0 (an empty history)."""
    own = conn.execute("SELECT max(id) FROM messages WHERE agent_id = ?",
                       (agent["id"],)).fetchone()[0]
    if own is not None:
        return own
    return agent["fork_msg_id"] or 0


def _boundary(conn, agent_id, through):
    return conn.execute(
        "SELECT id, kind FROM messages WHERE agent_id = ? AND id <= ? "
        "AND kind IN ('clear', 'compaction') ORDER BY id DESC LIMIT 1",
        (agent_id, through)).fetchone()


def ranges(conn, agent):
    """[(agent_id, after, through)] in chronological order; `after` is
    exclusive, `through` inclusive, None for the leaf (no upper limit)."""
    found = []
    current, through = agent, None
    while True:
        hit = _boundary(conn, current["id"], NO_LIMIT if through is None else through)
        if hit is not None:
            after = hit["id"] if hit["kind"] == "clear" else hit["id"] - 1
            found.append((current["id"], after, through))
            break
        found.append((current["id"], 0, through))
        point = current["fork_msg_id"] or 0
        through = point if through is None else min(through, point)
        if current["forked_from"] is None or through == 0:
            break       # the root, or nothing above can be in view (ids start at 1)
        current = conn.execute("SELECT id, forked_from, fork_msg_id FROM agents "
                               "WHERE id = ?", (current["forked_from"],)).fetchone()
    found.reverse()
    return found


def read_range(conn, agent_id, after, through):
    if through is None:
        return conn.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE agent_id = ? AND id > ? "
            "AND void = 0 ORDER BY id", (agent_id, after)).fetchall()
    return conn.execute(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE agent_id = ? AND id > ? "
        "AND id <= ? AND void = 0 ORDER BY id", (agent_id, after, through)).fetchall()


def replay(conn, agent):
    """The messages of `agent`'s context, oldest first."""
    messages = []
    for agent_id, after, through in ranges(conn, agent):
        messages.extend(read_range(conn, agent_id, after, through))
    return messages


def in_context(conn, agent, message_id):
    row = conn.execute("SELECT agent_id FROM messages WHERE id = ?",
                       (message_id,)).fetchone()
    if row is None:
        return False
    return any(owner == row[0] and after < message_id
               and (through is None or message_id <= through)
               for owner, after, through in ranges(conn, agent))


def count(conn, agent_id):
    return conn.execute("SELECT count(*) FROM messages WHERE agent_id = ?",
                        (agent_id,)).fetchone()[0]
