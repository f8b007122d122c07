"""The process table: agents, how they are found, forked, and how they exit.

The agents table is the source of truth; no row is ever deleted. Each agent
has two parents: the history parent (forked_from, fixed forever) whose
conversation it inherits up to fork_msg_id, and the lifecycle parent
(parent_id) that is told when it exits; the lifecycle parent changes when an
agent's parent exits first (reparenting to the nearest live ancestor).
"""

import sqlite3
import time

from agentctl.store import history
from agentctl.errors import NotFound, Refused, UsageError
from agentctl.ids import INIT_ID, MIN_PREFIX, NAME_RE, ROLES, SHORT, new_id, short

LIVE = ("R", "S", "T")
STATUS_WORDS = {"R": "running", "S": "sleeping", "T": "stopped",
                "Z": "a zombie (exited)", "X": "dead"}
AGENT_COLUMNS = ("id, name, parent_id, forked_from, fork_msg_id, role, status, model, "
                 "system_prompt, created_at, exited_at, exit_code, exit_signal, result, "
                 "pending_signal, lease_owner, lease_until, wake_at, retry_at, failures, "
                 "tokens_in, tokens_out, hup_pending, context_window, budget, budget_id, spent")


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


def get(conn, agent_id):
    return conn.execute(f"SELECT {AGENT_COLUMNS} FROM agents WHERE id = ?",
                        (agent_id,)).fetchone()


def resolve(conn, ref):
    """An agent from an id, a name, or a unique id prefix of >= 4 characters.
    A name names the agent that holds it now, else the latest that held it."""
    from agentctl.text import valid
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


def record(conn, agent_id, kind, detail=None, actor=None):
    conn.execute("INSERT INTO events (agent_id, kind, detail, actor_id, created_at) "
                 "VALUES (?, ?, ?, ?, ?)", (agent_id, kind, detail, actor, time.time()))


def check_name(conn, name):
    if not NAME_RE.match(name):
        raise UsageError(f"bad name: {name!r} (want [a-z][a-z0-9._-]*, at most 64)")
    holder = conn.execute("SELECT id FROM agents WHERE name = ? AND status != 'X'",
                          (name,)).fetchone()
    if holder is not None:
        raise Refused(f"name already taken: {name} (by {holder[0]})")
    other = prefixed(conn, name)
    if other is not None:
        raise Refused(f"name {name} is a prefix of the id {other}: it would shadow that agent")


def check_role(role):
    if role not in ROLES:
        raise UsageError(f"unknown role: {role} (one of {', '.join(ROLES)})")


def fork(conn, parent, *, name=None, role="agent", model=None, system=None,
         at=None, prompt=None, actor=None, context_window=None, budget=None):
    """Create a child of `parent`; returns its id. Writes a constant number of
    rows whatever the history's length: nothing is copied. With `budget`, the
    child gets its own account, carved out of the parent's (agentctl(7))."""
    if not is_live(parent):
        raise Refused(f"{label(parent)}: can't fork: it is {STATUS_WORDS[parent['status']]}")
    if parent["role"] == "task":
        raise Refused(f"{label(parent)}: a task can't fork")
    check_role(role)
    if name is not None:
        check_name(conn, name)
    if at is None:
        point = history.latest(conn, parent)
    elif history.in_context(conn, parent, at):
        point = at
    else:
        raise UsageError(f"message {at} is not in the context of {label(parent)} "
                         f"(see agent-replay {label(parent)})")
    if budget is not None:
        from agentctl.ops.budget import carve
        carve(conn, parent, budget)
    child = new_id()
    try:
        conn.execute(
            "INSERT INTO agents (id, name, parent_id, forked_from, fork_msg_id, role, "
            "status, model, system_prompt, created_at, context_window, budget, budget_id) "
            "VALUES (?, ?, ?, ?, ?, ?, 'S', ?, ?, ?, ?, ?, ?)",
            (child, name, parent["id"], parent["id"], point, role,
             model if model is not None else parent["model"],
             system if system is not None else parent["system_prompt"], time.time(),
             context_window if context_window is not None else parent["context_window"],
             budget, parent["budget_id"] if budget is None else child))
    except sqlite3.IntegrityError:
        raise Refused(f"name already taken: {name}")
    if prompt is not None:
        history.append(conn, child, "user", prompt)
    record(conn, child, "fork", f"{parent['id']} {point}", actor)
    return child


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


def nearest_live_ancestor(conn, agent, dying=()):
    current = agent
    while current["id"] != INIT_ID:
        current = get(conn, current["parent_id"])
        if is_live(current) and current["id"] not in dying:
            return current
    return current


def exit_agent(conn, agent, *, code, signal=None, result=None, actor=None, dying=()):
    """End `agent`: a zombie while its lifecycle parent lives (until
    agent-wait collects it), dead otherwise. Its children go to the nearest
    live ancestor; the parent is told by mail. A clear still waiting for a
    turn (HUP) is recorded. `dying` holds the ids exiting together (a
    cascade): they don't count as live parents or heirs."""
    history.clear_if_pending(conn, agent["id"])     # no turn to wait for any more
    parent = get(conn, agent["parent_id"])
    collector = parent if is_live(parent) and parent["id"] not in dying else None
    status = "Z" if collector is not None else "X"
    conn.execute("UPDATE agents SET status = ?, exited_at = ?, exit_code = ?, "
                 "exit_signal = ?, result = ?, wake_at = NULL WHERE id = ?",
                 (status, time.time(), code, signal, result, agent["id"]))
    how = f"killed by {signal}" if signal else f"exited {code}"
    record(conn, agent["id"], "exit", how, actor)
    from agentctl.ops.budget import give_back
    give_back(conn, get(conn, agent["id"]))
    orphans = conn.execute("SELECT id FROM agents WHERE parent_id = ? AND status != 'X'",
                           (agent["id"],)).fetchall()
    orphans = [o[0] for o in orphans if o[0] not in dying]
    if orphans:
        heir = nearest_live_ancestor(conn, agent, dying)
        for orphan in orphans:
            conn.execute("UPDATE agents SET parent_id = ? WHERE id = ?", (heir["id"], orphan))
            record(conn, orphan, "reparent", f"{agent['id']} {heir['id']}", actor)
    if collector is not None:
        from agentctl.ops.mail import notify_exit
        notify_exit(conn, get(conn, agent["id"]), collector)
    return status
