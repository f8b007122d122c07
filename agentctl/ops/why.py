"""Why an agent is not running a turn now (agent-why(1)): each reason is one function
of (conn, agent row, now) that returns its line, or None when it does not hold; REASONS
lists them in the order agent-why prints them. A new reason is one more function
added to the list: nothing else changes. ready() says whether `agent-run --all` would
start a turn of it now (turns.would_run, the rule of --all's list): an agent is ready
exactly when no reason holds, which tests/test_pending.py holds over random databases."""

from agentctl import eventkinds, mailloop
from agentctl.clock import age, iso, until
from agentctl.errors import NotFound, Refused
from agentctl.ids import INIT_ID
from agentctl.ops import budget, endpoints, lifecycle, proctable, supervise, turns
from agentctl.ops.lease import effective_status, held
from agentctl.store import accounts, asks, batched as batch_rows, events, mailbox, registry, turnlog
from agentctl.text import first_line, host_port


def kernel(conn, agent, now):
    if agent["id"] == INIT_ID:
        return "init: the root of the tree never runs turns"
    return None


def exited(conn, agent, now):
    if not registry.has_exited(agent):
        return None
    how = lifecycle.how(agent)
    code = agent["exit_signal"] or agent["exit_code"]
    state = "a zombie, not yet collected (agent-wait)" if agent["status"] == "Z" else "dead"
    return f"exited: {how} ({code}) {age(now - agent['exited_at'])} ago; {state}"


def claimed(conn, agent, now):
    if agent["status"] != "R" or not held(agent, now):
        return None
    host, _, pid = (agent["lease_owner"] or "").rpartition(":")
    turn = turnlog.open_turn(conn, agent["id"])
    since = f" since {iso(turn['started_at'])}" if turn else ""
    return f"running: claimed by a run on host {host} pid {pid}{since}"


def stopped(conn, agent, now):
    if effective_status(agent, now) != "T":
        return None
    return "stopped: by STOP (agent-kill -s CONT resumes it)"


def paused(conn, agent, now):
    if agent["status"] != "P":
        return None
    waiting = asks.pending(conn, agent["id"])
    if not waiting:
        return "paused: its request was decided; the next run resumes it"
    first = waiting[0]
    return (f"paused: request {first['id']} ({first['kind']}) asked "
            f"{age(now - first['created_at'])} ago waits for an answer (agent-answer)")


def batched(conn, agent, now):
    """Its turn's model call waits in a provider's batch (agentctl(7), TIERS)."""
    if registry.has_exited(agent):
        return None
    row = batch_rows.waiting(conn, agent["id"])
    if row is None:
        return None
    if row["state"] == "queued":
        return (f"batch: model call queued {age(now - row['created_at'])} ago, to be sent "
                "by the next agent-run --all")
    if row["state"] == "sending":
        return f"batch: model call being sent (for {age(now - row['sent_at'])})"
    status = f"{row['status']}, polled {age(now - row['polled_at'])} ago" \
        if row["polled_at"] else "not polled yet"
    return (f"batch: model call submitted {age(now - row['sent_at'])} ago in batch "
            f"{row['batch']} ({status}); agent-run --all collects it")


def budget_spent(conn, agent, now):
    acc = budget.account(conn, agent)
    if not budget.is_exhausted(acc) or _pending(conn, agent, now)["resume"]:
        return None     # (an open turn is resumed all the same, to end over budget)
    owner = "" if acc["id"] == agent["id"] else f" (account of {registry.label(acc)})"
    return f"budget spent{owner}: {budget.words(acc)} (agent-set budget=N raises it)"


def held_after_failure(conn, agent, now):
    if agent["held_at"] is None or mailloop.looping(agent) or supervise.cause_gone(agent):
        return None
    return (f"held after a failure {age(now - agent['held_at'])} ago: "
            f"{_line(agent['last_failure'])} (agent-run {registry.label(agent)} tries "
            f"again; agent-kill -s CONT {registry.label(agent)}, a change by agent-set, or "
            "a change of what its model is given (a key, a URL) lets --all)")


def held_in_a_loop(conn, agent, now):
    """Held for a mail loop (ops.mail.stop_loop): with whom and why, its loop event's
    line (that event pruned: only since when)."""
    if not mailloop.looping(agent):
        return None
    me, found = registry.label(agent), events.latest(conn, agent["id"], "loop")
    peer = found and registry.get(conn, found.get("peer"))
    line = eventkinds.line("loop", found, None, lambda i: registry.label(registry.get(
        conn, i))) if peer else "held in a mail loop"
    both = f"{me} {registry.label(peer)}" if peer else me
    return (f"{line}, {age(now - agent['held_at'])} ago (agent-kill -s CONT {both} lets "
            f"--all run them again; agent-set {me} mail_loop=N/DURATION, or mail_loop=off, "
            "changes the check)")


def backing_off(conn, agent, now):
    if agent["retry_at"] is None or agent["retry_at"] <= now:
        return None
    return (f"backing off until {iso(agent['retry_at'])} ({until(agent['retry_at'], now)}) "
            f"after {agent['failures']} failure(s): {_line(agent['last_failure'])}")


def provider(conn, agent, now):
    """Its endpoint can't be called now (agent-run(1), Providers), when its run waits for
    it or it has input a run would take."""
    seen = dict(agent, status=effective_status(agent, now))
    if not endpoints.wants_call(seen, lambda: turns.has_input(_pending(conn, agent, now))):
        return None
    wait = endpoints.waiting(conn, agent, now)
    if wait is None:
        return None
    return f"waiting for its provider: {wait.endpoint.partition('#')[0]}: {wait.text}"


def nothing_pending(conn, agent, now):
    if not _idle(conn, agent, now):
        return None
    return "nothing pending: no prompt, no unread mail, no due timer"


def deferred_mail(conn, agent, now):
    """What it waits for, when nothing is pending: mail coming due."""
    due = mailbox.next_deferred(conn, agent["id"])
    if due is None or not _idle(conn, agent, now):
        return None
    return f"deferred mail due at {iso(due)} ({until(due, now)})"


def timer(conn, agent, now):
    """What it waits for, when nothing is pending: its timer."""
    if agent["wake_at"] is None or not _idle(conn, agent, now):
        return None
    return f"timer: sleeping until {iso(agent['wake_at'])} ({until(agent['wake_at'], now)})"


def _pending(conn, agent, now):
    """What a turn of it would take now (turns.pending: the counts agent-ps and --all
    read in bulk)."""
    return turns.pending(conn, agent["id"], now)


def _idle(conn, agent, now):
    """Alive with nothing a turn would take (so not a due timer)."""
    return registry.is_live(agent) and not turns.has_input(_pending(conn, agent, now))


REASONS = [kernel, exited, claimed, stopped, paused, batched, budget_spent, held_after_failure,
           held_in_a_loop, backing_off, provider, nothing_pending, deferred_mail, timer]


def reasons(conn, agent, now):
    """Every reason's line that holds for `agent` now, in REASONS' order."""
    return [line for line in (reason(conn, agent, now) for reason in REASONS) if line]


def ready(conn, agent, now):
    """Whether `agent-run --all` would start (or resume) a turn of it now (run in this
    environment: a hold whose cause looks gone here is let go first)."""
    return turns.would_run(_pending(conn, agent, now), now, accounts.exhausted_ids(conn),
                           supervise.cause_gone(agent))


def verdict(conn, row, now):
    """What agent-why says of the agent of `row` (as stored): (its lines, whether
    agent-run --all would start or resume a turn of it now: its exit status 0). The
    lines are every reason it runs no turn, as agent-ps sees it (a grace period that has
    ended is the exit its KILL makes), or what its next turn would take; then, when the
    last connection its tools tried was refused, that (it may explain a failure)."""
    parent = registry.get(conn, row["parent_id"]) if row["parent_id"] else None
    seen = proctable.seen(dict(row) | {"parent_status": parent and parent["status"]}, now)
    lines = reasons(conn, seen, now)
    would = not lines and ready(conn, row, now)
    if not lines:
        lines = [pending(conn, row, now)]
        if would and row["held_at"] is not None:
            lines.append(f"held after a failure {age(now - row['held_at'])} ago: "
                         f"{_line(row['last_failure'])}; what its model is given has changed "
                         "since (a key, a URL, a model), so the next agent-run --all run so "
                         "tries it again")
    refused = refused_connection(conn, row)
    merge = pending_merge(conn, row)
    return lines + [x for x in (refused, merge) if x], would


def unmerged(conn, agent):
    """What agent-merge would still take of its workspace (agentctl(7), WORKSPACES):
    (paths, of them in conflict, its plan), or None when nothing (or it has no layer)."""
    from agentctl.workspace import changed, plan  # (start-up: 3 ms, only for a layer's)
    try:
        views = changed.views(conn, agent, "fork")
    except (NotFound, Refused):
        return None
    made = plan.make(conn, agent, views)
    count = len(made.steps) + len(made.conflicts)
    return (count, len(made.conflicts), made) if count else None


def pending_merge(conn, agent):
    """unmerged() as agent-why's line; None when nothing."""
    found = unmerged(conn, agent)
    if found is None:
        return None
    count, conflicts, made = found
    name = registry.label(agent)
    into = "the real directory" if made.target == "base" else \
        f"{registry.label(registry.get(conn, made.parent))}'s layer"
    return (f"its workspace holds {count} path{'s' if count != 1 else ''} not merged into "
            f"{into}" + (f", {conflicts} in conflict" if conflicts else "")
            + f" (agent-diff {name}; agent-merge {name}, or agent-diff --discard {name})")


def refused_connection(conn, agent):
    """The last connection its tools tried through the egress proxy, when it was refused
    (agentctl(7), NETWORK), as a line; else None."""
    found = events.latest(conn, agent["id"], "net")
    if not found or found.get("outcome") != "refused":
        return None
    host, port = found.get("host", ""), found.get("port")
    return (f"its tools' last connection was refused{_turn(found)}: {host_port(host, port)}: "
            f"{found.get('reason')} (agent-log --kind net {registry.label(agent)}; "
            f"agent-set {registry.label(agent)} net=... gives hosts)")


def _turn(found):
    return f" (turn {found['turn']}, by {found.get('tool')})" if found.get("turn") else ""


def pending(conn, agent, now):
    """What a turn would take now, as a line: 'pending: 1 prompt, 2 unread mail ...'."""
    found = _pending(conn, agent, now)
    prompts = found["prompts"]
    parts = [f"{prompts} prompt{'s' if prompts > 1 else ''}"] if prompts else []
    if found["mail"]:
        parts.append(f"{found['mail']} unread mail")
    if found["due"]:
        parts.append("a due timer")
    if found["resume"]:
        parts.append("an open turn to resume")
    return "pending: " + (", ".join(parts) or "nothing")


def _line(text):
    return first_line(text or "no error recorded", 200)
