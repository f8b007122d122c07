"""agent-merge's operation, and the built-in `merge`'s (agent-merge(1)): a child's
changes since its fork applied to its parent's layer (through the parent's stack
mounted: workspace/space.py) or, for an agent whose parent has no layer over its
directory (a child of init), to the real directory; a conflict stops it before
anything is applied; atomic by its journal (workspace/journal.py); recorded in the
event log (a "merge" event of the child's)."""

import os

from agentctl.errors import AgentctlError, Refused
from agentctl.store import events
from agentctl.store.db import transaction
from agentctl.workspace import changed, journal, lifetime, plan, space


class Conflict(Refused):
    """Paths changed on both sides since the fork: nothing merged."""

    def __init__(self, child, paths):
        self.paths = paths
        n = len(paths)
        super().__init__(f"{child['name'] or child['id']}: {n} path{'s' if n != 1 else ''} "
                         "changed on both sides since the fork: nothing merged (choose with "
                         "--theirs, --ours or --only)")


def merge(conn, actor, child, *, only=(), side=None, dry_run=False):
    """Merge `child` (a row) as `actor` (a row, None: the operator); its plan
    (plan.Plan). Refused for another actor than the operator or the parent; Conflict
    when a path changed on both sides and `side` is None."""
    plan.check(conn, actor, child)
    only = plan.paths_given(only)
    fd = journal.lock()
    try:
        _recover(conn)
        made = plan.make(conn, child, changed.views(conn, child, "fork"), only=only,
                         side=side)
        if made.conflicts:
            raise Conflict(child, made.conflicts)
        if dry_run or not made.steps:
            return made
        token, steps = journal.stage(made.steps)
        record = {"agent": child["id"], "actor": actor["id"] if actor else None,
                  "target": made.target, "base": changed.views(conn, child).base,
                  "into": made.parent, "steps": steps,
                  "stack": [dict(r) for r in made.stack] if made.stack else None}
        journal.decide(token, record)
        _finish(conn, token, record)
        if child["status"] == "X" and not only and side != "ours":
            lifetime.discard(conn, child["id"])     # (reaped, and all of it taken)
        return made
    finally:
        os.close(fd)


def _finish(conn, token, record):
    """A decided merge applied (again), recorded once, its directory removed."""
    steps = record["steps"]
    if record["target"] == "layer":
        space.within(record["stack"], record["into"],
                     lambda top: journal.apply(token, steps, top))
    else:
        journal.apply(token, steps, record["base"])
    said = events.latest(conn, record["agent"], "merge")
    if not said or said.get("token") != token:
        data = {"paths": len(steps), "token": token}
        if record["into"]:
            data["into"] = record["into"]
        with transaction(conn):
            events.record(conn, record["agent"], "merge", actor=record["actor"], **data)
    journal.done(token)


def _recover(conn):
    for token, record in journal.decided():
        _finish(conn, token, record)


def recover(conn):
    """Every merge a crash left: a decided one finished, an undecided one thrown away
    (under the merges' lock). What fails is said in one line and left for the next
    program (AgentctlError)."""
    fd = journal.lock()
    try:
        _recover(conn)
    except OSError as e:
        raise AgentctlError(f"a merge left by a crash can't be finished: {e}") from None
    finally:
        os.close(fd)
