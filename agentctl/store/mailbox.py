"""Mail rows (agentctl(5), mail): the conditions that put mail in a mailbox,
and the statements that insert, select and mark it. What may be sent, and
how a turn takes its mail, are ops/mail.py's."""

from agentctl import clock
from agentctl.store.db import INTEGER_MAX, marks

COLUMNS = ("m.id, m.sender_id, s.name AS sender_name, m.recipient_id, "
           "r.name AS recipient_name, m.kind, m.body, m.created_at, m.read_at, m.read_turn, "
           "m.deliver_at")


def _exited(alias):
    return f"(SELECT x.exited_at FROM agents x WHERE x.id = {alias}.recipient_id)"


def visible(conn, alias="mail"):
    """The one condition that puts mail in its mailbox: mail deferred by
    agent-send --at is invisible to its recipient (not counted, listed, taken
    by a turn or pending input) until its time, then it is ordinary mail.
    An agent that has exited receives nothing: mail whose time comes after
    its exit is never delivered. (The time is the database's: conn.sql.now.)"""
    return (f"({alias}.deliver_at IS NULL OR {alias}.deliver_at <= {conn.sql.now} AND "
            f"{alias}.deliver_at <= coalesce({_exited(alias)}, {alias}.deliver_at))")


def unread(conn, alias="mail"):
    return f"{alias}.read_at IS NULL AND {visible(conn, alias)}"


def deferred(conn, alias="mail"):
    return (f"{alias}.read_at IS NULL AND {alias}.deliver_at > {conn.sql.now} "
            f"AND {_exited(alias)} IS NULL")


def insert(conn, sender_id, recipient_id, body, kind="mail", deliver_at=None):
    return conn.execute(
        "INSERT INTO mail (sender_id, recipient_id, kind, body, created_at, deliver_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (sender_id, recipient_id, kind, body, clock.now(), deliver_at)).lastrowid


def insert_many(conn, items):
    """Insert (sender_id, recipient_id, body, deliver_at) mails in one
    statement where the caller's write transaction gives them consecutive ids
    (conn.sql.consecutive_ids), else one by one; returns their ids."""
    now = clock.now()
    if not conn.sql.consecutive_ids:
        return [conn.execute("INSERT INTO mail (sender_id, recipient_id, kind, body, "
                             "created_at, deliver_at) VALUES (?, ?, 'mail', ?, ?, ?)",
                             (s, r, b, now, at)).lastrowid for s, r, b, at in items]
    first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM mail").fetchone()[0]
    conn.executemany("INSERT INTO mail (sender_id, recipient_id, kind, body, created_at, "
                     "deliver_at) VALUES (?, ?, 'mail', ?, ?, ?)",
                     [(s, r, b, now, at) for s, r, b, at in items])
    return range(first, first + len(items))


def select(conn, recipient_id=None, *, ids=None, sender=False, sender_id=None,
           unread_only=True, waiting=False):
    """Mail of a mailbox, oldest first. `sender` True filters on `sender_id`
    (None meaning the operator). `waiting`: the deferred mail instead."""
    where, params = [deferred(conn, "m") if waiting else visible(conn, "m")], []
    if recipient_id is not None:
        where.append("m.recipient_id = ?")
        params.append(recipient_id)
    if ids:
        where.append(f"m.id IN {marks(ids)}")
        params += [i if i <= INTEGER_MAX else -1 for i in ids]     # beyond SQLite: none
    if sender:
        where.append("m.sender_id IS ?")
        params.append(sender_id)
    if unread_only:
        where.append("m.read_at IS NULL")
    sql = (f"SELECT {COLUMNS} FROM mail m LEFT JOIN agents s ON s.id = m.sender_id "
           f"JOIN agents r ON r.id = m.recipient_id WHERE {' AND '.join(where)} "
           "ORDER BY m.id")
    return conn.execute(sql, params).fetchall()


def count_unread(conn, recipient_id, *, sender=False, sender_id=None):
    sql = f"SELECT count(*) FROM mail WHERE recipient_id = ? AND {unread(conn)}"
    params = [recipient_id]
    if sender:
        sql += " AND sender_id IS ?"
        params.append(sender_id)
    return conn.execute(sql, params).fetchone()[0]


def next_deferred(conn, recipient_id):
    """When the recipient's earliest deferred mail comes due, or None."""
    return conn.execute(f"SELECT min(deliver_at) FROM mail WHERE recipient_id = ? AND "
                        f"{deferred(conn)}", (recipient_id,)).fetchone()[0]


def mark_read(conn, ids, turn=None):
    now = clock.now()
    conn.executemany("UPDATE mail SET read_at = ?, read_turn = ? WHERE id = ? "
                     "AND read_at IS NULL", [(now, turn, i) for i in ids])


def unread_again(conn, turn_id):
    """The mail a voided turn had taken is unread again."""
    conn.execute("UPDATE mail SET read_at = NULL, read_turn = NULL WHERE read_turn = ?",
                 (turn_id,))


def latest(conn, recipients, limit, head):
    """The newest `limit` mails to any of `recipients` (ids), of any sender and kind,
    newest first, each with the first `head` characters of its body: where a mail loop
    between two agents is looked for (ops/mail.py). Each mailbox is read by its index,
    `limit` rows at most, whatever it holds."""
    rows = []
    for recipient in recipients:
        rows += conn.execute(
            f"SELECT id, sender_id, recipient_id, kind, substr(body, 1, {int(head)}) "
            "AS body, created_at FROM mail WHERE recipient_id = ? ORDER BY id DESC LIMIT ?",
            (recipient, limit)).fetchall()
    return sorted(rows, key=lambda r: r["id"], reverse=True)[:limit]


def flows(conn):
    """How much mail each agent wrote each other one: (sender_id, recipient_id, count),
    deferred mail not yet due included (it was sent); agentctl's notices (of an exit, a
    hold ...) are not counted. The operator's mail has no sender."""
    return conn.execute(
        "SELECT sender_id, recipient_id, count(*) FROM mail WHERE sender_id IS NOT NULL "
        "AND kind = 'mail' GROUP BY sender_id, recipient_id "
        "ORDER BY sender_id, recipient_id").fetchall()
