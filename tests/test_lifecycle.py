"""The lifecycle of agentctl(7), LIFECYCLE: stopping gracefully then surely,
reaping, idle exit, restarts as a supervisor makes them, and the limits against
runaway forking."""

import json
import os
import re
import signal
import time

import pytest

from agentctl import clock
from agentctl.ops import asks, budget, lifecycle, mail, supervise
from agentctl.store import registry, turnlog
from agentctl.store.db import transaction

from .conftest import PATIENCE, agent, clock_slack, fork, mails, row, script, wait_until
from .fakeapi import fakeapi, slow_turn  # noqa: F401 (a fixture)
from .test_layers import sources


FAILING = {"steps": [{"fail": "error"}]}


# -- stop, gracefully then surely ---------------------------------------------------------

def test_grace_ends_a_turn_that_outlives_it_with_kill(conn, fakeapi, monkeypatch):
    """TERM lets a turn finish; one still running when the grace ends is killed by
    its own agent-run."""
    run = slow_turn(fakeapi, monkeypatch, "slow")
    sent = time.monotonic()
    assert agent("kill", "--grace", "1", "slow").code == 0
    assert row(conn, "slow")["status"] == "R"             # TERM waits for the turn
    run.communicate(timeout=PATIENCE)
    took = time.monotonic() - sent
    assert 1 - clock_slack() <= took < 20, took            # the grace, then the KILL
    slow = row(conn, "slow")
    assert (slow["status"], slow["exit_code"], slow["exit_signal"]) == ("Z", 137, "KILL")


def test_a_grace_period_survives_kill_9_of_the_run_and_the_next_writer_kills(
        conn, fakeapi, monkeypatch):
    """agent-run dies (kill -9) during the grace period: agent-ps shows the agent
    killed once the grace has ended, without writing; agent-run --all, the next
    writer, carries the KILL out."""
    run = slow_turn(fakeapi, monkeypatch, "slow")
    assert agent("kill", "--grace", "0.5", "slow").code == 0
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    wait_until(lambda: agent("ps", "-a", "-o", "name,stat,exit_code,signal", "--format", "tsv",
                             "--no-headers", "--role", "agent").out == "slow\tZ\t137\tKILL\n",
               "agent-ps to show the agent killed once the grace has ended")
    assert row(conn, "slow")["status"] == "R"              # agent-ps wrote nothing
    assert agent("run", "--all").code in (0, 1)
    slow = row(conn, "slow")
    assert (slow["status"], slow["exit_code"], slow["exit_signal"]) == ("Z", 137, "KILL")
    assert conn.execute("SELECT status FROM turns").fetchone()[0] == "killed"


def test_kill_wait_says_how_each_exited_and_times_out(conn, fakeapi, monkeypatch):
    fork("-n", "idle")
    result = agent("kill", "--wait", "5", "idle")
    assert result.code == 0
    assert result.lines[1].split()[1:] == ["idle", "killed", "TERM"]
    run = slow_turn(fakeapi, monkeypatch, "busy")
    result = agent("kill", "--wait", "0.3", "busy")        # TERM: the turn goes on
    assert result.code == 1 and result.out == ""
    assert result.err == "agent-kill: busy: still running after 0.3 s\n"
    result = agent("kill", "--grace", "0.2", "--wait", str(PATIENCE), "busy")
    assert result.code == 0, result.err
    assert result.lines[1].split()[1:] == ["busy", "killed", "KILL"]
    run.communicate(timeout=PATIENCE)


def test_grace_goes_with_term_only():
    fork("-n", "a")
    result = agent("kill", "-s", "STOP", "--grace", "5", "a")
    assert (result.code, result.err) == (
        2, "agent-kill: --grace goes with TERM (the KILL that follows it), not STOP\n")


# -- reaping and idle exit ------------------------------------------------------------------

def test_a_zombie_nobody_collects_is_reaped_after_its_time(conn, monkeypatch):
    fork("-n", "lead")
    fork("-p", "lead", "-n", "kid", "--reap-after", "0.5")
    fork("-p", "lead", "-n", "other")
    agent("kill", "kid", "other")
    assert [row(conn, n)["status"] for n in ("kid", "other")] == ["Z", "Z"]
    wait_until(lambda: agent("ps", "-a", "-o", "name,stat", "--format", "tsv", "--no-headers",
                             "--parent", "lead").out == "kid\tX\nother\tZ\n",
               "agent-ps to show kid reaped once its time has passed")    # shown, not written
    assert agent("ps", "-o", "name", "--no-headers", "--parent", "lead").out == "other\n"
    assert row(conn, "kid")["status"] == "Z"
    agent("run", "--all")
    kid = row(conn, "kid")
    assert (kid["status"], kid["exit_signal"]) == ("X", "TERM")     # its record is kept
    assert conn.execute("SELECT count(*) FROM events WHERE kind = 'reap' AND agent_id = ?",
                        (kid["id"],)).fetchone()[0] == 1
    assert row(conn, "other")["status"] == "Z"
    monkeypatch.setenv("AGENTCTL_REAP_AFTER", "0s")
    assert agent("wait", "--timeout", "0", "lead").code == 1     # any writer reaps
    assert row(conn, "other")["status"] == "X"


def test_reap_after_is_inherited_and_checked(conn, monkeypatch):
    fork("-n", "lead", "--reap-after", "10m")
    fork("-p", "lead", "-n", "kid")
    assert row(conn, "kid")["reap_after"] == 600
    assert agent("fork", "--reap-after", "soon").code == 2
    monkeypatch.setenv("AGENTCTL_REAP_AFTER", "nan")
    result = agent("run", "--all")
    assert result.code == 2 and "AGENTCTL_REAP_AFTER" in result.err


def test_an_idle_agent_exits_and_its_parent_is_told(conn, tmp_path):
    fork("-n", "lead")
    pool = fork("-p", "lead", "-n", "pool", "--idle-exit", "10m", "-m", "echo", "hello")
    assert agent("run", "pool").code == 0                 # its latest turn
    agent("run", "--all")
    assert row(conn, "pool")["status"] == "S"             # not idle long enough
    # ten minutes and more go by, as far as the database can tell
    conn.execute("UPDATE agents SET created_at = created_at - 3600 WHERE id = ?", (pool,))
    conn.execute("UPDATE turns SET started_at = started_at - 3600, ended_at = ended_at - 3600 "
                 "WHERE agent_id = ?", (pool,))
    conn.commit()
    agent("run", "--all")
    pool = row(conn, "pool")
    assert (pool["status"], pool["exit_code"]) == ("Z", 0)
    assert "exited normally" in mails(conn, "lead", "exit")[0]


# -- restarts ---------------------------------------------------------------------------------

def test_a_daemon_is_restarted_then_gives_up_and_its_parent_hears_twice(
        conn, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTCTL_BACKOFF", "0")
    fork("-n", "lead")
    fork("-p", "lead", "-n", "d", "-r", "daemon", "--max-restarts", "2",
         "-m", script(tmp_path, FAILING), "work")
    for n in (1, 2):
        assert agent("run", "d").code == 69
        d = row(conn, "d")
        assert (d["status"], d["restarts"]) == ("S", n)
        assert conn.execute("SELECT count(*) FROM messages WHERE agent_id = ? AND kind = "
                            "'user' AND turn_id IS NULL AND void = 0",
                            (d["id"],)).fetchone()[0] == 1      # its input pending again
    assert len(mails(conn, "lead", "failure")) == 1              # the first failure only
    assert "restarting" in mails(conn, "lead", "failure")[0]
    assert agent("run", "d").code == 69                          # a third: too many
    d = row(conn, "d")
    assert (d["status"], d["exit_code"]) == ("Z", 76)
    assert "restarts used up" in d["result"]
    assert mails(conn, "lead", "exit")[0].startswith(f"d ({d['id']}) failed (76)")


def test_a_restart_backs_off_longer_each_time_and_resets_after_a_success(
        conn, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTCTL_BACKOFF", "10,25")
    steps = [{"match": "^fail", "steps": [{"fail": "error"}]}, {"steps": [{"content": "ok"}]}]
    fork("-n", "d", "-r", "daemon", "-m", script(tmp_path, *steps), "fail")
    for wait in (10, 20, 25):
        before = time.time()
        agent("run", "d")
        after = time.time()         # (however long the run took: its failure is in between)
        retry_at = row(conn, "d")["retry_at"]
        assert before - clock_slack() <= retry_at - wait <= after + clock_slack(), wait
    assert agent("run", "--all").out == ""                   # backing off
    conn.execute("UPDATE agents SET retry_at = NULL WHERE name = 'd'")
    conn.execute("UPDATE messages SET content = 'now ok' WHERE kind = 'user'")
    conn.commit()
    assert agent("run", "d").out == "ok\n"
    d = row(conn, "d")
    assert (d["failures"], d["retry_at"], d["restarts"]) == (0, None, 3)


def test_never_holds_the_failed_input_and_tells_the_parent(conn, tmp_path):
    fork("-n", "lead")
    agent("kill", "-s", "STOP", "lead")                         # its mail would run it
    fork("-p", "lead", "-n", "w", "-r", "worker", "-m", script(tmp_path, FAILING), "work")
    assert agent("run", "w").code == 69
    w = row(conn, "w")
    assert (w["status"], w["restarts"], w["retry_at"]) == ("S", 0, None)
    assert w["held_at"] is not None
    assert agent("run", "--all").code == 1                      # held: left alone
    assert agent("run", "w").code == 69                         # the input kept: tried again
    assert len(mails(conn, "lead", "failure")) == 1             # told once
    assert "not restarted" in mails(conn, "lead", "failure")[0]
    w = row(conn, "w")
    assert w["last_failure"].startswith("model API error")
    shown = agent("ps", "-o", "name,failure", "--format", "json", "--parent", "lead")
    assert json.loads(shown.out) == [{"name": "w", "failure": w["last_failure"]}]


def test_always_restarts_an_exit_and_term_never_restarts(conn, tmp_path):
    exit_call = {"steps": [{"tool_calls": [{"id": "x", "name": "exit",
                                            "arguments": {"result": "done"}}]}]}
    fork("-n", "lead")
    fork("-p", "lead", "-n", "d", "-r", "daemon", "-m", script(tmp_path, exit_call), "go")
    assert agent("run", "d").code == 0
    d = row(conn, "d")
    assert (d["status"], d["restarts"]) == ("S", 1)
    assert mails(conn, "lead", "exit") == []                   # no zombie, no exit mail
    assert agent("kill", "d").code == 0
    assert row(conn, "d")["status"] == "Z"                      # TERM ends it for good


def test_a_restart_survives_kill_9_at_every_commit(conn, tmp_path, monkeypatch, home):
    """kill -9 of agent-run before and after each commit of a failing daemon's run,
    then agent-run once more: each failed turn is one restart, no more, the input is
    pending once, the parent has one failure mail."""
    from .test_crash import crashed_run
    monkeypatch.setenv("AGENTCTL_BACKOFF", "0")
    model = script(tmp_path, FAILING)
    for point in ("before", "after"):
        for at in range(1, 8):
            for name in ("lead", "d"):
                conn.execute("UPDATE agents SET name = NULL WHERE name = ?", (name,))
            conn.commit()
            lead = fork("-n", "lead")
            d = fork("-p", "lead", "-n", "d", "-r", "daemon", "-m", model, "work")
            if crashed_run(point, at, home, "d") != 69:
                assert agent("run", "d").code == 69, (point, at)
            d = row(conn, "d")
            failed = conn.execute("SELECT count(*) FROM turns WHERE agent_id = ? AND "
                                  "status = 'failed'", (d["id"],)).fetchone()[0]
            assert d["status"] == "S" and d["restarts"] == failed >= 1, (point, at)
            assert conn.execute("SELECT count(*) FROM messages WHERE agent_id = ? AND "
                                "kind = 'user' AND turn_id IS NULL AND void = 0",
                                (d["id"],)).fetchone()[0] == 1, (point, at)
            assert conn.execute("SELECT count(*) FROM mail WHERE recipient_id = ? AND "
                                "kind = 'failure'", (lead,)).fetchone()[0] == 1, (point, at)


# -- limits against runaway agents ----------------------------------------------------------

def test_max_children_counts_zombies_and_is_inherited(conn):
    fork("-n", "lead", "--max-children", "2")
    fork("-p", "lead", "-n", "a")
    fork("-p", "lead", "-n", "b")
    result = agent("fork", "-p", "lead", "-n", "c")
    assert result.code == 3
    assert result.err == ("agent-fork: lead: can't fork: it has 2 children alive or not yet "
                          "collected (--max-children 2)\n")
    agent("kill", "a")
    assert agent("fork", "-p", "lead").code == 3              # a zombie still counts
    assert agent("wait", "a").code == 3
    assert agent("fork", "-p", "lead", "-n", "c").code == 0   # collected: room again
    assert row(conn, "c")["max_children"] == 2
    fork("-n", "w", "-r", "worker")
    assert row(conn, "w")["max_children"] == 4


def test_the_depth_limit_counts_forks_along_the_fork_line(conn, monkeypatch):
    monkeypatch.setenv("AGENTCTL_MAX_DEPTH", "3")
    one = fork("-n", "one")
    two = fork("-p", one)
    three = fork("-p", two)
    result = agent("fork", "-p", three)
    assert result.code == 3 and "AGENTCTL_MAX_DEPTH=3" in result.err
    agent("kill", two)                        # three is reparented to one: depth stays
    assert row(conn, three)["parent_id"] == one
    assert agent("fork", "-p", three).code == 3
    monkeypatch.setenv("AGENTCTL_MAX_DEPTH", "many")
    assert agent("fork", "-p", one).code == 2


def test_an_agent_that_forks_in_every_step_is_stopped_by_the_limits(conn, tmp_path,
                                                                    monkeypatch):
    """A runaway: every step of every turn forks a child told to fork again. The
    limits refuse the forks past them (a tool error the model sees), the runs come
    to an end, and the database stays small: at most 2 children an agent, 3 forks
    deep, 14 agents besides init and the root."""
    forking = {"steps": [{"tool_calls": [{"id": "f", "name": "fork",
                                          "arguments": {"prompt": "fork again"}}]}] * 4
               + [{"content": "tired"}]}
    monkeypatch.setenv("AGENTCTL_MAX_DEPTH", "4")
    fork("-n", "root", "--max-children", "2", "-m", script(tmp_path, forking), "go")
    rounds = 0
    while agent("run", "--all", "-j", "2").code == 0:
        rounds += 1
        assert rounds < 10, "the runaway never stopped"
    assert conn.execute("SELECT count(*) FROM agents").fetchone()[0] == 2 + 2 + 4 + 8
    assert conn.execute("SELECT max(depth) FROM agents").fetchone()[0] == 4
    refused = [r[0] for r in conn.execute(
        "SELECT content FROM messages WHERE kind = 'tool_result' AND content LIKE 'error:%'")]
    assert len(refused) == 1 * 2 + 2 * 2 + 4 * 2 + 8 * 4
    assert any("--max-children 2" in r for r in refused)
    assert any("AGENTCTL_MAX_DEPTH=4" in r for r in refused)


def test_a_bad_backoff_setting_is_a_usage_error_before_the_turn(conn, tmp_path, monkeypatch):
    fork("-n", "d", "-r", "daemon", "-m", script(tmp_path, FAILING), "work")
    for value in ("soon", "1s,2s,3s", "inf"):
        monkeypatch.setenv("AGENTCTL_BACKOFF", value)
        result = agent("run", "d")
        assert result.code == 2 and "AGENTCTL_BACKOFF" in result.err, (value, result.err)
    d = row(conn, "d")
    assert (d["status"], d["restarts"], d["failures"]) == ("S", 0, 0)    # nothing taken
    assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 0


# -- who is told ---------------------------------------------------------------------------

NOTICES = {
    "exit": lambda conn, a: lifecycle.exit(conn, a, code=0, result="done"),
    "failure": lambda conn, a: supervise.failed(conn, a["id"], "the API said no"),
    "request": lambda conn, a: asks.open_request(
        conn, a, turnlog.insert(conn, a["id"], "echo", clock.now()),
        {"tool_name": "ask", "content": "{}", "tool_call_id": "c1"}, "question", "why?"),
    "budget": lambda conn, a: budget.notify(conn, a, a["id"]),
}


@pytest.mark.parametrize("kind", list(NOTICES))
@pytest.mark.parametrize("tree, above", [
    ("g > p > c", "p"),          # its lifecycle parent
    ("g > p(T) > c", "p"),       # stopped is alive: the mail waits for it
    ("g > p(X) > c", "g"),       # a parent that lives no more: the nearest live ancestor
    ("c", None),                 # a child of init: the operator reads agent-ps, agent-answer
    ("p(X) > c", None),          # ... and one whose nearest live ancestor is init
])
def test_every_notice_goes_to_the_one_supervisor(conn, kind, tree, above):
    """An exit, a failed turn, a request and an exhausted account are told by one rule,
    mail.supervisor (they were three: a failure or a request to a parent that lives no
    more went to no one, a budget to the nearest live ancestor). A parent that lives no
    more with a child alive is what reparenting prevents, but for an account's owner
    that exited; the rule is the same all the same. An exit is told only to a parent
    that lives to collect it: a zombie's."""
    names = [word.rstrip(")").partition("(") for word in tree.split(" > ")]
    for n, (name, _, _) in enumerate(names):
        fork("-n", name, "--budget", "100", *(["-p", names[n - 1][0]] if n else []))
    with transaction(conn):
        for name, _, status in names:
            if status:
                registry.change_status(conn, row(conn, name)["id"], "S", status)
    supervisor = mail.supervisor(conn, row(conn, "c"))
    assert (supervisor and supervisor["name"]) == above
    with transaction(conn):
        NOTICES[kind](conn, row(conn, "c"))
    if kind == "exit" and not registry.is_live(registry.get(conn, row(conn, "c")["parent_id"])):
        above = None            # c is dead (X), not a zombie: no one collects it
    sent = conn.execute("SELECT recipient_id, sender_id FROM mail WHERE kind = ?",
                        (kind,)).fetchall()
    assert [tuple(r) for r in sent] == ([(row(conn, above)["id"], row(conn, "c")["id"])]
                                        if above else [])


def test_only_ops_mail_delivers():
    """Every notice goes through mail.tell_supervisor, every mail through mail.send or
    deliver_many: no module but ops/mail.py calls deliver()."""
    found = [m for m, src in sources() if m != "agentctl.ops.mail"
             and re.search(r"\bdeliver\(", src)]
    assert found == []
