"""Waiting for agents to exit and collecting them (reaping: Z -> X)."""

import time

from agentctl.store.db import transaction
from agentctl.store.registry import get, record


def exited(agent):
    return agent["status"] in ("Z", "X")


def how(agent):
    """'exited', 'failed' or 'killed'."""
    if agent["exit_signal"]:
        return "killed"
    return "exited" if agent["exit_code"] == 0 else "failed"


def reap(conn, agent_id, actor=None):
    """Collect a zombie: its exit status and result stay in the table."""
    with transaction(conn):
        collect(conn, agent_id, actor)
    return get(conn, agent_id)


def collect(conn, agent_id, actor=None):
    """Reap within the caller's transaction."""
    changed = conn.execute("UPDATE agents SET status = 'X' WHERE id = ? AND status = 'Z'",
                           (agent_id,)).rowcount
    if changed:
        record(conn, agent_id, "reap", None, actor)


def wait(conn, ids, *, timeout=None, any_one=False, actor=None, reap_them=True):
    """Wait for the agents `ids` to exit, reap them (unless not `reap_them`),
    and return (their rows in exit order, ids still running)."""
    from agentctl.store.db import wait_for_commit
    deadline = time.monotonic() + (timeout if timeout is not None else 10 ** 9)
    pending = list(dict.fromkeys(ids))
    collected = []

    def sweep():
        for agent_id in list(pending):
            if exited(get(conn, agent_id)):
                pending.remove(agent_id)
                collected.append(reap(conn, agent_id, actor) if reap_them
                                 else get(conn, agent_id))
        return not pending or (any_one and collected)

    wait_for_commit(conn, deadline, sweep)
    return collected, pending
