"""agent-merge's operation, and the built-in `merge`'s (agent-merge(1)): a child's
changes since its fork applied to its parent's layer (through the parent's stack
mounted: workspace/inside.py) or, for an agent whose parent has no layer over its
directory (a child of init), to the real directory; a conflict stops it before
anything is applied; atomic by its journal (workspace/journal.py); recorded in the
event log (a "merge" event of the child's)."""

import os

from agentctl.errors import DATABASE, AgentctlError, Refused
from agentctl.ops import authority
from agentctl.store import events, registry
from agentctl.store.db import transaction
from agentctl.workspace import changed, inside, journal, lifetime, plan


class Conflict(Refused):
    """Paths changed on both sides since the fork: nothing merged."""

    def __init__(self, child, paths):
        self.paths = paths
        n = len(paths)
        super().__init__(f"{registry.label(child)}: {n} path{'s' if n != 1 else ''} "
                         "changed on both sides since the fork: nothing merged (choose with "
                         "--theirs, --ours or --only)")


def merge(conn, actor, child, *, only=(), side=None, dry_run=False):
    """Merge `child` (a row) as `actor` (a row, None: the operator); its plan
    (plan.Plan). Refused for another actor than the operator or the parent; Conflict
    when a path changed on both sides and `side` is None."""
    authority.check_merge(actor, child)
    only = plan.paths_given(only)
    views = changed.views(conn, child, "fork")  # (no layer: said before anything is written)
    try:
        fd = journal.lock()
    except OSError as e:
        raise _failed(e) from None
    try:
        _recover(conn)
        with lifetime.alone(views.stack[0]):        # (no call of the child's writes it)
            made = plan.make(conn, child, views, only=only, side=side)
            if made.conflicts:
                raise Conflict(child, made.conflicts)
            if dry_run or not made.steps:
                return made
            held = inside.Held(made.stack, made.parent) if made.stack else None
            try:
                token, steps = journal.stage(made.steps)
                record = {"agent": child["id"], "actor": actor["id"] if actor else None,
                          "target": made.target, "base": views.base, "into": made.parent,
                          "steps": steps, "stack": [dict(r) for r in made.stack]
                          if made.stack else None}
                journal.decide(token, record)
                _finish(conn, token, record, held)
            finally:
                if held is not None:
                    held.close()
        if child["status"] == "X" and not only and side != "ours":
            lifetime.discard(conn, child["id"])     # (reaped, and all of it taken)
        return made
    except OSError as e:
        raise _failed(e) from None
    finally:
        os.close(fd)


def _failed(e):
    """A step on the file system that failed, in one line (exit 74)."""
    where = f" ({e.filename})" if e.filename else ""
    return AgentctlError(f"a merge failed: {e.strerror or e}{where}", code=DATABASE)


def _finish(conn, token, record, held=None):
    """A decided merge applied (again), recorded once, its directory removed; `held`:
    its target's stack, ready (else it is made ready here)."""
    steps = record["steps"]
    if held is not None:
        held.run(lambda top: journal.apply(token, steps, top))
    elif record["target"] == "layer":
        inside.within(record["stack"], record["into"],
                     lambda top: journal.apply(token, steps, top))
    else:
        journal.apply(token, steps, record["base"])
    journal.remember(record["agent"], steps)
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
    (under the merges' lock: while a merge holds it, its directory is its own, and
    nothing waits for it). What fails is said in one line and left for the next
    program (AgentctlError)."""
    try:
        fd = journal.lock(wait=False)
    except OSError as e:
        raise _failed(e) from None
    if fd is None:
        return
    try:
        _recover(conn)
    except OSError as e:
        raise _failed(e) from None
    finally:
        os.close(fd)
