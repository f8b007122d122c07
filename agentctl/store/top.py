"""The rows agent-top shows (agent-top(1)): each agent's row with what the row alone
does not say (its parent's status, its unread mail, its open turn's counts, the tool
call that turn waits on), read for every agent shown or only for the agents that
changed. What a row means is ops/top.py's."""

from agentctl.store import registry
from agentctl.store.mailbox import unread
from agentctl.store.turnlog import is_open
from agentctl.store.db import marks

# the agent's columns but its texts that may be long (what replay and wait read)
_COLUMNS = ", ".join("a." + c.strip() for c in registry.AGENT_COLUMNS.split(",")
                     if c.strip() not in ("system_prompt", "result"))


def agents(conn, *, ids=None, dead_since=None):
    """The agents that are not dead, and the dead that exited at or after `dead_since`
    (None: none of them); only those of `ids` when given. Each row, a dict, has the
    agent's columns (registry.AGENT_COLUMNS, but system_prompt and result) and parent_status, mail (unread), turn (the id
    of its open turn, or None), turn_tokens, turn_cost, turn_unpriced, step_at (when
    the open turn's newest message came), tool (its first tool call still without a
    result) and run_at (when a run last started or resumed a turn of it: its newest
    turn-start or turn-resume event), these two for a running agent."""
    where = [f"(a.status IN {registry.statuses(registry.NOT_DEAD)}"
             + (" OR a.exited_at >= ?)" if dead_since is not None else ")")]
    params = [dead_since] if dead_since is not None else []
    if ids is not None:
        where.append(f"a.id IN {marks(ids)}")
        params += list(ids)
    rows = conn.execute(f"""
        SELECT {_COLUMNS}, p.status AS parent_status,
               (SELECT count(*) FROM mail WHERE mail.recipient_id = a.id
                  AND {unread(conn)}) AS mail,
               t.id AS turn, t.input_tokens + t.output_tokens AS turn_tokens,
               t.cost AS turn_cost, t.unpriced AS turn_unpriced, t.started_at AS turn_at,
               CASE WHEN a.status = 'R' THEN (SELECT max(m.created_at) FROM messages m
                 WHERE m.turn_id = t.id) END AS step_at,
               CASE WHEN a.status = 'R' THEN (SELECT c.tool_name FROM messages c
                 WHERE c.turn_id = t.id AND c.kind = 'tool_call' AND c.void = 0
                 AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.turn_id = c.turn_id
                   AND r.kind = 'tool_result' AND r.tool_call_id = c.tool_call_id)
                 ORDER BY c.id LIMIT 1) END AS tool,
               CASE WHEN a.status = 'R' THEN (SELECT e.created_at FROM events e
                 WHERE e.agent_id = a.id AND e.kind IN ('turn-start', 'turn-resume')
                 ORDER BY e.id DESC LIMIT 1) END AS run_at
        FROM agents a LEFT JOIN agents p ON p.id = a.parent_id
        LEFT JOIN turns t ON t.id = (SELECT max(o.id) FROM turns o WHERE o.agent_id = a.id
                                      AND {is_open('o')})
        WHERE {' AND '.join(where)}
        ORDER BY a.created_at, a.id""", params).fetchall()
    if not rows:
        return []
    names = list(rows[0].keys())        # (a dict each, made at once: 10,000 in 30 ms)
    return [dict(zip(names, row)) for row in rows]
