"""The process table's rows, as stored: what agent-ps lists (ops.proctable makes
each what a reader sees)."""

from agentctl import settings
from agentctl.store.mailbox import deferred, unread
from agentctl.store.db import marks


# The names of the statement's columns, in its order (a test holds them to what it reads).
FIELDS = ("id", "name", "parent_id", "parent_name", "parent_status", "status", "created_at",
          "exited_at", "exit_code", "exit_signal", "forked_from", "fork_msg_id", "wake_at",
          "spent", "budget_id", "account_name", "tokens", "tokens_cached", "cost", "unpriced",
          "lease_owner", "lease_until", "pending_signal", "kill_at", "restarts", "retry_at",
          "failures", "last_failure", "held_at", "endpoint", "waiting", *settings.COLUMNS,
          "mail_at", "msgs", "mail")

# Each field that is not the agent's own column of that name: its parent's (p), its
# account's (b: the budget, its unit, what it spent), or made by the statement.
_OTHER = {"parent_name": "p.name", "parent_status": "p.status", "spent": "b.spent",
          "account_name": "b.name", "tokens": "a.tokens_in + a.tokens_out",
          "budget": "b.budget", "budget_unit": "b.budget_unit"}
_ACCOUNT = frozenset(("spent", "account_name", "budget", "budget_unit"))


def rows(conn, *, statuses=None, parent=None, role=None, fields=FIELDS):
    """The agents whose stored status is one of `statuses` (None: every one), of
    `parent`, of `role`, oldest first: tuples of `fields` (some of FIELDS, in their
    order: a listing reads only what it shows; it may be 100,000 long, and a dict of
    each costs more than reading it)."""
    where, params = [], []
    if statuses is not None:
        where.append(f"a.status IN {marks(statuses)}")
        params += sorted(statuses)
    if parent is not None:
        where.append("a.parent_id = ?")
        params.append(parent)
    if role is not None:
        where.append("a.role = ?")
        params.append(role)
    made = {**_OTHER,
            "mail_at": "(SELECT min(deliver_at) FROM mail WHERE mail.recipient_id = a.id "
                       f"AND {deferred(conn)})",
            "msgs": "(SELECT count(*) FROM messages m WHERE m.agent_id = a.id)",
            "mail": f"(SELECT count(*) FROM mail WHERE mail.recipient_id = a.id "
                    f"AND {unread(conn)})"}
    columns = ", ".join(f"{made[f]} AS {f}" if f in made else f"a.{f}" for f in fields)
    sql = f"""
        SELECT {columns}
        FROM agents a LEFT JOIN agents p ON p.id = a.parent_id
        {'LEFT JOIN agents b ON b.id = a.budget_id' if _ACCOUNT.intersection(fields) else ''}
        {'WHERE ' + ' AND '.join(where) if where else ''}
        ORDER BY a.created_at, a.id"""
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor.execute(sql, params).fetchall()


def costs(conn):
    """{id: (lifecycle parent, cost in micros or None, calls unpriced)} of every agent
    that has made a call, and of every agent between such an agent and init: what a
    subtree's total is summed from."""
    return {r[0]: (r[1], r[2], r[3]) for r in conn.execute(
        "SELECT id, parent_id, cost, unpriced FROM agents")}

