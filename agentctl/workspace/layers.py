"""An agent's layers (agentctl(7), WORKSPACES): which agent has one, its stack (its own
layer, the frozen ones of its lineage under it, the real directory at the bottom),
where each lives on disk, and what a fork does to them.

A layer is a directory of agentctl's data directory (hidden from every tool), short
named so that a deep stack's mount options fit in a page: DATA/agentctl/l/ID, with `u`
(the overlay's upper directory: what the agent wrote) and `w` (its work directory).
A fork is O(1) in files: a row frozen, two rows made, at most one directory looked
into (whether the parent's layer holds anything); no file of the tree is touched."""

import os

from agentctl import env, paths
from agentctl.store import layers as rows


def root():
    """Where the layers live: DATA/agentctl/l."""
    return os.path.join(paths.data_home(), "agentctl", "l")


def top(layer_id):
    """A layer's directory: `u`, its upper directory, and `w`, its work directory."""
    return os.path.join(root(), str(layer_id))


def upper(layer_id):
    return os.path.join(top(layer_id), "u")


def layered(agent):
    """Whether an agents row (or a child's settings) gets a layer: a working directory
    given, not --shared, not --unconfined (whose tools run outside the sandbox, so
    outside any layer: it works on the real directory)."""
    return bool(agent["cwd"]) and not agent["shared"] and not agent["unconfined"]


def elsewhere(layer):
    """Where the layer (a row) is another host's and not here (its directory not found
    on this host's data directory): the line that says so; else None."""
    if layer["host"] == env.host() or os.path.isdir(top(layer["id"])):
        return None
    return (f"layer {layer['id']} is on {layer['host']}, whose data directory is not "
            "this host's")


def empty(layer):
    """Whether a layer holds nothing yet (at most one entry read). A layer of another
    host's counts as holding something: what it holds can't be seen from here."""
    if layer["host"] != env.host():
        return False
    try:
        with os.scandir(upper(layer["id"])) as entries:
            return next(entries, None) is None
    except FileNotFoundError:
        return True


def forked(conn, parent, child_id, child):
    """The layers of a fork, in its transaction: the child of a layered `parent`
    (a row) whose working directory is within the parent's layered directory
    stacks on the parent's layer, which is frozen (a new empty one the parent's from
    now on) unless it holds nothing yet (then both stack on what is under it, and the
    parent keeps it); any other layered child gets a stack of its own on its working
    directory. `child`: the child's settings."""
    if not layered(child):
        return None
    host = env.host()
    own = rows.own(conn, parent["id"]) if layered(parent) else None
    if own is None or not paths.inside(child["cwd"], [own["base"]]):
        return rows.insert(conn, child_id, None, child["cwd"], host)
    if empty(own):
        return rows.insert(conn, child_id, own["below"], own["base"], host)
    rows.freeze(conn, own["id"])
    rows.insert(conn, parent["id"], own["id"], own["base"], host)
    return rows.insert(conn, child_id, own["id"], own["base"], host)


def settled(conn, agent):
    """A layered agent's own layer made where it has none (an agent older than layers,
    one made layered by agent-set) or where its working directory left its layer's
    base (agent-set cwd=: that layer frozen, a stack of its own on the new one); in
    the caller's transaction (the turn's, holding the agent)."""
    if not layered(agent):
        return
    own = rows.own(conn, agent["id"])
    if own is not None and paths.inside(agent["cwd"], [own["base"]]):
        return
    if own is not None:
        rows.freeze(conn, own["id"])
    rows.insert(conn, agent["id"], None, agent["cwd"], env.host())


def stack(conn, agent):
    """The agent's stack (layer rows, its own first), or None: not layered, or no
    layer yet (settled() makes it)."""
    own = rows.own(conn, agent["id"]) if layered(agent) else None
    return None if own is None else rows.stack(conn, own["id"])


def since_fork(conn, agent_id):
    """The agent's own layers since its fork (topmost first): its own layer and the
    frozen ones of its own under it (its forks froze them), down to the first that is
    another agent's (the layer it was forked on)."""
    own = rows.own(conn, agent_id)
    if own is None:
        return []
    found = []
    for layer in rows.stack(conn, own["id"]):
        if layer["agent_id"] != agent_id:
            break
        found.append(layer)
    return found
