"""Layer rows (agentctl(5), layers): an agent's copy-on-write layer over its working
directory. An agent's own layer is its row whose frozen_at is NULL (one at most); its
stack is that layer and those under it (`below`, to NULL: the real directory, base).
What a layer means, and its files, are agentctl.workspace's."""

from agentctl import clock

_COLUMNS = "id, agent_id, below, base, host, frozen_at, created_at"


def insert(conn, agent_id, below, base, host):
    """A new layer of `agent_id`'s, its own (unfrozen), over `below` (a layer id, or
    None: the real directory `base`); its id."""
    return conn.execute(
        "INSERT INTO layers (agent_id, below, base, host, created_at) VALUES (?, ?, ?, ?, ?)",
        (agent_id, below, base, host, clock.now())).lastrowid


def own(conn, agent_id):
    """The agent's own layer (the one it writes), or None."""
    return conn.execute(f"SELECT {_COLUMNS} FROM layers WHERE agent_id = ? AND "
                        "frozen_at IS NULL", (agent_id,)).fetchone()


def get(conn, layer_id):
    return conn.execute(f"SELECT {_COLUMNS} FROM layers WHERE id = ?", (layer_id,)).fetchone()


def stack(conn, layer_id):
    """Layer `layer_id` and every layer under it, topmost first (one statement)."""
    rows = conn.execute(
        f"WITH RECURSIVE down(n, at) AS (SELECT CAST(? AS BIGINT), 0 UNION ALL "
        f"SELECT l.below, d.at + 1 FROM layers l JOIN down d ON l.id = d.n "
        f"WHERE l.below IS NOT NULL) "
        f"SELECT {', '.join('l.' + c.strip() for c in _COLUMNS.split(','))} "
        f"FROM down d JOIN layers l ON l.id = d.n ORDER BY d.at", (layer_id,)).fetchall()
    return rows


def freeze(conn, layer_id):
    """Layer `layer_id` frozen now (its agent writes it no more); whether it was its
    agent's own until now."""
    return conn.execute("UPDATE layers SET frozen_at = ? WHERE id = ? AND frozen_at IS NULL",
                        (clock.now(), layer_id)).rowcount == 1


def on(conn, layer_id):
    """The layers stacked directly on layer `layer_id` (whose `below` it is)."""
    return conn.execute(f"SELECT {_COLUMNS} FROM layers WHERE below = ? ORDER BY id",
                        (layer_id,)).fetchall()
