"""What an agent may do to other agents through agentctl's programs (agentctl(7),
SANDBOX): the operator (no AGENT_ID) may do anything; an agent acts only on itself
and its descendants, as its built-in tools do: it forks, signals, waits for, reads
the mail and the context of those alone, and sends mail only as itself. So a tool
that calls agent-fork can't make a child of init, or of another agent, with more
than its own agent has. Listing the process table and the event log, sending mail
to anyone, and documents (by their visibility) are open to all. A child's work is
merged (agent-merge) by the operator or its parent alone: it goes into the parent's
workspace."""

from agentctl.errors import Refused
from agentctl.store import registry


def mine(conn, actor_id, target_id):
    """Whether `target_id` is the agent `actor_id` or one of its descendants."""
    return target_id == actor_id or actor_id in registry.ancestors(conn, target_id)


def check(conn, actor, target, doing):
    """Refused unless `actor` (a row; None for the operator) may `doing` `target`."""
    if actor is None or mine(conn, actor["id"], target["id"]):
        return
    raise Refused(f"{registry.label(actor)} can't {doing} {registry.label(target)}: an "
                  "agent acts only on itself and its descendants")


def check_merge(actor, child):
    """Refused unless `actor` (a row; None for the operator) may merge `child`'s work
    (agent-merge(1)): the operator, or the agent that forked it, into whose workspace
    it goes; not the child itself, nor another ancestor."""
    if actor is None or actor["id"] == child["forked_from"]:
        return
    raise Refused(f"{registry.label(actor)} can't merge {registry.label(child)}: only the "
                  "operator or its parent (the agent that forked it) merges its work")
