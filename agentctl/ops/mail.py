"""Mailboxes, Erlang-style with a pull model (agentctl(7), MAILBOXES).

Mail is never deleted: reading sets read_at (and read_turn when a turn of
agent-run consumed it). The operator at the shell has no agent: mail from
the operator has sender_id NULL and shows '-' as its sender.
"""

import time

from agentctl.clock import NOW_SQL
from agentctl.store.db import INTEGER_MAX
from agentctl.errors import Refused, UsageError
from agentctl.ids import INIT_ID
from agentctl.store.registry import label

MAX_BODY = 1024 * 1024      # bytes of UTF-8; larger belongs in a document
MAIL_COLUMNS = ("m.id, m.sender_id, s.name AS sender_name, m.recipient_id, "
                "r.name AS recipient_name, m.kind, m.body, m.created_at, m.read_at, m.read_turn, "
                "m.deliver_at")


def _exited(alias):
    return f"(SELECT x.exited_at FROM agents x WHERE x.id = {alias}.recipient_id)"


def visible(alias="mail"):
    """The one condition that puts mail in its mailbox: mail deferred by
    agent-send --at is invisible to its recipient (not counted, listed, taken
    by a turn or pending input) until its time, then it is ordinary mail.
    An agent that has exited receives nothing: mail whose time comes after
    its exit is never delivered."""
    return (f"({alias}.deliver_at IS NULL OR {alias}.deliver_at <= {NOW_SQL} AND "
            f"{alias}.deliver_at <= coalesce({_exited(alias)}, {alias}.deliver_at))")


def unread(alias="mail"):
    return f"{alias}.read_at IS NULL AND {visible(alias)}"


def deferred(alias="mail"):
    return f"{alias}.read_at IS NULL AND {alias}.deliver_at > {NOW_SQL} AND {_exited(alias)} IS NULL"


def check_body(body):
    if body is None or not body.strip():
        raise UsageError("empty body")
    size = len(body.encode("utf-8", errors="surrogateescape"))
    if size > MAX_BODY:
        raise UsageError(f"body too long: {size} bytes (at most {MAX_BODY})")


def check_recipient(agent):
    if agent["status"] in ("Z", "X"):
        raise Refused(f"{label(agent)}: can't receive mail: it has exited")


def deliver(conn, sender_id, recipient, body, kind="mail", deliver_at=None):
    """Insert one mail; the caller holds the transaction and has checked.
    With deliver_at, the mail is deferred until then."""
    return conn.execute(
        "INSERT INTO mail (sender_id, recipient_id, kind, body, created_at, deliver_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (sender_id, recipient["id"], kind, body, time.time(), deliver_at)).lastrowid


def deliver_many(conn, items):
    """Insert (sender_id, recipient_id, body, deliver_at) mails in one
    statement; the caller holds the (write) transaction, so their ids are
    consecutive."""
    first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM mail").fetchone()[0]
    now = time.time()
    conn.executemany("INSERT INTO mail (sender_id, recipient_id, kind, body, created_at, "
                     "deliver_at) VALUES (?, ?, 'mail', ?, ?, ?)",
                     [(s, r, b, now, at) for s, r, b, at in items])
    return range(first, first + len(items))


def notify_exit(conn, agent, parent):
    """The SIGCHLD of agentctl: the lifecycle parent is told who exited, how,
    and with what result. The operator's agents (children of init) tell no one."""
    if parent["id"] == INIT_ID:
        return None
    if agent["exit_signal"]:
        how = f"was killed by {agent['exit_signal']}"
    else:
        how = "exited normally" if agent["exit_code"] == 0 else f"failed ({agent['exit_code']})"
    body = f"{label(agent)} ({agent['id']}) {how}; exit status {agent['exit_code']}"
    if agent["result"]:
        body += f"\nresult:\n{agent['result']}"
    return deliver(conn, agent["id"], parent, body, kind="exit")


def select(conn, recipient_id=None, *, ids=None, sender=False, sender_id=None,
           unread_only=True, waiting=False):
    """Mail of a mailbox, oldest first. `sender` True filters on `sender_id`
    (None meaning the operator). `waiting`: the deferred mail instead."""
    where, params = [deferred("m") if waiting else visible("m")], []
    if recipient_id is not None:
        where.append("m.recipient_id = ?")
        params.append(recipient_id)
    if ids:
        where.append(f"m.id IN ({','.join('?' * len(ids))})")
        params += [i if i <= INTEGER_MAX else -1 for i in ids]     # beyond SQLite: none
    if sender:
        where.append("m.sender_id IS ?")
        params.append(sender_id)
    if unread_only:
        where.append("m.read_at IS NULL")
    sql = (f"SELECT {MAIL_COLUMNS} FROM mail m LEFT JOIN agents s ON s.id = m.sender_id "
           f"JOIN agents r ON r.id = m.recipient_id WHERE {' AND '.join(where) or '1'} "
           "ORDER BY m.id")
    return conn.execute(sql, params).fetchall()


def count_unread(conn, recipient_id, *, sender=False, sender_id=None):
    sql = f"SELECT count(*) FROM mail WHERE recipient_id = ? AND {unread()}"
    params = [recipient_id]
    if sender:
        sql += " AND sender_id IS ?"
        params.append(sender_id)
    return conn.execute(sql, params).fetchone()[0]


def next_deferred(conn, recipient_id):
    """When the recipient's earliest deferred mail comes due, or None."""
    return conn.execute(f"SELECT min(deliver_at) FROM mail WHERE recipient_id = ? AND "
                        f"{deferred()}", (recipient_id,)).fetchone()[0]


def mark_read(conn, ids, turn=None):
    now = time.time()
    conn.executemany("UPDATE mail SET read_at = ?, read_turn = ? WHERE id = ? "
                     "AND read_at IS NULL", [(now, turn, i) for i in ids])


def first_line(body, width=60):
    line = body.strip().split("\n", 1)[0]
    return line if len(line) <= width else line[:width - 1] + "…"

