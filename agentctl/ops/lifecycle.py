"""The life of an agent (agentctl(7), LIFECYCLE): fork, exit with reparenting and
the parent's notice, waiting for children, and collecting them (reaping: Z -> X)."""

import time

from agentctl import clock, env, modelspec, settings, voice
from agentctl.errors import Refused, UsageError
from agentctl.ids import ROLES, is_name, new_id
from agentctl.ops import asks, budget, confinement, mail
from agentctl.store import events, history, registry
from agentctl.workspace import layers
from agentctl.store.db import transaction
from agentctl.store.waits import wait_for_commit


def check_name(conn, name):
    if not is_name(name):
        raise UsageError(f"bad name: {name!r} (want [a-z][a-z0-9._-]*, at most 64)")
    holder = registry.name_holder(conn, name)
    if holder is not None:
        raise Refused(f"name already taken: {name} (by {holder})")
    other = registry.prefixed(conn, name)
    if other is not None:
        raise Refused(f"name {name} is a prefix of the id {other}: it would shadow that agent")


def check_role(role):
    if role not in ROLES:
        raise UsageError(f"unknown role: {role} (one of {', '.join(ROLES)})")


DEFAULT_MAX_DEPTH = 256


def max_depth():
    return int(env.number("AGENTCTL_MAX_DEPTH", DEFAULT_MAX_DEPTH, minimum=1, whole=True))


DEFAULT_REAP_AFTER = 86400.0


def reap_after(agent):
    """Seconds after its exit when a zombie nobody collected is reaped: its
    --reap-after, else $AGENTCTL_REAP_AFTER, else a day."""
    if agent["reap_after"] is not None:
        return agent["reap_after"]
    return env.duration("AGENTCTL_REAP_AFTER", DEFAULT_REAP_AFTER)


def overdue(agent, now=None):
    """What a deadline that has passed makes of the agent, before a writing program
    carries it out (ops.deadlines): 'KILL' (its grace period ended), 'reap' (a
    zombie nobody collected in time), or None."""
    now = clock.now() if now is None else now
    if registry.is_live(agent) and agent["kill_at"] is not None and agent["kill_at"] <= now:
        return "KILL"
    if agent["status"] == "Z" and agent["exited_at"] + reap_after(agent) <= now:
        return "reap"
    return None


def check_options(options, model):
    """Model options (KEY=VALUE texts, or as stored: one a line) checked against what
    `model` takes (modelspec.OPTIONS): as stored, or None for none."""
    if isinstance(options, str):
        options = settings.listed(options)
    if not options:
        return None
    modelspec.parse_options(options, model)
    last = {line.partition("=")[0].strip(): line.strip() for line in options}  # the last wins
    return settings.listing(last.values())


def check_limits(conn, parent):
    """Refused (exit 3; a tool error for a model) when a fork of `parent` would go
    beyond its --max-children or the tree's depth limit."""
    limit = parent["max_children"]
    if limit is not None and len(registry.children(conn, parent["id"])) >= limit:
        raise Refused(f"{registry.label(parent)}: can't fork: it has {limit} children alive "
                      f"or not yet collected (--max-children {limit})")
    if parent["depth"] + 1 > max_depth():
        raise Refused(f"{registry.label(parent)}: can't fork: the tree would be deeper than "
                      f"AGENTCTL_MAX_DEPTH={max_depth()} forks")


def fork(conn, parent, *, name=None, at=None, prompt=None, actor=None, tool_names=None,
         trace=None, **given):
    """Create a child of `parent`; returns its id. Writes a constant number of
    rows whatever the history's length: nothing is copied. `given` are the child's
    settings by keyword (agentctl.settings: role, model, system, budget ...);
    each one not given is what its rule there says (the parent's, the role's, none).
    With `budget` (a settings.Budget, or a number of tokens), the child gets its
    own account, carved out of the parent's (agentctl(7)). `trace` is the traceparent
    of the span that forks it, if one does."""
    values = settings.child(parent, given)
    if not registry.is_live(parent):
        raise Refused(f"{registry.label(parent)}: can't fork: it is "
                      f"{registry.STATUS_WORDS[parent['status']]}")
    if parent["role"] == "task":
        raise Refused(f"{registry.label(parent)}: a task can't fork")
    check_role(values["role"])
    if values["restart"] not in settings.RESTART_POLICIES:
        raise UsageError(f"unknown restart policy: {values['restart']} "
                         f"(one of {', '.join(settings.RESTART_POLICIES)})")
    check_limits(conn, parent)
    confinement.settle(conn, parent, given, values, actor, tool_names)
    values["options"] = check_options(values["options"], values["model"])
    if name is not None:
        check_name(conn, name)
    if at is None:
        point = history.latest(conn, parent)
    elif history.in_context(conn, parent, at):
        point = at
    else:
        raise UsageError(f"message {at} is not in the context of {registry.label(parent)} "
                         f"(see agent-replay {registry.label(parent)})")
    own = values.pop("budget")
    if own is not None:
        own = budget.carve(conn, parent, own)
    # The trace its turns continue: the span that forked it (the fork tool's, in a traced
    # turn), else its parent's (agent-run(1), TRACING).
    values["trace"] = trace or parent["trace"]
    child = new_id()
    registry.insert(
        conn, id=child, name=name, parent_id=parent["id"], forked_from=parent["id"],
        fork_msg_id=point, depth=parent["depth"] + 1,
        budget_id=parent["budget_id"] if own is None else child,
        budget=own and own.amount, budget_unit=own and own.unit, **values)
    layers.forked(conn, parent, child, values)
    if prompt is not None:
        history.append(conn, child, "user", prompt)
    events.record(conn, child, "fork", actor, parent=parent["id"], at=point,
                  role=values["role"], model=values["model"])
    return child


def exit(conn, agent, *, code, signal=None, result=None, actor=None, dying=()):
    """End `agent`: a zombie while its lifecycle parent lives (until
    agent-wait collects it), dead otherwise. Its children go to the nearest
    live ancestor; the parent is told by mail. A clear still waiting for a
    turn (HUP) is recorded. `dying` holds the ids exiting together (a
    cascade): they don't count as live parents or heirs."""
    history.clear_if_pending(conn, agent["id"])     # no turn to wait for any more
    asks.end_all(conn, agent["id"], "cancelled", voice.AGENT_EXITED)
    parent = registry.get(conn, agent["parent_id"])
    status = becomes(parent, dying)
    registry.update(conn, agent["id"], status=status, exited_at=clock.now(), exit_code=code,
                    exit_signal=signal, result=result, wake_at=None, kill_at=None)
    events.record(conn, agent["id"], "exit", actor, code=code, signal=signal, status=status)
    budget.give_back(conn, registry.get(conn, agent["id"]))
    orphans = [o for o in registry.children(conn, agent["id"]) if o not in dying]
    if orphans:
        heir = registry.nearest_live_ancestor(conn, agent, dying)
        for orphan in orphans:
            registry.update(conn, orphan, parent_id=heir["id"])
            events.record(conn, orphan, "reparent", actor, old=agent["id"], new=heir["id"])
    if status == "Z":
        mail.notify_exit(conn, registry.get(conn, agent["id"]))
    return status


def becomes(parent, dying=()):
    """What an agent that exits becomes: a zombie (Z) while its lifecycle parent
    lives to collect it, else dead (X). A parent in `dying` collects nothing."""
    return "Z" if registry.is_live(parent) and parent["id"] not in dying else "X"


def how(agent):
    """'exited', 'failed' or 'killed'."""
    if agent["exit_signal"]:
        return "killed"
    return "exited" if agent["exit_code"] == 0 else "failed"


def collect(conn, agent_id, actor=None, by="wait"):
    """Reap a zombie (Z -> X), in the caller's transaction: its exit status and
    result stay in the table. `by` is wait (a waiter collected it) or deadline
    (nobody did, within --reap-after)."""
    if registry.change_status(conn, agent_id, "Z", "X"):
        events.record(conn, agent_id, "reap", actor, by=by)


def wait(conn, ids, *, timeout=None, any_one=False, actor=None, reap_them=True, until=None,
         tick=None, next_due=None):
    """Wait for the agents `ids` to exit, reap them (unless not `reap_them`),
    and return (their rows in exit order, ids still running). `until()` true
    ends the wait early (the waiter was killed); `tick()` runs before each look
    (deadlines to carry out), `next_due()` says when to look though nothing was
    committed. A waiting loop opens its own transactions: each reap is committed
    as it is found."""
    deadline = time.monotonic() + (timeout if timeout is not None else 10 ** 9)
    pending = list(dict.fromkeys(ids))
    collected = []

    def sweep():
        if tick is not None:
            tick()
        for agent_id in list(pending):
            if registry.has_exited(registry.get(conn, agent_id)):
                pending.remove(agent_id)
                if reap_them:
                    with transaction(conn):
                        collect(conn, agent_id, actor)
                collected.append(registry.get(conn, agent_id))
        return not pending or (any_one and collected) or (until is not None and until())

    wait_for_commit(conn, deadline, sweep, next_due=next_due)
    return collected, pending
