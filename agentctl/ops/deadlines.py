"""Deadlines (agentctl(7), LIFECYCLE): a grace period's end, a zombie's reaping,
an idle agent's exit. There is no daemon: whichever writing program runs after a
deadline (agent-run, agent-run --all, agent-wait, agent-kill) carries it out, so
`agent-run --all` from cron is enough; agent-ps, a reader, only shows it
(lifecycle.overdue, ops.proctable)."""

from agentctl import clock, voice
from agentctl.ops import asks, lifecycle, signals, turns
from agentctl.store import registry
from agentctl.store import asks as asks_store
from agentctl.store.db import transaction


def carry_out(conn, now=None):
    """Apply every deadline that has passed, in a transaction of its own (every
    writing program's first step, and the tick of a waiting loop: it looks
    without the write lock first); how many agents it changed."""
    now = clock.now() if now is None else now
    if not _any_due(conn, now):
        return 0            # the common case, read without taking the write lock
    with transaction(conn):
        done = 0
        for agent in registry.grace_ended(conn, now):
            signals.apply(conn, agent, "KILL", actor=None)
            done += 1
        default = lifecycle.reap_after({"reap_after": None})
        for agent in registry.zombies_due(conn, now, default):
            lifecycle.collect(conn, agent["id"], by="deadline")
            done += 1
        done += asks.expire(conn, now)
        for agent in registry.idle_since(conn, now):
            if not turns.has_pending_input(conn, agent, now):
                lifecycle.exit(conn, agent, code=0, result=voice.idle_exit(agent["idle_exit"]))
                done += 1
    return done


def _any_due(conn, now):
    due = next_due(conn)
    return (due is not None and due <= now) or bool(registry.idle_since(conn, now))


def next_due(conn):
    """The earliest deadline still to come, or None: when a waiting program must
    look again though nothing was committed."""
    due = [d for d in (registry.next_deadline(conn, lifecycle.reap_after({"reap_after": None})),
                       asks_store.next_deadline(conn)) if d is not None]
    return min(due) if due else None
