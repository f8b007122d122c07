"""The process table's rows, as stored: what agent-ps lists (ops.proctable makes
each what a reader sees)."""

from agentctl import settings
from agentctl.store.mailbox import deferred, unread
from agentctl.store.db import marks


# The settings, each agent's own but its budget: that is its account's (b), as is the unit.
_SETTINGS = ", ".join(("b." if c in ("budget", "budget_unit") else "a.") + c
                      for c in settings.COLUMNS)


def rows(conn, *, statuses=None, parent=None, role=None):
    """The agents whose stored status is one of `statuses` (None: every one), of
    `parent`, of `role`, oldest first: tuples of FIELDS (a listing may be 100,000
    long; a dict of each costs more than reading it)."""
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
    sql = f"""
        SELECT a.id, a.name, a.parent_id, p.name AS parent_name, p.status AS parent_status,
               a.status, a.created_at, a.exited_at, a.exit_code, a.exit_signal,
               a.forked_from, a.fork_msg_id, a.wake_at, b.spent, a.budget_id,
               b.name AS account_name, a.tokens_in + a.tokens_out AS tokens,
               a.tokens_cached, a.cost, a.unpriced,
               a.lease_owner, a.lease_until, a.pending_signal, a.kill_at,
               a.restarts, a.retry_at, a.failures, a.last_failure, a.held_at,
               a.endpoint, a.waiting, {_SETTINGS},
               (SELECT min(deliver_at) FROM mail WHERE mail.recipient_id = a.id
                  AND {deferred(conn)}) AS mail_at,
               (SELECT count(*) FROM messages m WHERE m.agent_id = a.id) AS msgs,
               (SELECT count(*) FROM mail WHERE mail.recipient_id = a.id
                  AND {unread(conn)}) AS mail
        FROM agents a LEFT JOIN agents p ON p.id = a.parent_id
        LEFT JOIN agents b ON b.id = a.budget_id
        {'WHERE ' + ' AND '.join(where) if where else ''}
        ORDER BY a.created_at, a.id"""
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor.execute(sql, params).fetchall()


# The names of the statement's columns, in its order (a test holds them to what it reads).
FIELDS = ("id", "name", "parent_id", "parent_name", "parent_status", "status", "created_at",
          "exited_at", "exit_code", "exit_signal", "forked_from", "fork_msg_id", "wake_at",
          "spent", "budget_id", "account_name", "tokens", "tokens_cached", "cost", "unpriced",
          "lease_owner", "lease_until", "pending_signal", "kill_at", "restarts", "retry_at",
          "failures", "last_failure", "held_at", "endpoint", "waiting", *settings.COLUMNS,
          "mail_at", "msgs", "mail")


def costs(conn):
    """{id: (lifecycle parent, cost in micros or None, calls unpriced)} of every agent
    that has made a call, and of every agent between such an agent and init: what a
    subtree's total is summed from."""
    return {r[0]: (r[1], r[2], r[3]) for r in conn.execute(
        "SELECT id, parent_id, cost, unpriced FROM agents")}

