"""The process table as agent-ps shows it: the stored rows (store.proctable), each as a
reader sees it before the next writing program carries out what is due."""

from agentctl import clock
from agentctl.ops import endpoints, lease, lifecycle, signals, turns
from agentctl.store import endpoints as endpoint_rows, proctable, registry


FIELDS = proctable.FIELDS       # what each row may hold, in order
# What seen() reads of a row: every listing reads them, whatever it shows.
SEEN = ("status", "parent_id", "parent_status", "lease_owner", "lease_until",
        "pending_signal", "kill_at", "exited_at", "reap_after")
_CHANGING = frozenset("RZ")     # a stored status seen() may change without a grace ended


def fields(shown):
    """The fields a listing that shows the stored fields `shown` reads (others are
    ignored), in FIELDS' order: those, the id, and what seen() reads."""
    wanted = {"id", *SEEN, *shown}
    return tuple(f for f in FIELDS if f in wanted)


def rows(conn, *, everything=False, statuses=None, parent=None, role=None, read=FIELDS):
    """The agents not dead (every one with `everything`), or those whose status as
    seen is one of `statuses`; of `parent`, of `role`; oldest first: tuples of `read`
    (fields(): SEEN among them), each as seen now (seen())."""
    if statuses:
        wanted = set(statuses)
        stored = wanted | ({"R"} if {"S", "T"} & wanted else set())     # a dead run
        stored |= {"Z"} if "X" in wanted else set()                     # reaping overdue
        stored |= set(registry.LIVE) if {"Z", "X"} & wanted else set()  # a grace ended
    else:
        stored = None if everything else registry.NOT_DEAD
    found = as_seen(proctable.rows(conn, statuses=stored, parent=parent, role=role,
                                   fields=read), clock.now(), read)
    status = read.index("status")
    if statuses:
        return [row for row in found if row[status] in wanted]
    if not everything:
        return [row for row in found if row[status] != "X"]
    return found


def as_seen(stored, now, read=FIELDS):
    """Each stored tuple of `read` as seen `now`: seen() of each row it may change (an R,
    a Z, a grace period set); every other row as it is, with no dict made of it (a
    listing of 100,000 agents). tests/test_ps_many.py holds it to seen() row by row."""
    status, kill_at = read.index("status"), read.index("kill_at")
    return [row if row[kill_at] is None and row[status] not in _CHANGING
            else tuple(map(seen(dict(zip(read, row)), now).get, read)) for row in stored]


def seen(row, now):
    """The row as a reader sees it `now`: its effective status, and what a deadline
    that has passed makes of it. A grace period's end is the exit its KILL makes
    (signals.apply: lifecycle.exit, zombie or dead, 128 + 9)."""
    item = dict(row)
    item["status"] = lease.effective_status(row, now)   # an R whose agent-run died is not R
    due = lifecycle.overdue(item, now)  # what the next writing program will carry out
    if due == "KILL":
        parent = {"id": row["parent_id"], "status": row["parent_status"]}
        item.update(status=lifecycle.becomes(parent), exit_code=signals.exit_code("KILL"),
                    exit_signal="KILL", exited_at=row["kill_at"])
    elif due == "reap":
        item["status"] = "X"
    return item


def items(found):
    """Rows (tuples of FIELDS) as dicts, for what reads them by name (a tree, the
    providers, a picture)."""
    return [dict(zip(FIELDS, row)) for row in found]


def wake(wake_at, mail_at):
    """When an agent wakes: its timer or its first deferred mail, whichever is first;
    None for neither. An agent that has exited has neither: its timer ends with it, and
    mail that comes due after its exit is never delivered (store.mailbox.deferred)."""
    if wake_at is None or mail_at is None:
        return mail_at if wake_at is None else wake_at
    return min(wake_at, mail_at)


# The colour of each state as agent-top and agent-ps --format dot show it (one of the
# eight a terminal has; dot fills with a light shade of it), by state(): none, no colour.
COLOURS = {"R": "green", "P": "yellow", "T": "red", "H": "magenta", "Z": "blue", "X": "blue"}
STATES = {"R": "running", "S": "sleeping", "P": "paused", "T": "stopped",
          "H": "held (a failure, a mail loop)", "Z": "zombie", "X": "dead"}


def state(r):
    """The state a view colours and counts a row by: its status, H for a sleeping agent
    held after a failure or in a mail loop (agent-why says why; a held agent that a run
    resumes, or that is stopped or paused, is that first)."""
    return "H" if r["held_at"] is not None and r["status"] == "S" else r["status"]


TIER_MARKS = {"batch": "b", "flex": "f"}


def stat_text(r):
    """STAT as agent-ps and agent-top show it: the status, H for an agent held (after a
    failure, in a mail loop), ! for one whose tools run unconfined, b or f for one whose
    model calls go at the batch or the flex tier."""
    return stat(r["status"], r["held_at"], r["unconfined"], r["tier"])


def stat(status, held_at, unconfined, tier=None):
    """stat_text() of a row's columns (agent-ps, column by column)."""
    return status + ("H" if held_at is not None else "") + ("!" if unconfined else "") \
        + TIER_MARKS.get(tier, "")


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


def mark_providers(conn, items, now=None):
    """Each item's `provider`: why it waits for its provider (an endpoints.Wait), when it
    would call its endpoint now (endpoints.wants_call: its run waits, or it sleeps with
    mail, a timer due, a prompt or an open turn) and the endpoint can't be called; else
    None. Only for agent-ps's provider columns: it reads the endpoints and their runs."""
    now = now or clock.now()
    known = endpoint_rows.every(conn)
    for item in items:
        item["endpoint"] = endpoints.endpoint_of(item, known) if known else item["endpoint"]
        item["provider"] = None
    if not known:
        return
    states = endpoints.states(conn, {i["endpoint"] for i in items if i["endpoint"]}, known,
                              now)
    pending = []        # turns.inputs(): what a turn of each would take, read once if asked

    def has_input(item):
        if not pending:
            pending.append(turns.inputs(conn, now))
        found = pending[0].get(item["id"])      # (every agent stored S or R)
        return found is not None and turns.has_input(found)

    for item in items:
        wait = states.get(item["endpoint"])
        if wait is not None and endpoints.wants_call(item, lambda: has_input(item)):
            item["provider"] = wait
