"""The process table as rows: what agent-ps lists, each with its effective status."""

import time

from agentctl.store.mailbox import deferred, unread
from agentctl.store.registry import NOT_DEAD, effective_status
from agentctl.store.registry import statuses as statuses_sql


def rows(conn, *, everything=False, statuses=None, parent=None, role=None):
    where, params = [], []
    if statuses:
        stored = set(statuses) | ({"R"} if {"S", "T"} & set(statuses) else set())  # a dead run
        where.append(f"a.status IN ({','.join('?' * len(stored))})")
        params += sorted(stored)
    elif not everything:
        where.append(f"a.status IN {statuses_sql(NOT_DEAD)}")
    if parent is not None:
        where.append("a.parent_id = ?")
        params.append(parent)
    if role is not None:
        where.append("a.role = ?")
        params.append(role)
    sql = f"""
        SELECT a.id, a.name, a.parent_id, p.name AS parent_name, a.status, a.role,
               a.model, a.created_at, a.exited_at, a.exit_code, a.exit_signal,
               a.forked_from, a.fork_msg_id, a.wake_at, b.budget, b.spent,
               a.lease_owner, a.lease_until, a.pending_signal,
               (SELECT min(deliver_at) FROM mail WHERE mail.recipient_id = a.id
                  AND {deferred()}) AS mail_at,
               (SELECT count(*) FROM messages m WHERE m.agent_id = a.id) AS msgs,
               (SELECT count(*) FROM mail WHERE mail.recipient_id = a.id
                  AND {unread()}) AS mail
        FROM agents a LEFT JOIN agents p ON p.id = a.parent_id
        LEFT JOIN agents b ON b.id = a.budget_id
        {'WHERE ' + ' AND '.join(where) if where else ''}
        ORDER BY a.created_at, a.rowid"""
    now = time.time()
    found = []
    for row in conn.execute(sql, params):
        item = dict(row)
        item["status"] = effective_status(item, now)    # an R whose agent-run died is not R
        if statuses and item["status"] not in statuses:
            continue
        item["age"] = int(now - item["created_at"])
        # an agent that has exited has neither: its timer ends with it, and mail that
        # comes due after its exit is never delivered (mail.deferred)
        times = [t for t in (item["wake_at"], item.pop("mail_at")) if t is not None]
        item["wake"] = min(times) if times else None
        found.append(item)
    return found
