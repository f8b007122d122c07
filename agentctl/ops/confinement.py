"""What a fork may give a child of the sandbox its tools run in (agentctl(7),
SANDBOX): never more than its parent has. Its working directory (the one place its
tools may write) inside its parent's, its read-only paths inside what its parent's
tools may read (its parent's --ro and --cwd), the network only if its parent has it,
the names of the read-only set it may write (--rw) and the variables it gets (--env)
among its parent's, its limits at most its parent's. --unconfined, the operator's
power for its tools, is given by the operator alone, and no child inherits it.

Paths are compared resolved (settings.resolved: a link is followed once, when the
path is given, and the sandbox refuses one that resolves otherwise later). A path an
agent names must be inside what its own tools can see, checked before whether it
exists: the answer is the same for a host path that exists and one that doesn't."""

import os

from agentctl import limits, paths, settings
from agentctl.errors import Refused, UsageError
from agentctl.ids import INIT_ID
from agentctl.store import registry


def _paths(stored):
    return stored.split("\n") if stored else []


def visible(actor, given, what):
    """Refused unless each path `given` (resolved) is inside what `actor`'s (a row)
    tools can see: its --cwd and --ro."""
    seen = _paths(actor["ro"]) + ([actor["cwd"]] if actor["cwd"] else [])
    for path in given:
        if not settings.inside(path, seen):
            raise Refused(f"--{what} {path}: outside what {registry.label(actor)}'s tools "
                          "can see (its --cwd and --ro)")


def settle(parent, values, actor):
    """Check a new child's sandbox settings against `parent`'s and put them in their
    stored forms (in place). `actor`: the acting agent's id, None for the operator."""
    label = registry.label(parent)
    if values.get("unconfined"):
        if actor is not None:
            raise Refused("--unconfined: only the operator gives it (the agent acting, "
                          "AGENT_ID, can't)")
        values["unconfined"] = 1
    else:
        values["unconfined"] = None
    cwd = values.get("cwd")
    if cwd is not None and cwd != parent["cwd"]:    # (given: an inherited one is checked
        cwd = values["cwd"] = settings.resolved(cwd)    # when a call binds it)
        if not settings.narrows(settings.BY_NAME["cwd"], parent["cwd"], cwd):
            raise Refused(f"--cwd {cwd}: outside {label}'s working directory "
                          f"{parent['cwd']} (a child's tools may write only where its "
                          "parent's may)")
        if not os.path.isdir(cwd):
            raise UsageError(f"--cwd {cwd}: not a directory")
        why = paths.refused_workdir(cwd)
        if why:
            raise UsageError(f"--cwd {cwd}: {why}: no working directory can be")
    ro = values.get("ro")
    if isinstance(ro, (list, tuple)):
        ro = [settings.resolved(p) for p in ro]
        readable = _paths(parent["ro"]) + ([parent["cwd"]] if parent["cwd"] else [])
        outside = [p for p in ro if not settings.inside(p, readable)]
        if parent["id"] != INIT_ID and outside:
            raise Refused(f"--ro {outside[0]}: {label}'s tools can't read it, so it can't "
                          "give it (its --cwd and --ro)")
        for path in ro:
            if not os.path.exists(path):
                raise UsageError(f"--ro {path}: no such file or directory")
        values["ro"] = "\n".join(dict.fromkeys(ro)) or None
    for name in ("rw", "env"):
        given = values.get(name)
        if isinstance(given, (list, tuple)):
            given = settings.BY_NAME[name].names(given)
            wider = set(given) - set(_paths(parent[name]))
            if parent["id"] != INIT_ID and wider:
                raise Refused(f"--{name} {sorted(wider)[0]}: {label} doesn't hold it, so it "
                              "can't give it")
            values[name] = "\n".join(dict.fromkeys(given)) or None
    if values.get("net") and parent["id"] != INIT_ID and not parent["net"]:
        raise Refused(f"--net: {label} has no network, so it can't give it")
    values["net"] = 1 if values.get("net") else None
    given = values.get("limits")
    if isinstance(given, dict):
        merged = limits.child(parent["limits"], given)
        wider = limits.within(merged, parent["limits"]) if parent["id"] != INIT_ID \
            else []
        if wider:
            raise Refused(f"--limit {wider[0]}: above {label}'s "
                          f"({limits.shown(parent['limits']) if parent['limits'] else 'the default'}"
                          "): a child's limits are at most its parent's")
        values["limits"] = merged
