"""The process table as rows: what agent-ps lists (and the ps tool shows)."""

import time

from agentctl.cli.output import Column, age, iso, until
from agentctl.ids import short
from agentctl.ops.mail import deferred, unread

LISTED = ("R", "S", "T", "Z")       # without -a: everything not yet dead


def rows(conn, *, everything=False, statuses=None, parent=None, role=None):
    where, params = [], []
    if statuses:
        stored = set(statuses) | ({"R"} if {"S", "T"} & set(statuses) else set())  # a dead run
        where.append(f"a.status IN ({','.join('?' * len(stored))})")
        params += sorted(stored)
    elif not everything:
        where.append("a.status IN ('R', 'S', 'T', 'Z')")
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
        if item["status"] == "R":
            from agentctl.ops.turns import lease_is_live
            if not lease_is_live(item, now):    # its agent-run died: idle, or stopped
                item["status"] = "T" if item["pending_signal"] == "STOP" else "S"
        if statuses and item["status"] not in statuses:
            continue
        item["age"] = int(now - item["created_at"])
        # an agent that has exited has neither: its timer ends with it, and mail that
        # comes due after its exit is never delivered (mail.deferred)
        times = [t for t in (item["wake_at"], item.pop("mail_at")) if t is not None]
        item["wake"] = min(times) if times else None
        found.append(item)
    return found


def as_tree(items):
    """Rows in depth-first order by lifecycle parent, each with a depth; a row
    whose parent is not listed is a root."""
    present = {item["id"] for item in items}
    children = {}
    roots = []
    for item in items:
        if item["parent_id"] in present and item["parent_id"] != item["id"]:
            children.setdefault(item["parent_id"], []).append(item)
        else:
            roots.append(item)
    ordered = []
    stack = [(root, 0) for root in reversed(roots)]
    while stack:
        item, depth = stack.pop()
        item["depth"] = depth
        ordered.append(item)
        stack.extend((child, depth + 1) for child in reversed(children.get(item["id"], [])))
    return ordered


def _label(item):
    name = item["name"] or short(item["id"])
    depth = item.get("depth")
    return name if not depth else "    " * (depth - 1) + "\\_ " + name


def _parent(item):
    if item["parent_id"] is None:
        return "-"
    return item["parent_name"] or short(item["parent_id"])


def _budget(item):
    return "-" if item["budget"] is None else f"{item['spent']}/{item['budget']}"


def _exit(item):
    if item["exit_signal"]:
        return item["exit_signal"]
    return None if item["exit_code"] is None else str(item["exit_code"])


COLUMNS = [
    Column("id", "ID", human=lambda r: short(r["id"])),
    Column("name", "NAME", human=_label),
    Column("parent", "PARENT", human=_parent, machine=lambda r: r["parent_id"]),
    Column("stat", "STAT", machine=lambda r: r["status"]),
    Column("role", "ROLE"),
    Column("msgs", "MSGS"),
    Column("mail", "MAIL"),
    Column("age", "AGE", human=lambda r: age(r["age"])),
    Column("model", "MODEL"),
    Column("created", "CREATED", machine=lambda r: iso(r["created_at"])),
    Column("exit_code", "EXIT", human=lambda r: _exit(r) or "-"),
    Column("signal", "SIGNAL", machine=lambda r: r["exit_signal"]),
    Column("forked_from", "FORKED_FROM",
           human=lambda r: short(r["forked_from"]) if r["forked_from"] else "-"),
    Column("fork_msg", "FORK_MSG", machine=lambda r: r["fork_msg_id"]),
    Column("wake", "WAKE", human=lambda r: until(r["wake"]), machine=lambda r: iso(r["wake"])),
    Column("budget", "BUDGET", human=_budget),
    Column("spent", "SPENT", machine=lambda r: None if r["budget"] is None else r["spent"]),
]
DEFAULT = ["id", "name", "parent", "stat", "role", "msgs", "mail", "age"]
LONG = DEFAULT + ["wake", "budget"]     # -f
