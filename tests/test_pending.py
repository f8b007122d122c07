"""What a turn of an agent would take, and whether agent-run --all would start one, are
each one rule (store.pending, turns.would_run), asked one agent at a time (agent-why,
agent-run AGENT, an idle exit) and in bulk (agent-run --all's list, agent-ps's provider
column). Held equal here over random databases: every state those rules read (statuses,
leases alive and dead, signals waiting, grace periods ended, timers due and not, mail
read, unread and deferred, prompts taken, voided and pending, turns open and ended,
held and backing-off agents, accounts exhausted, shared or not): a new random tree
each round in the test's database, with a seeded random.Random so that a failure names
the seed that makes it again. (A provider's wait is its endpoint's, not these rules':
tests/test_endpoints.py.)"""

import random

import pytest

from agentctl import clock
from agentctl.ids import INIT_ID, new_id
from agentctl.ops import turns, why
from agentctl.store import accounts, history, mailbox, registry, turnlog
from agentctl.store.db import transaction

ROUNDS = 60
ELSEWHERE = "another-host:1"        # a lease's holder whose process this host can't probe


def some_time(rnd, now):
    """Past, future, or exactly now (a boundary both forms must agree on)."""
    return rnd.choice([now - rnd.uniform(1, 5000), now + rnd.uniform(1, 5000), now])


def world(conn, rnd, now):
    """A random tree of agents under init, in random states; their ids."""
    made = []
    for _ in range(rnd.randint(3, 9)):
        parent = registry.get(conn, rnd.choice(made + [INIT_ID]))
        agent_id = new_id()
        own = rnd.random() < 0.3
        registry.insert(conn, id=agent_id, parent_id=parent["id"], forked_from=parent["id"],
                        depth=parent["depth"] + 1, model="echo",
                        budget=rnd.randint(0, 50) if own else None,
                        budget_id=agent_id if own else parent["budget_id"])
        if own:
            accounts.spend(conn, agent_id, rnd.randint(0, 60))
        made.append(agent_id)
    for agent_id in made:
        status = rnd.choice("SSSSSSRRRTPZX")
        fields = {"status": status}
        if status == "R":
            fields.update(lease_owner=rnd.choice([ELSEWHERE, None]),
                          lease_until=now + rnd.choice([-60, 60]),
                          pending_signal=rnd.choice([None, None, "STOP", "TERM", "KILL"]))
        if status in "ZX":
            fields.update(exited_at=now - rnd.uniform(0, 200000), exit_code=0,
                          reap_after=rnd.choice([None, 10.0, 10 ** 7]))
        elif rnd.random() < 0.15:
            fields["kill_at"] = some_time(rnd, now)
        if rnd.random() < 0.4:
            fields["wake_at"] = some_time(rnd, now)
        if rnd.random() < 0.25:
            fields.update(retry_at=some_time(rnd, now), failures=rnd.randint(1, 4))
        if rnd.random() < 0.15:     # after a failure, or in a mail loop (looped_at)
            held = now - rnd.uniform(1, 500)
            fields.update(held_at=held, last_failure="the API said no",
                          looped_at=rnd.choice([None, held, held - 1000]))
        registry.update(conn, agent_id, **fields)
        for _ in range(rnd.choice([0, 0, 1, 2])):
            turn = turnlog.insert(conn, agent_id, "echo", now - rnd.uniform(1, 500))
            taken = history.append(conn, agent_id, "user", "a prompt taken")
            history.give_to_turn(conn, [taken], turn)
            first = history.append(conn, agent_id, "assistant", "a reply", turn_id=turn)
            how = rnd.choice(["open", "done", "void"])
            if how == "void":           # its prompt pending again, its messages void
                history.void_turn(conn, turn, first)
            if how != "open":
                turnlog.finish(conn, turn, "done" if how == "done" else "killed")
        for _ in range(rnd.choice([0, 0, 0, 1, 2])):
            history.append(conn, agent_id, "user", "a prompt")
        for _ in range(rnd.choice([0, 0, 1, 3])):
            to = rnd.choice(made + [INIT_ID])
            mail = mailbox.insert(conn, rnd.choice(made + [None]), to, "hello",
                                  deliver_at=rnd.choice([None, now - 100, now + 3600]))
            if rnd.random() < 0.3:
                mailbox.mark_read(conn, [mail])
    return made


def test_one_agent_and_every_agent_get_the_same_answers(conn):
    for seed in range(ROUNDS):
        rnd = random.Random(seed)
        now = clock.now()
        with transaction(conn):
            made = world(conn, rnd, now)
        bulk = turns.inputs(conn, now)              # agent-ps's provider column reads it
        listed = set(turns.runnable(conn, now))     # agent-run --all's list
        for agent_id in made + [INIT_ID]:
            row = registry.get(conn, agent_id)
            state = f"seed {seed}: {dict(row)}"
            one = turns.pending(conn, agent_id, now)    # agent-why's, agent-run's
            if row["status"] in ("S", "R"):
                assert dict(bulk[agent_id]) == dict(one), state
            else:
                assert agent_id not in bulk, state
            assert turns.has_pending_input(conn, row, now) == turns.has_input(one), state
            lines, ready = why.verdict(conn, row, now)
            assert ready == (agent_id in listed), f"{state}: agent-why says {lines}"
            # a reason exactly when it would not run; else what the turn would take
            assert lines[0].startswith("pending: ") == ready, f"{state}: {lines}"
            assert (lines == ["pending: nothing"]) == (ready and not turns.has_input(one))


@pytest.mark.parametrize("how", ["prompt", "deferred mail", "timer"])
def test_agent_why_names_what_an_agent_waits_for_only_when_nothing_else_is_pending(conn, how):
    """A timer or mail coming due is a reason a run starts no turn only while nothing
    else is pending: agent-why said "timer: sleeping until ..." (exit 1) of an agent
    with a prompt, which agent-run --all ran."""
    now = clock.now()
    with transaction(conn):
        agent_id = new_id()
        registry.insert(conn, id=agent_id, parent_id=INIT_ID, forked_from=INIT_ID, depth=1,
                        model="echo")
        registry.update(conn, agent_id, wake_at=now + 3600)
        mailbox.insert(conn, None, agent_id, "later", deliver_at=now + 7200)
        if how == "prompt":
            history.append(conn, agent_id, "user", "go")
    lines, ready = why.verdict(conn, registry.get(conn, agent_id), now)
    if how == "prompt":
        assert (lines, ready) == (["pending: 1 prompt"], True)
        assert turns.runnable(conn, now) == [agent_id]
    else:
        assert not ready and lines[0].startswith("nothing pending: ")
        assert [line.split(" ")[0] for line in lines[1:]] == ["deferred", "timer:"]
