"""What a turn of an agent would take now (agentctl(7), TURNS): its prompts no turn has
taken, its unread mail, its timer when it is due, and its open turn to resume. One
statement answers for one agent (agent-why, agent-run, an idle exit) and for every
agent a turn may be started for (agent-run --all, agent-ps), so that the two forms
can't disagree; what the counts make (would a run start?) is ops/turns.py's."""

from agentctl.store.history import unanswered
from agentctl.store.mailbox import unread
from agentctl.store.registry import AGENT_COLUMNS
from agentctl.store.turnlog import is_open

_COLUMNS = ", ".join("a." + c.strip() for c in AGENT_COLUMNS.split(","))


def rows(conn, now, agent_id=None):
    """The agent `agent_id`'s row (whatever its status), or those of every agent whose
    stored status is S or R (oldest first), each with what a turn of it would take at
    `now`: `prompts` (no turn has taken them) and `mail` (unread, as mailbox.unread
    says), counted; `due`, 1 when its timer is due; `resume`, 1 when a turn of it is
    open."""
    where = "a.id = ?" if agent_id is not None else "a.status IN ('S', 'R')"
    return conn.execute(f"""
        SELECT {_COLUMNS},
               (SELECT count(*) FROM messages m WHERE m.agent_id = a.id
                  AND {unanswered('m')}) AS prompts,
               (SELECT count(*) FROM mail WHERE mail.recipient_id = a.id
                  AND {unread(conn)}) AS mail,
               CASE WHEN a.wake_at <= ? THEN 1 ELSE 0 END AS due,
               CASE WHEN EXISTS (SELECT 1 FROM turns t WHERE t.agent_id = a.id
                  AND {is_open('t')}) THEN 1 ELSE 0 END AS resume,
               CASE WHEN EXISTS (SELECT 1 FROM batched b WHERE b.agent_id = a.id
                  AND b.state IN ('queued', 'sending', 'sent')) THEN 1 ELSE 0 END
                  AS batched
        FROM agents a WHERE {where} ORDER BY a.created_at, a.id""",
        (now,) if agent_id is None else (now, agent_id)).fetchall()
