"""A turn's state changes (agentctl(7), TURNS): what is pending, how a turn starts
with all of it, what a model call is charged, and how a failed or killed turn
is undone. How a turn ends is ops/ending.py's; the loop is turn/runner.py's.

A turn is a row in `turns`. Its messages carry its id, and every step is
written as it happens, so a turn interrupted by a crash, a temporary fault
or STOP is resumed by the next agent-run from exactly where it stopped.
A killed turn, or a failed one of an agent restarted on failure, is voided: its
messages stay in the table but are never replayed, and the mail it had taken is
unread again. A failed turn of an agent that is not restarted stays open, its
agent held (ops/supervise.py).
"""

from agentctl import clock, env, money, voice
from agentctl.errors import UNAVAILABLE, NotFound, Refused
from agentctl.ids import INIT_ID
from agentctl.ops import budget, endpoints, lease, lifecycle, mail, prices
from agentctl.ops.lease import effective_status, holding, renew
from agentctl.store import accounts, batched, events, history, mailbox, registry, turnlog
from agentctl.store.pending import rows as pending_rows

BACKOFF_FIRST = 30.0
BACKOFF_MAX = 3600.0

open_turn = turnlog.open_turn


def pending(conn, agent_id, now=None):
    """What a turn of the agent would take now: its row with store.pending's counts
    (prompts, mail, due, resume), or None for no such agent. inputs() is the same
    statement's bulk form: agent-why and agent-run ask this one, agent-ps and
    agent-run --all that one."""
    found = pending_rows(conn, now or clock.now(), agent_id)
    return found[0] if found else None


def inputs(conn, now=None):
    """{id: its row with store.pending's counts} of every agent a turn may be started
    for (its stored status S or R), oldest first: pending() for all of them at once."""
    return {r["id"]: r for r in pending_rows(conn, now or clock.now())}


def has_input(row):
    """Whether a turn would have anything to take (`row`: pending()'s or inputs()'): a
    prompt, unread mail, a due timer, or an open turn to resume."""
    return bool(row["prompts"] or row["mail"] or row["due"] or row["resume"])


def has_pending_input(conn, agent, now=None):
    return has_input(pending(conn, agent["id"], now))


def start(conn, agent, model_name, identity=None):
    """Resume the agent's open turn, or open one with ALL pending input: the
    unanswered prompt, every unread mail (one inbox message), a due timer.
    Returns the turn row; NotFound when there is nothing to do, Refused when
    a new turn would start with the agent's account exhausted. A step of the
    run: its own transactions (lease.holding). `identity`: the endpoint its model
    calls (agentctl.endpoint.Identity), which the agent's row names from now on."""
    # Under the claim: a cascade may have ended the agent since it was claimed.
    if agent["budget_id"] is not None:
        with holding(conn, agent["id"]):    # committed before refusing: the notice stays
            waiting = pending(conn, agent["id"])
            over = not waiting["resume"] and has_input(waiting) and budget.refusal(conn, agent)
        if over:
            raise Refused(over)
    with holding(conn, agent["id"]):
        if identity is not None:
            endpoints.name(conn, agent["id"], identity)
        turn = open_turn(conn, agent["id"])
        if turn is not None:        # (when: agent-top's DOING counts a call from it)
            events.record(conn, agent["id"], "turn-resume", turn=turn["id"], model=model_name)
            return turn
        now = clock.now()
        waiting = pending(conn, agent["id"], now)
        if not has_input(waiting):
            registry.release(conn, agent["id"])
            raise NotFound(f"{registry.label(agent)}: no pending input")
        prompts = history.pending_prompts(conn, agent["id"]) if waiting["prompts"] else []
        turn_id = turnlog.insert(conn, agent["id"], model_name, now)
        history.give_to_turn(conn, [p[0] for p in prompts], turn_id)
        first = history.latest(conn, agent) + 1
        cleared = history.latest_clear(conn, agent["id"])
        for prompt_id, content in prompts:
            if prompt_id < cleared:     # a HUP came before the turn took it: input all the same
                history.append(conn, agent["id"], "user", content, turn_id=turn_id)
        if waiting["due"]:
            woke = waiting["wake_at"]
            history.append(conn, agent["id"], "user", voice.timer(woke), turn_id=turn_id)
            registry.update(conn, agent["id"], wake_at=None)
            turnlog.update(conn, turn_id, woke_at=woke)
            events.record(conn, agent["id"], "wake", turn=turn_id, at=woke)
        mail.take_into_turn(conn, agent["id"], turn_id, voice.INBOX)
        turnlog.update(conn, turn_id, first_msg_id=first)
        return turnlog.get(conn, turn_id)


def charge(conn, turn_id, agent_id, usage, api_url=""):
    """Account for one model call of the turn (a step, or the summary of a compaction),
    its usage as models.base makes it, answered by the API at `api_url`: the turn's and
    the agent's counts, what it cost (ops.prices: the turn's model), the budget it is
    charged to, and the call's event."""
    model = turnlog.get(conn, turn_id)["model"] or ""
    cost = prices.cost(model, api_url, usage)
    tokens_in, tokens_out = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
    cached, written = usage.get("cache_read_tokens", 0), usage.get("cache_write_tokens", 0)
    budget.charge(conn, agent_id, usage, cost)
    turnlog.add(conn, turn_id, input_tokens=tokens_in, output_tokens=tokens_out,
                cache_read_tokens=cached, cache_write_tokens=written)
    turnlog.add_cost(conn, turn_id, cost)
    registry.add_usage(conn, agent_id, tokens_in, tokens_out, cached, written, cost)
    events.record(conn, agent_id, "call", turn=turn_id, model=model or None,
                  input_tokens=tokens_in, output_tokens=tokens_out, cache_read_tokens=cached,
                  cache_write_tokens=written, cost=money.dollars(cost),
                  estimated=True if usage.get("estimated") else None,
                  tier=usage.get("tier") or None)


def record_step(conn, turn_id, agent_id, usage, api_url=""):
    turnlog.add(conn, turn_id, steps=1)
    charge(conn, turn_id, agent_id, usage, api_url)
    renew(conn, agent_id)


def void(conn, turn, status, error=None):
    """End a turn as if it never ran: its messages are never replayed, the
    prompts it took are pending again, the mail it took is unread again, the
    timer it took is due again, a request it sent through a provider's batch is
    abandoned."""
    if turn["woke_at"] is not None:
        agent = registry.get(conn, turn["agent_id"])
        if agent["wake_at"] is None:
            registry.update(conn, turn["agent_id"], wake_at=turn["woke_at"])
    history.void_turn(conn, turn["id"], turn["first_msg_id"] or 0)
    mailbox.unread_again(conn, turn["id"])
    batched.abandon(conn, turn["id"])       # a result that comes is not applied
    turnlog.finish(conn, turn["id"], status, error)


def backoff(failures):
    """The wait after `failures` failures in a row: AGENTCTL_BACKOFF=FIRST[,MAX]
    (durations; 0 means none), by default 30 s doubling up to an hour."""
    first, most = env.durations("AGENTCTL_BACKOFF", (BACKOFF_FIRST, BACKOFF_MAX))
    return min(first * 2 ** min(failures, 64), most)


def back_off(conn, agent_id):
    """After a failure: `agent-run --all` leaves the agent alone for a while, longer
    with each failure in a row (a success resets it). The wait, in seconds."""
    delay = backoff(registry.get(conn, agent_id)["failures"])
    registry.failed_once_more(conn, agent_id, delay)
    return delay


def runnable(conn, now=None):
    """Ids of the agents `agent-run --all` should run (would_run), oldest first."""
    now = now or clock.now()
    spent = accounts.exhausted_ids(conn)
    return [i for i, r in inputs(conn, now).items() if would_run(r, now, spent)]


def would_run(r, now, spent=None, unheld=False):
    """Whether `agent-run --all` should start (or resume) a turn of the agent now: the
    one rule of --all's list (runnable) and of agent-why's exit status. `r` is its row
    as pending() or inputs() read it at `now`: not init, sleeping (or holding a dead
    lease, with no STOP waiting), no grace period ended (the next writer kills it), not
    backing off, not held (or `unheld`: its hold's cause looks gone, which --all lets
    go first: supervise.cause_gone), with input pending; its account not exhausted
    (`spent`: the accounts that are; None: the run will say), but for an open turn,
    resumed to end over budget; its open turn not waiting for a provider's batch (the
    run that collects the result makes it so: ops.batches)."""
    return (r["id"] != INIT_ID and effective_status(r, now) == "S"
            and lifecycle.overdue(r, now) is None
            and (r["retry_at"] is None or r["retry_at"] <= now) and (r["held_at"] is None or unheld)
            and (spent is None or r["budget_id"] not in spent or bool(r["resume"]))
            and not r["batched"] and has_input(r))


def gone(conn, agent_id):
    """Whether agent-run --all need not run the agent any more (another run has it or ran
    it, it was stopped, it backs off): read first, so that overlapping --all loops skip
    each other's agents without taking the write lock."""
    now = clock.now()
    return not would_run(pending(conn, agent_id, now), now)


def hand_out(conn, agent_id, identity=None):
    """agent-run --all, in the caller's transaction: claim the agent for a run it is
    about to start (lease.dispatch), when it should still run and its endpoint
    (`identity`, None for a model that calls none) has room for it (endpoints.room).
    Returns None when claimed; "gone" when it no longer needs a run (another ran it,
    it was stopped, it backs off); else the endpoints.Wait that holds it back. (An
    account exhausted since the list was made is the run's to say.)"""
    now = clock.now()
    if identity is not None:
        wait = endpoints.room(conn, identity, now)
        if wait is not None:
            return wait
    if not would_run(pending(conn, agent_id, now), now) or not lease.dispatch(conn, agent_id):
        return "gone"
    if identity is not None:
        endpoints.name(conn, agent_id, identity)
    return None
