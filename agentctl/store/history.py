"""Conversation history: one messages table for every agent, delta storage, replay.

A child stores only its own messages plus where it forked from (forked_from,
fork_msg_id). Replay "walks backwards, plays forwards": from the leaf up the
history parents to the latest clear or compaction (or the root), each step
giving a range (agent, after, through) of message ids; the ranges reversed
and read in order are the context. Message ids are global and only grow, so
an ancestor's part of the context is bounded by the smallest fork point met
on the way up, and the line read in id order is the order it was written in.
"""

from agentctl import clock
from agentctl.store.db import INTEGER_MAX, marks, noted

# A 'clear' ends the context before it (and is not part of it); a 'compaction'
# starts the context with its summary.
NO_LIMIT = INTEGER_MAX

MESSAGE_COLUMNS = ("id, agent_id, kind, content, tool_name, tool_call_id, turn_id, created_at, "
                   "keep_from, tokens, void")


def append(conn, agent_id, kind, content="", tool_name=None, tool_call_id=None,
           turn_id=None, keep_from=None, tokens=None):
    cur = conn.execute(
        "INSERT INTO messages (agent_id, kind, content, tool_name, tool_call_id, "
        "turn_id, created_at, keep_from, tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (agent_id, kind, content, tool_name, tool_call_id, turn_id, clock.now(), keep_from,
         tokens))
    noted(conn, "messages", cur.lastrowid)
    return cur.lastrowid


def of_turn(conn, turn_id):
    """The messages of a turn that count (not void), in order."""
    return conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE turn_id = ? "
                        "AND void = 0 ORDER BY id", (turn_id,)).fetchall()


def numbered(conn, ids):
    """The messages `ids`, in order."""
    if not ids:
        return []
    return conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages "
                        f"WHERE id IN {marks(ids)} ORDER BY id",
                        list(ids)).fetchall()


def latest(conn, agent):
    """The id of the newest message in `agent`'s context: its own newest, else
    the point it forked at, else 0 (an empty history)."""
    own = conn.execute("SELECT max(id) FROM messages WHERE agent_id = ?",
                       (agent["id"],)).fetchone()[0]
    if own is not None:
        return own
    return agent["fork_msg_id"] or 0


def _boundary(conn, agent_id, through, floor, clears_only=False):
    """The newest clear or compaction (only clears with `clears_only`) of `agent_id`
    in (floor, through], not void."""
    return conn.execute(
        "SELECT id, kind, keep_from FROM messages WHERE agent_id = ? AND id <= ? AND id > ? "
        "AND kind IN ('clear', 'compaction') AND (kind = 'clear' OR ? = 0) AND void = 0 "
        "ORDER BY id DESC LIMIT 1", (agent_id, through, floor, clears_only)).fetchone()


def clear_if_pending(conn, agent_id):
    """Record the clear a HUP left waiting (agents.hup_pending) for the turn in
    progress, now that the turn has ended or the agent has exited."""
    if conn.execute("SELECT hup_pending FROM agents WHERE id = ?", (agent_id,)).fetchone()[0]:
        append(conn, agent_id, "clear", "HUP")
        conn.execute("UPDATE agents SET hup_pending = 0 WHERE id = ?", (agent_id,))


def ranges(conn, agent):
    """[(agent_id, after, through)] in chronological order; `after` is
    exclusive, `through` inclusive, None for the leaf (no upper limit).

    The newest compaction, when it keeps recent messages (keep_from), does not
    stop the walk: it sets a floor, keep_from - 1, below which nothing is in
    view, so the kept messages are read wherever they live. Past it only a
    clear stops the walk: an older compaction in view was summarised by the
    newest one, and replay leaves it out. A clear, or a compaction that keeps
    nothing, stops it."""
    found = []
    current, through, floor, kept = agent, None, 0, False
    while True:
        hit = _boundary(conn, current["id"], NO_LIMIT if through is None else through, floor,
                        clears_only=kept)
        if hit is not None and hit["kind"] == "compaction" and hit["keep_from"]:
            floor, kept = hit["keep_from"] - 1, True
        elif hit is not None:
            after = hit["id"] if hit["kind"] == "clear" else hit["id"] - 1
            found.append((current["id"], after, through))
            break
        found.append((current["id"], floor, through))
        point = current["fork_msg_id"] or 0
        through = point if through is None else min(through, point)
        if current["forked_from"] is None or through <= floor:
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
    # The newest summary comes first: it stands for everything before the messages it
    # kept, older summaries included (it was written from a transcript that began with
    # them). The ranges are in id order, so the newest is the last one read.
    summaries = [m for m in messages if m["kind"] == "compaction"]
    if not summaries:
        return messages
    return summaries[-1:] + [m for m in messages if m["kind"] != "compaction"]


def full(conn, agent):
    """Every message ever recorded in `agent`'s line, oldest first: its own and
    its history parents' up to each fork point, past every clear and compaction,
    void ones included."""
    messages, current, through = [], agent, None
    while True:
        limit = NO_LIMIT if through is None else through
        messages[:0] = conn.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE agent_id = ? AND id <= ? "
            "ORDER BY id", (current["id"], limit)).fetchall()
        point = current["fork_msg_id"] or 0
        through = point if through is None else min(through, point)
        if current["forked_from"] is None or through == 0:
            return messages
        current = conn.execute("SELECT id, forked_from, fork_msg_id FROM agents "
                               "WHERE id = ?", (current["forked_from"],)).fetchone()


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


def unanswered(alias="messages"):
    """The one condition of a prompt no turn has taken yet: a user message of no turn,
    not voided (store.pending counts them, pending_prompts takes them)."""
    return f"{alias}.kind = 'user' AND {alias}.turn_id IS NULL AND {alias}.void = 0"


def pending_prompts(conn, agent_id):
    """(id, content) of the prompts no turn has taken yet, oldest first."""
    return conn.execute(f"SELECT id, content FROM messages WHERE agent_id = ? AND "
                        f"{unanswered()} ORDER BY id", (agent_id,)).fetchall()


def give_to_turn(conn, message_ids, turn_id):
    conn.executemany("UPDATE messages SET turn_id = ? WHERE id = ?",
                     [(turn_id, i) for i in message_ids])


def latest_clear(conn, agent_id):
    """The id of the agent's newest clear that counts, or 0."""
    return conn.execute("SELECT max(id) FROM messages WHERE agent_id = ? AND kind = 'clear' "
                        "AND void = 0", (agent_id,)).fetchone()[0] or 0


def void_turn(conn, turn_id, first):
    """A voided turn's messages are never replayed; the prompts it took (written
    before `first`, its first own message) are pending again."""
    conn.execute("UPDATE messages SET turn_id = NULL WHERE turn_id = ? AND id < ?",
                 (turn_id, first))
    conn.execute("UPDATE messages SET void = 1 WHERE turn_id = ?", (turn_id,))
