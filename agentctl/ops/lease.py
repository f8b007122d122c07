"""The lease that makes one agent-run the only runner of an agent (agentctl(7),
TURNS): who holds it (this host and process) and whether it still holds (the
holder's process probed), so the effective status; claiming, the checked
transaction of the run that holds the claim, the heartbeat that keeps it, and
giving it back."""

import os
import threading
from contextlib import contextmanager

from agentctl import clock, env
from agentctl.errors import NotFound, Refused, TempFail, UsageError
from agentctl.ids import INIT_ID
from agentctl.ops import lifecycle
from agentctl.store import registry
from agentctl.store.db import connect, path_of, transaction

LEASE_SECONDS = 300.0       # renewed at every step; a crashed run's lease expires
HANDED = "AGENTCTL_HANDED_BY"   # to a run --all starts: the holder of the claim it takes over


LEASE_LONGEST = 10 ** 7     # seconds (115 days): the heartbeat's wait must be a real timeout


def lease_seconds():
    """$AGENTCTL_LEASE, a finite number of seconds from 0.1 up to LEASE_LONGEST (0,
    nan or inf would make the heartbeat spin, or never beat): else a usage error."""
    seconds = env.number("AGENTCTL_LEASE", LEASE_SECONDS, minimum=0.1)
    if seconds > LEASE_LONGEST:
        raise UsageError(f"AGENTCTL_LEASE must be at most {LEASE_LONGEST} seconds, "
                         f"not {env.shown(os.environ['AGENTCTL_LEASE'])}")
    return seconds


host = env.host     # (this host's name, as a lease names it: its home is the base's)


def owner_token():
    """How a lease names its holder: host and process."""
    return f"{host()}:{os.getpid()}"


def held(agent, now=None):
    """Whether the agent's lease holds: it has not expired and, when its owner ran
    on this host, that process still exists (a crash frees it at once)."""
    return alive(agent["lease_owner"], agent["lease_until"], now)


def alive(owner, until, now=None):
    """Whether what `owner` (HOST:PID, as owner_token() names a holder) took until
    `until` still holds: not expired, and when it ran on this host its process still
    exists. The rule of a lease, and of the slot of an endpoint a run's lease holds
    (ops/endpoints.py)."""
    if owner is None or (until or 0) <= (now or clock.now()):
        return False
    holder, _, pid = owner.rpartition(":")
    if holder == host() and pid.isascii() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
    return True


def effective_status(agent, now=None):
    """The status as a reader should see it: an R whose agent-run died is idle
    (S), or stopped (T) when a STOP was waiting for that run. (A deadline that
    has passed, which the next writing program carries out, is
    lifecycle.overdue().)"""
    if agent["status"] == "R" and not held(agent, now):
        return "T" if agent["pending_signal"] == "STOP" else "S"
    return agent["status"]


def claim(conn, ref, handed=None):
    """Take the agent for one turn, in a transaction of its own: status R and a
    lease. Exit 75 when another run holds it; 3 when it is stopped or has exited.
    `handed`: the holder (HOST:PID) that may hold it, having claimed it to hand it to
    this run (agent-run --all: dispatch()): its lease is taken over."""
    with transaction(conn):
        agent = registry.resolve(conn, ref)
        if agent["id"] == INIT_ID:
            raise Refused("init doesn't run turns")
        if agent["status"] == "R" and held(agent) and not (
                handed and agent["lease_owner"] == handed):
            raise TempFail(f"{registry.label(agent)}: claimed by another agent-run "
                           f"({agent['lease_owner']})", kind="claimed")
        if agent["status"] == "T":
            raise Refused(f"{registry.label(agent)}: stopped (agent-kill -s CONT to resume)")
        if agent["status"] == "P":
            raise NotFound(f"{registry.label(agent)}: paused, waiting for an answer "
                           "(agent-answer lists it)")
        if registry.has_exited(agent):
            raise Refused(f"{registry.label(agent)}: has exited")
        registry.claim(conn, agent["id"], owner_token(), clock.now() + lease_seconds())
        return registry.get(conn, agent["id"])


def dispatch(conn, agent_id):
    """agent-run --all's claim of an agent it is about to hand to a run of its own (the
    run takes it over: claim(handed=True)), in the caller's transaction: so that no
    other --all starts a run for it meanwhile. Whether it was claimed: not when another
    run holds it, or it is no longer sleeping."""
    agent = registry.get(conn, agent_id)
    if agent["status"] not in ("S", "R") or (agent["status"] == "R" and held(agent)):
        return False
    registry.claim(conn, agent_id, owner_token(), clock.now() + lease_seconds())
    return True


def undispatch(conn, agent_id):
    """Give back what dispatch() claimed when its run never took it over (it failed to
    start, or found the agent had nothing to do first), in the caller's transaction."""
    agent = registry.get(conn, agent_id)
    if agent["lease_owner"] == owner_token():
        registry.release(conn, agent_id)


class LostClaim(TempFail):
    """Another agent-run has claimed the agent since this run did (this run's
    lease ran out, its process stalled): this run must write nothing more."""
    kind = "claimed"


class KilledMidTurn(LostClaim):
    """The agent was ended while this run ran (a cascade from an ancestor kills
    its running descendants at once): the turn is voided, write nothing more."""
    code = Refused.code
    kind = "refused"


@contextmanager
def holding(conn, agent_id):
    """A write transaction of the run that holds the agent's claim. The claim
    is checked inside it, so no write of a run that lost its claim can land
    beside those of the run that took the agent over: LostClaim instead. Gives the
    agent's row as the transaction found it (`with holding(...) as agent`)."""
    with transaction(conn):
        row = registry.get(conn, agent_id)
        if row["lease_owner"] != owner_token():
            if registry.has_exited(row) and row["exit_signal"]:
                raise KilledMidTurn(f"{registry.label(row)}: killed by {row['exit_signal']} "
                                    "while this run held it; it wrote nothing more")
            raise LostClaim(f"{registry.label(row)}: claimed by another agent-run while this "
                            "one ran (its lease ran out); it wrote nothing more")
        yield row


class KillPending(Exception):
    """A KILL is recorded for the agent: its run starts nothing more (no tool
    call, no model call) and ends the turn (ops.ending.killed)."""


def check_not_killed(conn, agent_id):
    """Raise KillPending when a KILL waits for the agent's run, or its grace period
    (agent-kill --grace) has ended; inside the run's transaction, so that nothing
    starts after the KILL is recorded. Returns the agent's row it read."""
    row = registry.get(conn, agent_id)
    if row["pending_signal"] == "KILL" or lifecycle.overdue(row) == "KILL":
        raise KillPending()
    return row


def renew(conn, agent_id):
    registry.renew(conn, agent_id, owner_token(), clock.now() + lease_seconds())


@contextmanager
def heartbeat(conn, agent_id):
    """Keep the lease alive while a model call is in flight, however long it
    takes: a thread renews it every third of its length on its own connection."""
    path = path_of(conn)
    stop = threading.Event()

    def beat():
        other = None
        while not stop.wait(lease_seconds() / 3):
            try:
                other = other or connect(path)
                with transaction(other):
                    renew(other, agent_id)
            except Exception:       # the next beat, or the step's own renewal, tries again
                pass
        if other is not None:
            other.close()

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
