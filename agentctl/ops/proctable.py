"""The process table as agent-ps shows it: the stored rows (store.proctable), each as a
reader sees it before the next writing program carries out what is due."""

from agentctl import clock
from agentctl.ops import endpoints, lease, lifecycle, signals, turns
from agentctl.store import endpoints as endpoint_rows, proctable, registry


def rows(conn, *, everything=False, statuses=None, parent=None, role=None):
    """The agents not dead (every one with `everything`), or those whose status as
    seen is one of `statuses`; of `parent`, of `role`; oldest first."""
    if statuses:
        wanted = set(statuses)
        stored = wanted | ({"R"} if {"S", "T"} & wanted else set())     # a dead run
        stored |= {"Z"} if "X" in wanted else set()                     # reaping overdue
        stored |= set(registry.LIVE) if {"Z", "X"} & wanted else set()  # a grace ended
    else:
        stored = None if everything else registry.NOT_DEAD
    now = clock.now()
    found = []
    for row in proctable.rows(conn, statuses=stored, parent=parent, role=role):
        item = seen(row, now)
        if item["status"] == "X" and not (everything or statuses):
            continue
        if statuses and item["status"] not in statuses:
            continue
        found.append(item)
    return found


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


def stat_text(r):
    """STAT as agent-ps and agent-top show it: the status, H for an agent held (after a
    failure, in a mail loop), ! for one whose tools run unconfined."""
    return (r["status"] + ("H" if r["held_at"] is not None else "")
            + ("!" if r["unconfined"] else ""))


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
