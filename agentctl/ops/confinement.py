"""What a fork may give a child of the sandbox its tools run in (agentctl(7),
SANDBOX): never more than its parent has. Its working directory (the one place its
tools may write) inside its parent's, its read-only paths inside what its parent's
tools may read (its parent's --ro and --cwd), the network only if its parent has it,
its limits at most its parent's. --unconfined, the operator's power for its tools, is
given by the operator alone, and no child inherits it."""

import os

from agentctl import limits, settings
from agentctl.errors import Refused, UsageError
from agentctl.ids import INIT_ID
from agentctl.store import registry


def _paths(stored):
    return stored.split("\n") if stored else []


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
    if cwd is not None and not settings.narrows(settings.BY_NAME["cwd"], parent["cwd"], cwd):
        raise Refused(f"--cwd {cwd}: outside {label}'s working directory {parent['cwd']} "
                      "(a child's tools may write only where its parent's may)")
    ro = values.get("ro")
    if isinstance(ro, (list, tuple)):
        ro = [os.path.abspath(p) for p in ro]
        for path in ro:
            if not os.path.exists(path):
                raise UsageError(f"--ro {path}: no such file or directory")
        readable = _paths(parent["ro"]) + ([parent["cwd"]] if parent["cwd"] else [])
        outside = [p for p in ro if not settings.inside(p, readable)]
        if parent["id"] != INIT_ID and outside:
            raise Refused(f"--ro {outside[0]}: {label}'s tools can't read it, so it can't "
                          "give it (its --ro and --cwd)")
        values["ro"] = "\n".join(dict.fromkeys(ro)) or None
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
