"""The process table's rows: agents, how they are found, their status sets, their
families.

The agents table is the source of truth; no row is ever deleted. Each agent
has two parents: the history parent (forked_from, fixed forever) whose
conversation it inherits up to fork_msg_id, and the lifecycle parent
(parent_id) that is told when it exits; the lifecycle parent changes when an
agent's parent exits first (reparenting to the nearest live ancestor).

The rules of what may happen to an agent live in ops/; this module only reads
and writes rows.
"""

import sqlite3

from agentctl import clock, settings
from agentctl.errors import NotFound, Refused, UsageError
from agentctl.ids import INIT_ID, MIN_PREFIX, SHORT, short
from agentctl.text import valid
from agentctl.store.db import marks

LIVE = ("R", "S", "T", "P")     # alive: running, sleeping, stopped, paused (asking)
EXITED = ("Z", "X")             # a zombie, or dead
NOT_DEAD = LIVE + ("Z",)        # what agent-ps lists without -a
STATUS_WORDS = {"R": "running", "S": "sleeping", "T": "stopped", "P": "paused",
                "Z": "a zombie (exited)", "X": "dead"}
# The agent's own columns; its settings' (settings.COLUMNS) follow them.
AGENT_COLUMNS = ("id, name, parent_id, forked_from, fork_msg_id, status, created_at, "
                 "exited_at, exit_code, exit_signal, result, pending_signal, lease_owner, "
                 "lease_until, wake_at, retry_at, failures, tokens_in, tokens_out, "
                 "hup_pending, budget_id, spent, restarts, window_start, window_restarts, "
                 "depth, kill_at, last_failure, held_at, held_for, tokens_cached, tokens_written, "
                 "cost, unpriced, trace, endpoint, calling, waiting, looped_at, "
                 + ", ".join(settings.COLUMNS))
# Columns update() may write: the rest are set once, at fork.
WRITABLE = frozenset(("status", "exited_at", "exit_code", "exit_signal", "result",
                      "pending_signal", "lease_owner", "lease_until", "wake_at", "retry_at",
                      "failures", "hup_pending", "budget", "parent_id", "restarts",
                      "window_start", "window_restarts", "kill_at", "last_failure",
                      "held_at", "held_for", "trace", "endpoint", "calling", "waiting",
                      "looped_at"))



def statuses(sets):
    """An SQL list of status letters, e.g. "('R', 'S', 'T')": the one spelling of a set."""
    return "(" + ", ".join(f"'{s}'" for s in sets) + ")"


def label(agent):
    return named(agent["id"], agent["name"])


def named(agent_id, name):
    """An agent as people read it: its name, else its short id; - for the
    operator, who has no id."""
    if agent_id is None:
        return "-"
    return name or short(agent_id)


def signed(agent_id, name):
    """Whose words these are, as a model reads it (mail, documents): the name
    and the full id (a name is free again once its agent is reaped, an id
    never), or the operator."""
    if agent_id is None:
        return "the operator"
    return f"{named(agent_id, name)} ({agent_id})"


def is_live(agent):
    return agent["status"] in LIVE


def has_exited(agent):
    return agent["status"] in EXITED


# -- deadlines due (what they make of an agent: ops.lifecycle.overdue) ------------

def grace_ended(conn, now):
    """Agents alive whose grace period has ended."""
    return conn.execute(f"SELECT {AGENT_COLUMNS} FROM agents WHERE kill_at IS NOT NULL "
                        f"AND kill_at <= ? AND status IN {statuses(LIVE)} ORDER BY kill_at",
                        (now,)).fetchall()


def zombies_due(conn, now, default):
    """Zombies nobody collected within their reap_after (`default` where unset)."""
    return conn.execute(f"SELECT {AGENT_COLUMNS} FROM agents WHERE status = 'Z' "
                        "AND exited_at + coalesce(reap_after, ?) <= ? ORDER BY exited_at",
                        (default, now)).fetchall()


def next_deadline(conn, default_reap):
    """The earliest grace period's end or reaping still to come, or None."""
    return conn.execute(
        f"SELECT min(t) FROM (SELECT min(kill_at) AS t FROM agents WHERE kill_at IS NOT NULL "
        f"AND status IN {statuses(LIVE)} UNION ALL SELECT min(exited_at + coalesce(reap_after, "
        "?)) FROM agents WHERE status = 'Z') AS due", (default_reap,)).fetchone()[0]


def idle_since(conn, now):
    """Sleeping agents with an --idle-exit whose last input or turn is that long ago."""
    last = conn.sql.greatest("created_at", "coalesce((SELECT max(coalesce(t.ended_at, "
                             "t.started_at)) FROM turns t WHERE t.agent_id = a.id), 0)")
    return conn.execute(
        f"SELECT {AGENT_COLUMNS} FROM agents a WHERE idle_exit IS NOT NULL AND status = 'S' "
        f"AND wake_at IS NULL AND {last} + idle_exit <= ?", (now,)).fetchall()


def held(conn):
    """Live agents held after a failure whose hold remembers what it was for (held_for),
    oldest first: those agent-run --all may try again."""
    return conn.execute(
        f"SELECT {AGENT_COLUMNS} FROM agents WHERE held_at IS NOT NULL AND held_for IS NOT NULL "
        f"AND status IN {statuses(LIVE)} ORDER BY created_at, id").fetchall()


# -- finding agents ----------------------------------------------------------------------

def get(conn, agent_id):
    return conn.execute(f"SELECT {AGENT_COLUMNS} FROM agents WHERE id = ?",
                        (agent_id,)).fetchone()


def resolve(conn, ref):
    """An agent from an id, a name, or a unique id prefix of >= 4 characters.
    A name names the agent that holds it now, else the latest that held it."""
    ref = valid(ref)            # $AGENT_ID may hold any bytes
    if ref.startswith("-") or not ref:
        raise UsageError(f"not an agent: {ref!r}")
    found = get(conn, ref)
    if found is not None:
        return found
    found = conn.execute(
        f"SELECT {AGENT_COLUMNS} FROM agents WHERE name = ? "
        "ORDER BY status != 'X' DESC, created_at DESC LIMIT 1", (ref,)).fetchone()
    if found is not None:
        other = prefixed(conn, ref, but=found["id"])
        if other is not None:       # a name chosen to catch what was meant for a short id
            raise UsageError(f"ambiguous agent {ref}: the name of {found['id']} "
                             f"and a prefix of {other}")
        return found
    if len(ref) >= MIN_PREFIX:
        # Every id character sorts below '\x7f', so this is a range scan of the key.
        matches = conn.execute(
            f"SELECT {AGENT_COLUMNS} FROM agents WHERE id >= ? AND id < ? LIMIT 11",
            (ref, ref + "\x7f")).fetchall()
        if len(matches) == 1:
            return matches[0]
        if matches:
            shown = ", ".join(m["id"] for m in matches[:10])
            more = ", ..." if len(matches) > 10 else ""
            raise UsageError(f"ambiguous agent {ref}: matches {shown}{more}")
    raise NotFound(f"no such agent: {ref}")


def prefixed(conn, word, but=None):
    """The id of an agent (other than `but`) that `word`, of at least the length of
    a short id, is a prefix of, or None. (Shorter names would meet ids by chance:
    a 4-letter name begins one id in 16 million, so one in 170 databases of 100k.)"""
    if len(word) < SHORT:
        return None
    row = conn.execute("SELECT id FROM agents WHERE id >= ? AND id < ? AND id IS NOT ? LIMIT 1",
                       (word, word + "\x7f", but)).fetchone()
    return row and row[0]


def name_holder(conn, name):
    """The id of the agent not yet dead that holds `name`, or None."""
    row = conn.execute("SELECT id FROM agents WHERE name = ? AND status != 'X'",
                       (name,)).fetchone()
    return row and row[0]


def names(conn, ids):
    """{agent id: name} for `ids`."""
    ids = list(set(ids))
    if not ids:
        return {}
    return {r[0]: r[1] for r in conn.execute(
        f"SELECT id, name FROM agents WHERE id IN {marks(ids)}", ids)}


def not_dead(conn):
    """(id, name, role) of every agent not yet dead, oldest first (completion)."""
    return conn.execute("SELECT id, name, role FROM agents WHERE status != 'X' "
                        "ORDER BY created_at").fetchall()


# -- families --------------------------------------------------------------------------------

def children(conn, agent_id):
    """The ids of the agent's children by lifecycle parent that are not dead
    (alive, or zombies waiting to be collected), oldest first."""
    return [r[0] for r in conn.execute(
        "SELECT id FROM agents WHERE parent_id = ? AND status != 'X' ORDER BY created_at",
        (agent_id,))]


def descendants(conn, agent_id):
    """Every descendant by lifecycle parent, parents before children; no
    depth or count limit."""
    return conn.execute(
        f"""WITH RECURSIVE tree(id, depth) AS (
              SELECT id, 1 FROM agents WHERE parent_id = ?
              UNION ALL
              SELECT a.id, tree.depth + 1 FROM agents a JOIN tree ON a.parent_id = tree.id)
            SELECT {', '.join('a.' + c.strip() for c in AGENT_COLUMNS.split(','))}
            FROM tree JOIN agents a ON a.id = tree.id ORDER BY tree.depth""",
        (agent_id,)).fetchall()


def ancestors(conn, agent_id):
    """The agent's lifecycle ancestors, init included."""
    rows = conn.execute(
        """WITH RECURSIVE up(id) AS (
             SELECT parent_id FROM agents WHERE id = ?
             UNION SELECT a.parent_id FROM agents a JOIN up ON a.id = up.id)
           SELECT id FROM up WHERE id IS NOT NULL""", (agent_id,))
    return {r[0] for r in rows}


def lineage(conn, agent_id):
    """The agent and its history ancestors (forked_from, fixed for ever), nearest
    first, init included."""
    return conn.execute(
        f"""WITH RECURSIVE up(id, n) AS (
              SELECT {conn.sql.text_param}, 0
              UNION ALL SELECT a.forked_from, up.n + 1 FROM agents a JOIN up ON a.id = up.id
              WHERE a.forked_from IS NOT NULL)
            SELECT {', '.join('a.' + c.strip() for c in AGENT_COLUMNS.split(','))}
            FROM up JOIN agents a ON a.id = up.id ORDER BY up.n""", (agent_id,)).fetchall()


def nearest_live_ancestor(conn, agent, dying=()):
    current = agent
    while current["id"] != INIT_ID:
        current = get(conn, current["parent_id"])
        if is_live(current) and current["id"] not in dying:
            return current
    return current


# -- writing rows ------------------------------------------------------------------------------

# What a fork writes: who the agent is and where it comes from, and its settings.
FORK_COLUMNS = frozenset(("id", "name", "parent_id", "forked_from", "fork_msg_id", "depth",
                          "budget_id", "trace") + settings.COLUMNS)
# The columns agent-set may change: those of the settings not set once, at fork.
SETTABLE = frozenset(c for s in settings.SETTINGS if not s.fixed for c in s.columns)


def insert(conn, **fields):
    """The row of a new agent, sleeping. Refused when the name was taken meanwhile."""
    assert not set(fields) - FORK_COLUMNS, fields
    fields = dict(fields, status="S", created_at=clock.now())
    try:
        conn.execute(f"INSERT INTO agents ({', '.join(fields)}) "
                     f"VALUES {marks(fields)}", tuple(fields.values()))
    except sqlite3.IntegrityError:
        raise Refused(f"name already taken: {fields['name']}")


def update(conn, agent_id, **fields):
    """Set columns of one agent's row."""
    unknown = set(fields) - WRITABLE - SETTABLE
    assert not unknown, unknown
    conn.execute(f"UPDATE agents SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?",
                 (*fields.values(), agent_id))


def change_status(conn, agent_id, old, new):
    """Status `old` becomes `new`; whether it was `old`."""
    return conn.execute("UPDATE agents SET status = ? WHERE id = ? AND status = ?",
                        (new, agent_id, old)).rowcount > 0


def claim(conn, agent_id, owner, until):
    conn.execute("UPDATE agents SET status = 'R', lease_owner = ?, lease_until = ?, "
                 "calling = NULL, waiting = NULL WHERE id = ?", (owner, until, agent_id))


def renew(conn, agent_id, owner, until):
    conn.execute("UPDATE agents SET lease_until = ? WHERE id = ? AND lease_owner = ?",
                 (until, agent_id, owner))


def release(conn, agent_id, status="S"):
    """Give up the claim: a running agent becomes `status`; one that exited
    during its turn keeps its Z or X."""
    conn.execute("UPDATE agents SET status = CASE status WHEN 'R' THEN ? ELSE status END, "
                 "lease_owner = NULL, lease_until = NULL, calling = NULL, waiting = NULL "
                 "WHERE id = ?", (status, agent_id))


def add_usage(conn, agent_id, tokens_in, tokens_out, cached, written, cost):
    """Add a model call's usage to the agent's counts: `cost` in micros, or None for
    a call without a price (counted in unpriced)."""
    priced = ("cost = coalesce(cost, 0) + ?", cost) if cost is not None \
        else ("unpriced = unpriced + ?", 1)
    conn.execute("UPDATE agents SET tokens_in = tokens_in + ?, tokens_out = tokens_out + ?, "
                 "tokens_cached = tokens_cached + ?, tokens_written = tokens_written + ?, "
                 f"{priced[0]} WHERE id = ?",
                 (tokens_in, tokens_out, cached, written, priced[1], agent_id))


def failed_once_more(conn, agent_id, delay):
    """Count a failure in a row and set the time before which --all leaves it alone."""
    conn.execute("UPDATE agents SET failures = failures + 1, retry_at = ? WHERE id = ?",
                 (clock.now() + delay, agent_id))
