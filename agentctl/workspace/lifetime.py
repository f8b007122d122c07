"""What becomes of an agent's layers (agentctl(7), WORKSPACES, Lifetime): a layer
lives while its agent, or an agent that stacks on it, does; what an agent changed
stays after it exits and is reaped, until it is merged (agent-merge) or thrown away
(agent-diff --discard): discard() here. A layer's row stays (the history of the
lineage); its directory goes, which every reader takes for an empty layer."""

import contextlib
import fcntl
import os
import shutil

from agentctl.errors import TempFail
from agentctl.store import layers as rows
from agentctl.workspace import journal, layers


def discard(conn, agent_id):
    """Throw away what the agent changed since its fork: its own layer emptied (held
    alone: TempFail while a call of its holds it), and the directories of the frozen
    layers of its own above the first that another agent stacks on (a child's view
    holds that one and what is under it: they stay). How many layers were emptied."""
    mine = layers.since_fork(conn, agent_id)
    kept = next((n for n, layer in enumerate(mine) if n > 0 and any(
        r["agent_id"] != agent_id for r in rows.on(conn, layer["id"]))), len(mine))
    emptied = 0
    for layer in mine[:kept]:
        top = layers.top(layer["id"])
        if not os.path.isdir(top):
            continue
        with alone(layer, turns=True):
            for name in os.listdir(top):
                shutil.rmtree(os.path.join(top, name))
        emptied += 1
    journal.forget(agent_id)    # (what its merges gave is the target's now)
    return emptied


@contextlib.contextmanager
def alone(layer, turns=False):
    """Layer `layer` (a row) held alone the while: no call of its agent's writes it
    (TempFail while one does; one that starts meanwhile waits); with `turns`, no
    process holds an overlay of it either (its guard, space.py: a turn between its
    calls), for what removes its directories. A layer never written (no directory
    yet) needs no holding."""
    top = layers.top(layer["id"])
    held = []
    try:
        for where, what in [(top, "a call")] + ([(os.path.join(top, "w"), "a turn")]
                                                if turns else []):
            try:
                held.append(os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(held[-1], fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise busy(layer, what) from None
        yield
    finally:
        for fd in held:
            os.close(fd)


def busy(layer, what="a call"):
    """The error of a layer `what` of its agent's holds (a call; a turn: inside.py)."""
    return TempFail(f"layer {layer['id']}: {what} of its agent's is running in it: try "
                    "again when it ends")
