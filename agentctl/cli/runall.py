"""agent-run --all: one turn for every agent that has input, each in a process of its
own (agent-run AGENT), started as its endpoint has room (agent-run(1), Every agent and
Providers); their replies and errors passed on, each line naming its agent."""

import json
import os
import subprocess
import sys
import time

from agentctl import clock, modelspec, spawn
from agentctl.cli.program import connect
from agentctl.cli.stdio import for_terminal, warn
from agentctl.errors import TEMPFAIL, NotFound, TempFail, UsageError
from agentctl.endpoint import identity_of
from agentctl.ops import deadlines, endpoints, lease, supervise, turns
from agentctl.store import batched, endpoints as endpoint_rows, registry
from agentctl.store.db import transaction


def run_all(db_path, jobs, model, max_steps, fmt):
    """Each turn in its own process (as cron would run it): a crash or a hung
    model call of one agent can't take the others down. Each reply is printed as it
    comes, each line prefixed by its agent's name (with `fmt`, json or jsonl: the
    turn's record, a line each); nothing at all when nothing ran, so that cron mails
    only when something happened (why an agent did not run: agent-why). Each agent
    is claimed for its run before the run starts (turns.hand_out), so that no other
    --all starts one for it; an agent whose endpoint has no room waits here while
    the runners serve the others. A hold whose cause looks gone in this environment
    (a key now set: supervise.cause_gone) is let go first, so that no human has to.

    Cron mails what a run prints, so a fault is said once: when an agent becomes held,
    or starts failing for now; a run of an agent that failed for now before says
    nothing more (its fail events, agent-why and agent-ps keep it)."""
    try:
        conn = connect(db_path, create=False)
    except NotFound:
        return 1            # no database yet: nothing to do, and nothing to say
    deadlines.carry_out(conn)
    if batched.any_out(conn):
        from agentctl.turn import batches  # (start-up: 10 ms, only with batch requests out)
        batches.tend(conn, lambda line: warn("agent-run", line))
    if supervise.any_to_retry(conn):
        with transaction(conn):
            supervise.retry_held(conn)
    ids = turns.runnable(conn)
    labels = {i: registry.label(registry.get(conn, i)) for i in ids}
    if not ids:
        conn.close()
        return 1
    # its runs leave their batch requests queued: sent together once they are done
    env = {**os.environ, lease.HANDED: lease.owner_token(), batched.GATHER: "1"}
    extra = (["--db", db_path] if db_path else []) + (["-m", model] if model else []) \
        + ["--max-steps", str(max_steps), "--json"]

    def one(agent_id):
        return subprocess.run(spawn.program("run", *extra, agent_id), env=env,
                              stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)

    def ended(agent_id, proc):
        codes[agent_id] = proc.returncode
        with transaction(conn):         # a run that never took its agent over
            lease.undispatch(conn, agent_id)
        if proc.stderr and not _said_before(conn, agent_id, proc.returncode):
            # each line names its agent, as the run of one would
            sys.stderr.write(_named(proc.stderr, labels[agent_id]))
        if proc.returncode < 0:     # killed: it could say nothing; its turn stays open
            codes[agent_id] = 128 - proc.returncode
            warn("agent-run", f"{agent_id}: killed by signal {-proc.returncode}")
        if proc.stdout:
            sys.stdout.write(proc.stdout if fmt else _replies(proc.stdout, labels[agent_id]))
            sys.stdout.flush()

    codes = {}
    try:
        left = dispatch(conn, ids, jobs, model, one, ended)
        if batched.queued(conn):
            _send(conn)
    finally:
        conn.close()
    for agent_id in left:
        codes[agent_id] = 75
    # 3: stopped, exited, killed or out of budget since the list was made: skipped, not failed
    counts = {c: sum(1 for code in codes.values() if code == c) for c in (0, 1, 3, 75)}
    failed = len(codes) - sum(counts.values())
    if counts[0] != len(codes) and _watched():  # a count for a person, not for cron's mail
        warn("agent-run", f"{len(codes)} agents: {counts[0]} ran, {counts[1]} had nothing "
                          f"to do, {counts[3]} skipped, {counts[75]} busy or temporarily failing"
                          + (f" ({len(left)} waiting for their provider)" if left else "")
                          + f", {failed} failed")
    bad = [codes[i] for i in ids if codes.get(i) not in (0, 1, 3)]
    return bad[0] if bad else 0


def _send(conn):
    """The batch requests its runs queued, sent: a batch per endpoint and model
    (turn.batches). A provider's fault is said; they are sent by the next run."""
    from agentctl.turn import batches  # (start-up: 10 ms, only with batch requests queued)
    try:
        batches.send(conn)
    except (TempFail, batches.ModelError, UsageError) as e:
        warn("agent-run", f"batches: {e}")


def _watched():
    """Whether a person reads standard error (a terminal): the summary is for them; cron's
    mail and a script get each agent's lines and the exit status."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _said_before(conn, agent_id, code):
    """Whether what a run that exited `code` printed was said before: a fault for now
    (75) of an agent that has failed so in a row already."""
    if code != TEMPFAIL:
        return False
    agent = registry.get(conn, agent_id)
    return agent is not None and agent["failures"] > 1 and agent["retry_at"] is not None


def _replies(records, label):
    """The replies of a child run's records (its --json lines), each line prefixed by
    the agent's name, as `parallel --tag` does: grep and cron mail read them."""
    lines = []
    for record in records.splitlines():
        text = json.loads(record).get("text") or ""
        lines += [f"{label}: {line}" for line in for_terminal(text).splitlines()]
    return "".join(line + "\n" for line in lines)


POLL = 0.05     # seconds: how often --all looks again for room when none was found


def dispatch(conn, ids, jobs, model, one, ended):
    """Start one(agent) for each of `ids` (oldest first), `jobs` at once, each once
    turns.hand_out() has claimed its agent; ended(agent, what one returned) when it
    ends. An agent whose endpoint has no room is held back, and the next one whose
    endpoint has room goes first; one whose endpoint is throttled beyond
    $AGENTCTL_PROVIDER_WAIT is left (warned, once for its endpoint and only when its
    throttle is news: _news()). Returns the ids
    left; those gone meanwhile (run by another, stopped) end as exit 1."""
    from concurrent.futures import (  # (start-up: 3 ms, only for --all)
        FIRST_COMPLETED, ThreadPoolExecutor, wait)
    identities = {i: _identity(conn, i, model) for i in ids}
    limit, start, began = endpoints.wait_limit(), time.monotonic(), clock.now()
    queue, running, left = list(ids), {}, []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        while queue or running:
            blocked = {}
            for agent_id in list(queue):
                if len(running) >= jobs:
                    break
                identity = identities[agent_id]
                key = identity and identity.name
                if key in blocked:
                    continue
                verdict = None if identity is None else endpoints.room(conn, identity)
                if verdict is None:         # (read first, then claimed in a transaction)
                    verdict = "gone" if turns.gone(conn, agent_id) else None
                if verdict is None:
                    with transaction(conn):
                        verdict = turns.hand_out(conn, agent_id, identity)
                if verdict is None:
                    queue.remove(agent_id)
                    running[pool.submit(one, agent_id)] = agent_id
                elif verdict == "gone":
                    queue.remove(agent_id)
                    ended(agent_id, _Gone())
                else:
                    blocked[key] = verdict
                    past = time.monotonic() - start
                    if verdict.until is not None and verdict.until - clock.now() > limit - past:
                        held = [i for i in queue if identities[i] and identities[i].name == key]
                        if _news(conn, key, began):
                            warn("agent-run", f"{len(held)} agent{'s' if len(held) > 1 else ''} "
                                              f"left waiting for their provider: "
                                              f"{identity.url}: {verdict.text}")
                        left += held
                        queue = [i for i in queue if i not in held]
            if not running:
                if queue:
                    time.sleep(POLL)
                continue
            done, _ = wait(running, timeout=POLL if queue else None, return_when=FIRST_COMPLETED)
            for future in done:
                ended(running.pop(future), future.result())
    return left


def _news(conn, endpoint, began):
    """Whether an endpoint's throttle is news to a run of --all that `began` then: its
    refusals began since (an earlier --all said so when they began), or it is no refusal
    (a budget the provider says is spent)."""
    row = endpoint_rows.get(conn, endpoint)
    return row is None or row["refused_at"] is None or row["refused_at"] >= began


class _Gone:
    """What a run that was never started (its agent had gone: run by another, stopped)
    ended with: nothing to do."""
    returncode, stdout, stderr = 1, "", ""


def _identity(conn, agent_id, model):
    """The endpoint the run of the agent would call (agentctl.endpoint.Identity), or None:
    a model that calls no API, or one the run will refuse (it says why)."""
    if not endpoints.shared():
        return None
    return identity_of(modelspec.chosen(registry.get(conn, agent_id), model))


def _named(text, label):
    """A child run's error lines, each naming the agent when it does not already."""
    lines = []
    for line in text.splitlines(keepends=True):
        body = line.removeprefix("agent-run: ")
        if body is not line and not body.startswith(f"{label}: "):
            line = f"agent-run: {label}: {body}"
        lines.append(line)
    return "".join(lines)
