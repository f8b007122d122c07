"""agent-kill: signals, cascade, zombies, reparenting, events."""

import json
import time

import pytest

from agentctl.store import registry
from agentctl.ops import lease
from agentctl.ids import INIT_ID

from .conftest import (PATIENCE, Result, agent, asleep_at_database, events, fork, script,
                       started, status, wait_until)
from .fakeapi import fakeapi, slow_turn  # noqa: F401 (a fixture)
from .test_run import kinds


def test_term_makes_a_zombie_of_an_operators_agent(conn):
    a = fork("-n", "a")
    result = agent("kill", "a")
    assert (result.code, result.out, result.err) == (0, "", "")
    row = registry.get(conn, a)
    assert (row["status"], row["exit_code"], row["exit_signal"]) == ("Z", 143, "TERM")
    assert events(conn, a, "signal", "detail", "actor_id") == [("TERM", None)]


def test_child_of_a_dead_parent_dies_without_zombie(conn):
    fork("-n", "p")
    c = fork("-p", "p", "-n", "c")
    agent("kill", "-s", "KILL", "p")
    agent("wait", "p")
    agent("kill", "c")
    # c was reparented to init when p exited, so it is init's zombie now
    assert registry.get(conn, c)["parent_id"] == INIT_ID
    assert status(conn, "c") == "Z"


def test_exit_notifies_the_lifecycle_parent(conn):
    fork("-n", "lead")
    w = fork("-p", "lead", "-n", "w")
    agent("kill", "w")
    assert status(conn, "w") == "Z"
    mail = conn.execute("SELECT sender_id, kind, body FROM mail WHERE recipient_id = "
                        "(SELECT id FROM agents WHERE name = 'lead')").fetchall()
    assert [tuple(m)[:2] for m in mail] == [(w, "exit")]
    assert mail[0]["body"] == f"w ({w}) was killed by TERM; exit status 143"
    # children of init notify no one
    assert conn.execute("SELECT count(*) FROM mail WHERE recipient_id = ?", (INIT_ID,)).fetchone()[0] == 0


def test_cascade_kills_the_whole_tree_and_only_the_top_is_a_zombie(conn, monkeypatch):
    monkeypatch.setenv("AGENTCTL_MAX_DEPTH", "1000")    # deeper than the default limit
    top = fork("-n", "top")
    chain = [top]
    for _ in range(300):                      # no depth cap in the cascade
        chain.append(fork("-p", chain[-1]))
    side = fork("-p", "top")
    assert agent("kill", "--cascade", "top").code == 0
    assert status(conn, "top") == "Z"
    assert {registry.get(conn, i)["status"] for i in chain[1:] + [side]} == {"X"}
    # nobody was told but init's collector (the operator): no mail to the dead
    assert conn.execute("SELECT count(*) FROM mail").fetchone()[0] == 0


def test_orphans_go_to_the_nearest_live_ancestor(conn):
    g = fork("-n", "g")
    p = fork("-p", "g", "-n", "p")
    c1 = fork("-p", "p")
    c2 = fork("-p", "p")
    agent("kill", "p")
    for c in (c1, c2):
        assert registry.get(conn, c)["parent_id"] == g
        assert events(conn, c, "reparent", "detail", "actor_id") == [(f"{p} {g}", None)]
    # the history parent never changes
    assert registry.get(conn, c1)["forked_from"] == p


def test_stop_and_cont(conn):
    fork("-n", "a")
    assert agent("kill", "-s", "STOP", "a").code == 0
    assert status(conn, "a") == "T"
    assert agent("kill", "-s", "sigcont", "a").code == 0
    assert status(conn, "a") == "S"
    assert agent("kill", "-s", "19", "a").code == 0
    assert status(conn, "a") == "T"


def test_hup_records_a_clear_and_replay_skips_what_came_before(conn):
    fork("-n", "a", "-m", "echo", "old context")
    assert agent("run", "a").code == 0
    assert agent("kill", "-s", "HUP", "a").code == 0
    assert agent("replay", "a").out == ""
    kinds = [r[0] for r in conn.execute("SELECT kind FROM messages ORDER BY id")]
    assert kinds == ["user", "assistant", "clear"]


def test_hup_keeps_a_prompt_that_waits_for_its_turn(conn):
    """A prompt not yet taken is input, not conversation: the clear must not
    leave the next turn with nothing to send. Nor may it change what a child
    forked before the HUP inherited."""
    fork("-n", "a", "-m", "echo", "the task")
    fork("-p", "a", "-n", "kid")
    assert agent("kill", "-s", "HUP", "a").code == 0
    assert agent("replay", "a").out == ""
    assert agent("replay", "kid").out.endswith("user @a\n  the task\n")
    assert agent("run", "a").out == "the task\n"
    assert agent("run", "a").code == 1                # taken once, not twice
    rows = [tuple(r) for r in conn.execute("SELECT kind, content, void FROM messages "
                                           "WHERE agent_id = (SELECT id FROM agents "
                                           "WHERE name = 'a') ORDER BY id")]
    assert rows == [("user", "the task", 0), ("clear", "HUP", 0), ("user", "the task", 0),
                    ("assistant", "the task", 0)]
    assert agent("replay", "kid").out.endswith("user @a\n  the task\n")


def test_init_cant_be_killed_but_cascade_reaches_its_children(conn):
    a = fork("-n", "a")
    result = agent("kill", "init")
    assert (result.code, result.err) == (3, "agent-kill: init can't be killed\n")
    assert agent("kill", "-s", "STOP", "init").code == 3
    result = agent("kill", "--cascade", "init")
    assert result.code == 3
    assert result.err == "agent-kill: init can't be killed (its descendants were signalled: 1)\n"
    assert status(conn, "init") == "S" and registry.get(conn, a)["status"] == "Z"


def test_errors_and_stdin():
    a = fork("-n", "a")
    b = fork("-n", "b")
    result = agent("kill", "-s", "BOGUS", "a")
    assert (result.code, result.err) == (2, "agent-kill: unknown signal: BOGUS (one of HUP, KILL, TERM, CONT, STOP)\n")
    result = agent("kill", "nobody", "a")
    assert (result.code, result.err) == (1, "agent-kill: no such agent: nobody\n")
    result = agent("kill", "a")
    assert (result.code, result.err) == (3, "agent-kill: a: already exited\n")
    result = agent("kill", stdin=f"{b}\n")
    assert result.code == 0
    assert agent("kill") == Result(0, "", "")      # an empty pipe: nothing to signal
    assert a != b


def test_actor_is_recorded(conn, monkeypatch):
    boss = fork("-n", "boss")
    w = fork("-p", "boss")
    monkeypatch.setenv("AGENT_ID", boss)
    agent("kill", "-s", "STOP", w)
    assert events(conn, w, "signal", "detail", "actor_id") == [("STOP", boss)]


# -- HUP on an agent whose turn is open (interrupted, or stopped): the clear follows it ----

def interrupted(tmp_path):
    """Agent a with an open turn: its first step called check_mail, the second failed for
    now (exit 75). Returns a function that rewrites what that second step answers."""
    def second_step(reply):
        return script(tmp_path, {"match": "^go$", "steps": [
            {"content": "s0", "tool_calls": [{"name": "check_mail", "arguments": {}}]}, reply]},
            {"reply": {"content": "fallback: no user text"}})
    fork("-n", "a", "-m", second_step({"fail": "tempfail"}), "go")
    assert agent("run", "a").code == 75
    return second_step


def user_texts(ref):
    return [m["content"] for m in json.loads(agent("replay", "--format", "openai", ref).out)
            if m["role"] == "user"]


@pytest.mark.parametrize("stopped", [False, True])
def test_hup_on_an_open_turn_clears_after_it(conn, tmp_path, stopped):
    second_step = interrupted(tmp_path)
    if stopped:
        assert agent("kill", "-s", "STOP", "a").code == 0
    assert agent("kill", "-s", "HUP", "a").code == 0
    assert status(conn, "a") == ("T" if stopped else "S")
    assert user_texts("a") == ["go"], "the open turn keeps its own input"
    assert registry.resolve(conn, "a")["hup_pending"] == 1
    if stopped:
        assert agent("kill", "-s", "CONT", "a").code == 0
    second_step({"content": "done"})
    assert agent("run", "a").out == "done\n"
    assert kinds(conn, "a")[-1] == "clear" and agent("replay", "a").out == ""
    assert registry.resolve(conn, "a")["hup_pending"] == 0


def test_a_hup_waiting_for_a_refused_turn_is_recorded_as_it_ends(conn, tmp_path):
    """A turn refused (exit 69) after a completed step is held open, its step kept:
    the clear that waited for it follows it when it ends."""
    second_step = interrupted(tmp_path)
    assert agent("kill", "-s", "HUP", "a").code == 0
    second_step({"fail": "error"})
    assert agent("run", "a").code == 69
    assert "clear" not in kinds(conn, "a") and registry.resolve(conn, "a")["hup_pending"] == 1
    second_step({"content": "done"})
    assert agent("run", "a").out == "done\n"      # resumed where it failed
    assert kinds(conn, "a")[-1] == "clear" and agent("replay", "a").out == ""
    assert registry.resolve(conn, "a")["hup_pending"] == 0
    assert agent("run", "a").code == 1           # its input was taken, once


def test_a_hup_waiting_for_a_turn_refused_before_any_step_follows_the_next_turn(
        conn, tmp_path):
    """A turn refused at its first call is voided, its prompt pending again (an
    agent restarted on failure): the clear waits for the turn that takes it."""
    model = script(tmp_path, '{"match": "^go$", "steps": [{"fail": "tempfail"}]}')
    fork("-n", "a", "--restart", "on-failure", "-m", model, "go")
    assert agent("run", "a").code == 75
    assert agent("kill", "-s", "HUP", "a").code == 0
    script(tmp_path, '{"match": "^go$", "steps": [{"fail": "error"}]}')
    assert agent("run", "a").code == 69
    assert user_texts("a") == ["go"] and "clear" not in kinds(conn, "a")
    script(tmp_path, '{"match": "^go$", "reply": {"content": "done"}}')
    assert agent("run", "a").out == "done\n"
    assert kinds(conn, "a")[-1] == "clear" and agent("replay", "a").out == ""


@pytest.mark.parametrize("sig", ["KILL", "TERM"])
def test_a_hup_waiting_for_a_turn_is_recorded_when_the_agent_exits(conn, tmp_path, sig):
    interrupted(tmp_path)
    assert agent("kill", "-s", "HUP", "a").code == 0
    assert agent("kill", "-s", sig, "a").code == 0
    row = registry.resolve(conn, "a")
    assert (row["status"], row["hup_pending"]) == ("Z", 0)
    assert kinds(conn, "a")[-1] == "clear" and agent("replay", "a").out == ""


def in_tool_call(conn, agent_id, tool):
    """Wait until the agent's running turn has recorded a call of `tool`: its run has
    claimed it and opened the turn, and runs the call (or is about to)."""
    wait_until(lambda: conn.execute(
        "SELECT 1 FROM messages WHERE agent_id = ? AND kind = 'tool_call' AND tool_name = ?",
        (agent_id, tool)).fetchone(), f"a {tool} call of {agent_id}'s turn")


def test_a_cont_after_a_stop_is_never_lost_while_tool_calls_run(conn, tmp_path):
    """STOP and CONT both reach the run while a step's tool call runs (a wait for a
    child, which ends only when the test ends the child): both agent-kill exit 0, so
    the agent must not be left stopped, and the turn goes on to its end."""
    wait = {"tool_calls": [{"name": "wait", "arguments": {"agents": ["c"], "timeout": 60}}]}
    done = {"content": "done"}          # (also to the mail that says c exited)
    p = fork("-n", "p", "-m", script(tmp_path, {"match": "^go$", "steps": [wait, done]},
                                     {"reply": done}), "go")
    fork("-p", "p", "-n", "c")
    run = started("agent-run", "p")
    in_tool_call(conn, p, "wait")
    assert agent("kill", "-s", "STOP", "p").code == 0
    assert agent("kill", "-s", "CONT", "p").code == 0
    assert agent("kill", "c").code == 0             # the wait ends: the turn goes on
    out, err = run.communicate(timeout=PATIENCE)
    assert (run.returncode, out) == (0, "done\n"), err
    assert status(conn, "p") == "S"


def test_a_cascade_ends_descendants_in_their_turns_at_once(conn, tmp_path):
    """Its descendants die at once (X), are not reparented and notify no one,
    also one whose turn is running: the run writes nothing more and exits 3."""
    wait = {"tool_calls": [{"name": "wait", "arguments": {"agents": ["g"], "timeout": 60}}]}
    fork("-n", "lead")
    q = fork("-p", "lead", "-n", "q")
    c = fork("-p", "q", "-n", "c", "-m", script(tmp_path, {"steps": [wait, {"content": "x"}]}), "go")
    g = fork("-p", "c", "-n", "g")
    run = started("agent-run", "c")
    in_tool_call(conn, c, "wait")               # its turn is running
    assert agent("kill", "--cascade", "q").code == 0
    assert run.wait(timeout=PATIENCE) == 3
    assert run.stderr.read() == \
        "agent-run: c: killed by TERM while this run held it; it wrote nothing more\n"
    assert [status(conn, a) for a in (q, c, g)] == ["Z", "X", "X"]
    assert [registry.get(conn, a)["parent_id"] for a in (c, g)] == [q, c]
    assert conn.execute("SELECT count(*) FROM events WHERE kind = 'reparent'").fetchone()[0] == 0
    assert [r[0] for r in conn.execute("SELECT sender_id FROM mail")] == [q]
    assert conn.execute("SELECT status FROM turns").fetchall()[0][0] == "killed"
    assert conn.execute("SELECT count(*) FROM messages WHERE agent_id = ? AND kind = "
                        "'tool_result'", (c,)).fetchone()[0] == 0


def test_a_cascade_between_claim_and_turn_leaves_no_turn(conn):
    """The run has claimed the agent but opened no turn yet when a cascade ends it:
    the turn is never opened, the mail never taken."""
    from agentctl.ops import turns
    fork("-n", "pp")
    cc = fork("-p", "pp", "-n", "cc", "prompt")
    assert agent("send", "cc", "mail").code == 0
    claimed = lease.claim(conn, "cc")
    assert agent("kill", "--cascade", "pp").code == 0
    with pytest.raises(lease.KilledMidTurn) as raised:
        turns.start(conn, claimed, "echo")
    assert raised.value.code == 3
    assert status(conn, cc) == "X"
    assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 0
    assert conn.execute("SELECT read_at FROM mail").fetchone()[0] is None


def test_a_run_that_lost_its_agent_is_told_how(conn):
    """Another run took the agent over (this one stalled past its lease) and the
    agent exited there: 75, the claim lost. Killed by a signal while this run held
    it: 3. Either way the run writes nothing more."""
    a = fork("-n", "a")

    def holding_after(change):
        conn.execute(f"UPDATE agents SET {change} WHERE id = ?", (a,))
        conn.commit()
        with pytest.raises(lease.LostClaim) as raised:
            with lease.holding(conn, a):
                pass
        return raised.value
    lost = holding_after("status = 'Z', exit_code = 0, lease_owner = 'other'")
    assert type(lost) is lease.LostClaim and lost.code == 75
    killed = holding_after("exit_code = 143, exit_signal = 'TERM', lease_owner = NULL")
    assert type(killed) is lease.KilledMidTurn and killed.code == 3
    assert str(killed) == "a: killed by TERM while this run held it; it wrote nothing more"


def test_kill_ends_a_run_blocked_on_a_slow_model_call_within_a_second(conn, fakeapi,
                                                                       monkeypatch):
    """The model server takes 60 s to answer: agent-run learns of the KILL through
    the database while it waits on the network, and exits at once (within a second
    on a quiet machine); the turn is voided, its input pending again."""
    run = slow_turn(fakeapi, monkeypatch, "slow", "think hard")
    killed = time.monotonic()
    assert agent("kill", "-s", "KILL", "slow").code == 0
    out, err = run.communicate(timeout=PATIENCE)
    took = time.monotonic() - killed
    print(f"KILL to the exit of agent-run: {took:.3f} s")
    # It looks every 0.25 s (a second on a quiet machine): the bound is for a loaded
    # one, and still far from the 60 s of the call.
    assert took < 20, f"agent-run exited {took:.2f} s after the KILL"
    assert (run.returncode, out) == (3, "")
    assert "killed by KILL" in err
    row = conn.execute("SELECT status, exit_signal FROM agents WHERE name = 'slow'").fetchone()
    assert tuple(row) == ("Z", "KILL")
    assert conn.execute("SELECT status FROM turns").fetchone()[0] == "killed"


def test_no_tool_call_starts_after_the_kill_and_a_blocking_wait_is_cut_short(conn, home,
                                                                            tmp_path):
    """A step with a wait (up to 60 s, for a child that never exits) then a send and
    a fork: a KILL during the wait ends it at once, and neither the send nor the
    fork happens."""
    lead = fork("-n", "lead", "-m", script(tmp_path, {"steps": [{"tool_calls": [
        {"id": "w", "name": "wait", "arguments": {"timeout": 60}},
        {"id": "s", "name": "send", "arguments": {"to": "lead", "body": "after"}},
        {"id": "f", "name": "fork", "arguments": {"name": "late"}}]},
        {"content": "never"}]}), "go")
    fork("-p", "lead", "-n", "kid")
    run = started("agent-run", "lead")
    in_tool_call(conn, lead, "wait")
    wait_until(lambda: asleep_at_database(run.pid, home), "agent-run asleep in the wait")
    killed = time.monotonic()
    assert agent("kill", "-s", "KILL", "lead").code == 0
    run.communicate(timeout=PATIENCE)
    took = time.monotonic() - killed
    assert took < 20, f"agent-run exited {took:.2f} s after the KILL, not at once"
    assert run.returncode == 3
    assert conn.execute("SELECT count(*) FROM mail WHERE body = 'after'").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM agents WHERE name = 'late'").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM messages WHERE kind = 'tool_result' "
                        "AND void = 0").fetchone()[0] == 0
