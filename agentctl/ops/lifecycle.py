"""The life of an agent (agentctl(7), LIFECYCLE): fork, exit with reparenting and
the parent's notice, waiting for children, and collecting them (reaping: Z -> X)."""

import time

from agentctl import clock, env, voice
from agentctl.errors import Refused, UsageError
from agentctl.ids import NAME_RE, ROLES, new_id
from agentctl.ops import asks, budget, mail
from agentctl.store import events, history, registry
from agentctl.store.db import transaction, wait_for_commit


def check_name(conn, name):
    if not NAME_RE.match(name):
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


RESTART_POLICIES = ("never", "on-failure", "always")
DEFAULT_MAX_RESTARTS = 5
DEFAULT_RESTART_WINDOW = 3600.0
DEFAULT_MAX_DEPTH = 256
WORKER_MAX_CHILDREN = 4         # "a worker manages at most a few children"


def default_restart(role):
    """The role table's restart policy: a daemon is restarted, the others are not
    (their parent is told, and decides)."""
    return "always" if role == "daemon" else "never"


def max_depth():
    return int(env.number("AGENTCTL_MAX_DEPTH", DEFAULT_MAX_DEPTH, minimum=1, whole=True))


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


def fork(conn, parent, *, name=None, role="agent", model=None, system=None,
         at=None, prompt=None, actor=None, context_window=None, budget_tokens=None,
         restart=None, max_restarts=None, restart_window=None, reap_after=None,
         idle_exit=None, max_children=None, allow=None, ask=None, cwd=None,
         tool_names=None):
    """Create a child of `parent`; returns its id. Writes a constant number of
    rows whatever the history's length: nothing is copied. With `budget_tokens`,
    the child gets its own account, carved out of the parent's (agentctl(7)).
    Unset, --reap-after and --max-children are the parent's (a worker's
    max-children is 4), the restart policy the role's."""
    if not registry.is_live(parent):
        raise Refused(f"{registry.label(parent)}: can't fork: it is "
                      f"{registry.STATUS_WORDS[parent['status']]}")
    if parent["role"] == "task":
        raise Refused(f"{registry.label(parent)}: a task can't fork")
    check_role(role)
    if restart is not None and restart not in RESTART_POLICIES:
        raise UsageError(f"unknown restart policy: {restart} "
                         f"(one of {', '.join(RESTART_POLICIES)})")
    check_limits(conn, parent)
    if allow or ask:    # (here: a fork without grants, most of them, never needs it)
        from agentctl.ops import grants
        allow, ask = grants.check(allow, "--allow"), grants.check(ask, "--ask")
        if allow and tool_names is not None:
            grants.check_fork(conn, parent, allow, *tool_names())
    allow, ask = allow or None, ask or None
    if name is not None:
        check_name(conn, name)
    if at is None:
        point = history.latest(conn, parent)
    elif history.in_context(conn, parent, at):
        point = at
    else:
        raise UsageError(f"message {at} is not in the context of {registry.label(parent)} "
                         f"(see agent-replay {registry.label(parent)})")
    if budget_tokens is not None:
        budget.carve(conn, parent, budget_tokens)
    child = new_id()
    if max_children is None:
        max_children = WORKER_MAX_CHILDREN if role == "worker" else parent["max_children"]
    registry.insert(
        conn, id=child, name=name, parent_id=parent["id"], forked_from=parent["id"],
        fork_msg_id=point, role=role,
        model=model if model is not None else parent["model"],
        system_prompt=system if system is not None else parent["system_prompt"],
        context_window=context_window if context_window is not None
        else parent["context_window"],
        budget=budget_tokens, budget_id=parent["budget_id"] if budget_tokens is None else child,
        restart=restart or default_restart(role), max_restarts=max_restarts,
        restart_window=restart_window, idle_exit=idle_exit, max_children=max_children,
        reap_after=reap_after if reap_after is not None else parent["reap_after"],
        depth=parent["depth"] + 1, allow=allow, ask=ask,
        cwd=cwd if cwd is not None else parent["cwd"])
    if prompt is not None:
        history.append(conn, child, "user", prompt)
    events.record(conn, child, "fork", f"{parent['id']} {point}", actor, parent=parent["id"],
                  at=point, role=role, model=model if model is not None else parent["model"])
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
    collector = parent if registry.is_live(parent) and parent["id"] not in dying else None
    status = "Z" if collector is not None else "X"
    registry.update(conn, agent["id"], status=status, exited_at=clock.now(), exit_code=code,
                    exit_signal=signal, result=result, wake_at=None, kill_at=None)
    how_ = f"killed by {signal}" if signal else f"exited {code}"
    events.record(conn, agent["id"], "exit", how_, actor, code=code, signal=signal, status=status)
    budget.give_back(conn, registry.get(conn, agent["id"]))
    orphans = [o for o in registry.children(conn, agent["id"]) if o not in dying]
    if orphans:
        heir = registry.nearest_live_ancestor(conn, agent, dying)
        for orphan in orphans:
            registry.update(conn, orphan, parent_id=heir["id"])
            events.record(conn, orphan, "reparent", f"{agent['id']} {heir['id']}", actor,
                          old=agent["id"], new=heir["id"])
    if collector is not None:
        mail.notify_exit(conn, registry.get(conn, agent["id"]), collector)
    return status


def how(agent):
    """'exited', 'failed' or 'killed'."""
    if agent["exit_signal"]:
        return "killed"
    return "exited" if agent["exit_code"] == 0 else "failed"


def reap(conn, agent_id, actor=None, by="wait"):
    """Collect a zombie: its exit status and result stay in the table."""
    with transaction(conn):
        collect(conn, agent_id, actor, by)
    return registry.get(conn, agent_id)


def collect(conn, agent_id, actor=None, by="wait"):
    """Reap within the caller's transaction; `by` is wait (a waiter collected it) or
    deadline (nobody did, within --reap-after)."""
    if registry.change_status(conn, agent_id, "Z", "X"):
        events.record(conn, agent_id, "reap", None, actor, by=by)


def wait(conn, ids, *, timeout=None, any_one=False, actor=None, reap_them=True, until=None,
         tick=None, next_due=None):
    """Wait for the agents `ids` to exit, reap them (unless not `reap_them`),
    and return (their rows in exit order, ids still running). `until()` true
    ends the wait early (the waiter was killed); `tick()` runs before each look
    (deadlines to carry out), `next_due()` says when to look though nothing was
    committed."""
    deadline = time.monotonic() + (timeout if timeout is not None else 10 ** 9)
    pending = list(dict.fromkeys(ids))
    collected = []

    def sweep():
        if tick is not None:
            tick()
        for agent_id in list(pending):
            if registry.has_exited(registry.get(conn, agent_id)):
                pending.remove(agent_id)
                collected.append(reap(conn, agent_id, actor) if reap_them
                                 else registry.get(conn, agent_id))
        return not pending or (any_one and collected) or (until is not None and until())

    wait_for_commit(conn, deadline, sweep, next_due=next_due)
    return collected, pending
