"""agent-run: one turn against real HTTP servers, offline models, leases,
signals, tools, roles and --all."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from agentctl.ops import lease
from agentctl.store import registry
from agentctl.store.db import connect

from .conftest import (PATIENCE, ROOT, Result, agent, clock_passes, fork, script, shell,
                       started, stored, unread, wait_until)
from .fakeapi import ANTHROPIC_KEY, OPENAI_KEY, fakeapi  # noqa: F401


def once_requested(fakeapi, action, count=1, hold=None):
    """Run `action` in a thread as soon as the fake API has received `count`
    requests (the model call is then in flight), then set `hold`: the event a
    reply queued with hold=... waits for, so that the call is in flight for as
    long as the action takes, however loaded the machine."""
    def watch():
        try:
            wait_until(lambda: len(fakeapi.requests) >= count, f"{count} model call(s)")
            action()
        finally:
            if hold is not None:
                hold.set()
    thread = threading.Thread(target=watch)
    thread.start()
    return thread


def while_calling(fakeapi, action, final):
    """Queue a reply that calls the ps tool, held in flight until `action` has run, then the
    reply `final`: returns the thread that runs `action` (see once_requested)."""
    hold = threading.Event()
    fakeapi.reply("", tool_calls=[("c1", "ps", "{}")], hold=hold)
    fakeapi.reply(final)
    return once_requested(fakeapi, action, hold=hold)


def signal(ref, sig):
    from agentctl.store import db
    from agentctl.ops import signals
    from agentctl.store.db import transaction
    conn = db.connect()
    with transaction(conn):
        signals.apply(conn, registry.resolve(conn, ref), sig)
    conn.close()


def deliver(ref, body):
    from agentctl.store import db
    from agentctl.ops import mail
    from agentctl.store.db import transaction
    conn = db.connect()
    with transaction(conn):
        mail.deliver(conn, None, registry.resolve(conn, ref), body)
    conn.close()


def kinds(conn, ref):
    agent_id = registry.resolve(conn, ref)["id"]
    return [r[0] for r in conn.execute(
        "SELECT kind FROM messages WHERE agent_id = ? AND void = 0 ORDER BY id", (agent_id,))]


def test_echo_turn_prints_the_reply_and_then_has_nothing_to_do(conn):
    fork("-n", "a", "-m", "echo", "hello")
    result = agent("run", "a")
    assert (result.code, result.out, result.err) == (0, "hello\n", "")
    result = agent("run", "a")
    assert (result.code, result.err) == (1, "agent-run: a: no pending input\n")
    assert kinds(conn, "a") == ["user", "assistant"]
    assert registry.resolve(conn, "a")["status"] == "S"


def test_ten_mails_make_one_model_call(conn, fakeapi):
    fork("-n", "a", "-m", "openai:gpt-test")
    for i in range(10):
        agent("send", "a", f"mail {i}")
    fakeapi.reply("read them all")
    result = agent("run", "--json", "a")
    record = json.loads(result.out)
    assert (record["steps"], record["mail_read"], record["text"]) == (1, 10, "read them all")
    assert len(fakeapi.requests) == 1
    inbox = fakeapi.last["body"]["messages"][-1]
    assert inbox["role"] == "user" and inbox["content"].startswith("[INBOX - 10 new]")
    assert all(f"mail {i}" in inbox["content"] for i in range(10))
    assert unread(conn, "a") == 0
    assert (record["input_tokens"], record["output_tokens"]) == (11, 7)
    row = registry.resolve(conn, "a")
    assert (row["tokens_in"], row["tokens_out"]) == (11, 7)


@pytest.mark.parametrize("model", ["openai:gpt-test", "anthropic:claude-test"])
def test_tool_calls_over_http_then_final_text(conn, fakeapi, model):
    fork("-n", "lead", "-m", model, "Plan")
    fakeapi.reply("forking", tool_calls=[("c1", "fork", '{"prompt": "Survey", "name": "w1"}')])
    fakeapi.reply("done")
    result = agent("run", "lead")
    assert (result.code, result.out) == (0, "done\n"), result.err
    assert len(fakeapi.requests) == 2
    second = fakeapi.last["body"]
    tools = second["tools"]
    assert {t.get("name") or t["function"]["name"] for t in tools} >= {"fork", "send", "exit"}
    w1 = registry.resolve(conn, "w1")
    assert w1["parent_id"] == registry.resolve(conn, "lead")["id"]


def test_child_replay_is_the_parents_context_to_the_fork_point_plus_its_own(conn, tmp_path):
    model = script(tmp_path,
                   {"match": "^Plan", "steps": [
                       {"content": "fork", "tool_calls": [{"name": "fork", "arguments": {"prompt": "Survey", "name": "w1"}}]},
                       {"content": "lead done"}]},
                   {"match": "^Survey", "reply": {"content": "worker done"}})
    fork("-n", "lead", "-m", model, "Plan")
    assert agent("run", "lead").out == "lead done\n"
    lead = registry.resolve(conn, "lead")
    w1 = registry.resolve(conn, "w1")
    lead_ids = [m["id"] for m in json.loads("[" + ",".join(agent("replay", "--format", "jsonl", "lead").lines) + "]")]
    assert w1["fork_msg_id"] in lead_ids
    assert agent("run", "w1").out == "worker done\n"
    child = [json.loads(line) for line in agent("replay", "--format", "jsonl", "w1").lines]
    inherited = [m for m in child if m["agent_id"] == lead["id"]]
    own = [m for m in child if m["agent_id"] == w1["id"]]
    assert [m["id"] for m in inherited] == [i for i in lead_ids if i <= w1["fork_msg_id"]]
    assert [m["kind"] for m in own] == ["tool_result", "user", "assistant"]
    assert own[0]["content"].startswith("You are the child")
    openai = json.loads(agent("replay", "--format", "openai", "w1").out)
    assert openai[1]["tool_calls"][0]["function"]["name"] == "fork"
    assert openai[2] == {"role": "tool", "tool_call_id": "call_0_0", "content": own[0]["content"]}


def test_task_exits_with_its_result_and_cant_fork(conn, tmp_path):
    model = script(tmp_path, {"steps": [
        {"content": "try", "tool_calls": [{"name": "fork", "arguments": {}}]},
        {"content": "the answer is 42"}]})
    fork("-n", "lead")
    fork("-p", "lead", "-n", "t", "-r", "task", "-m", model, "compute")
    assert agent("run", "t").out == "the answer is 42\n"
    t = registry.resolve(conn, "t")
    assert (t["status"], t["result"], t["exit_code"]) == ("Z", "the answer is 42", 0)
    results = conn.execute("SELECT content FROM messages WHERE agent_id = ? AND kind = 'tool_result'",
                           (t["id"],)).fetchall()
    assert results[0][0].startswith("error: unknown tool: fork (tools: send, ")    # not offered
    assert "the answer is 42" in agent("mail", "-r", "lead").out
    assert agent("fork", "-p", "t").code == 3


def test_bad_tool_calls_become_errors_the_model_sees(conn, tmp_path):
    calls = [{"name": "nope", "arguments": {}}, {"name": "send", "arguments": "{not json"},
             {"name": "send", "arguments": {"to": "x"}}, {"name": "kill", "arguments": {"agent": "init"}},
             {"name": "sleep", "arguments": {"seconds": "soon"}}]
    model = script(tmp_path, {"steps": [{"content": "", "tool_calls": calls}, {"content": "ok"}]})
    fork("-n", "a", "-m", model, "go")
    assert agent("run", "a").code == 0
    results = [r[0] for r in conn.execute("SELECT content FROM messages WHERE kind = 'tool_result' ORDER BY id")]
    assert results[0].startswith("error: unknown tool: nope")
    assert results[1].startswith("error: arguments are not valid JSON")
    assert results[2] == "error: body is missing"
    assert results[3] == "error: init is not one of your descendants"
    assert results[4] == "error: seconds must be a number"


def test_a_thousand_tool_calls_in_one_message(conn, tmp_path):
    calls = [{"name": "check_mail", "arguments": {}}] * 1000
    model = script(tmp_path, {"steps": [{"content": "", "tool_calls": calls}, {"content": "ok"}]})
    fork("-n", "a", "-m", model, "go")
    assert agent("run", "a").code == 0
    assert kinds(conn, "a").count("tool_result") == 1000


def test_mail_arriving_mid_turn_is_injected_before_the_next_call(conn, fakeapi, monkeypatch):
    monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "60")
    fork("-n", "a", "-m", "openai:gpt-test", "go")
    timer = while_calling(fakeapi, lambda: deliver("a", "stop, use Q3 data"), "done")
    assert agent("run", "a").code == 0
    timer.join()
    last = fakeapi.last["body"]["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith("[MID-TURN UPDATE - 1 new]")
    assert "use Q3 data" in last["content"]
    assert unread(conn, "a") == 0


@pytest.mark.parametrize("late", [0, 1.0])
def test_two_runs_of_one_agent_exactly_one_turn(conn, fakeapi, late):
    """Two runs started together: one claims the agent, the other is told it is
    claimed (75). The reply is held until the loser has exited, so that the two
    overlap whatever the load (with a fixed delay, a run started late under load
    found the turn already done, and exited 1)."""
    fork("-n", "a", "-m", "openai:gpt-test", "go")
    hold = threading.Event()
    fakeapi.reply("slow answer", hold=hold)
    env = dict(os.environ, AGENTCTL_HTTP_TIMEOUT="60")
    cmd = [sys.executable, os.path.join(ROOT, "bin", "agent-run"), "a"]
    procs = []
    for _ in range(2):      # `late`: the second starts as a loaded machine may start it
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
        time.sleep(late)
    try:
        wait_until(lambda: any(p.poll() is not None for p in procs), "one of the runs to exit")
    finally:
        hold.set()
    outs = [p.communicate(timeout=PATIENCE) for p in procs]
    results = sorted((p.returncode, out, err) for p, (out, err) in zip(procs, outs))
    assert [r[0] for r in results] == [0, 75]
    assert results[0][1] == "slow answer\n"
    assert "claimed by another agent-run" in results[1][2]
    assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 1
    assert len(fakeapi.requests) == 1


def test_a_crashed_runs_lease_is_taken_over(conn):
    fork("-n", "a", "-m", "echo", "hi")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    import socket
    conn.execute("UPDATE agents SET status = 'R', lease_owner = ?, lease_until = ? WHERE name = 'a'",
                 (f"{socket.gethostname()}:{dead}", time.time() + 300))
    shown = agent("ps", "-o", "stat", "--format", "tsv", "--no-headers", "--role", "agent").out
    assert shown == "S\n"                                    # its run is dead: idle
    assert agent("run", "a").out == "hi\n"
    conn.execute("UPDATE agents SET status = 'R', lease_owner = 'elsewhere:1', lease_until = ? "
                 "WHERE name = 'a'", (time.time() - 1,))
    agent("send", "a", "again")
    assert agent("run", "a").code == 0


@pytest.mark.parametrize("fault", ["429", "500", "timeout", "cut", "malformed"])
def test_transient_faults_are_retried_and_nothing_is_lost(conn, fakeapi, fault, monkeypatch):
    fork("-n", "a", "-m", "openai:gpt-test")
    agent("send", "a", "question")
    if fault == "timeout":
        monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "1")
    if fault == "429":
        fakeapi.error(429, "slow down", retry_after=1)
    elif fault == "500":
        fakeapi.error(500)
    else:
        fakeapi.reply("partial", **{"timeout": {"delay": 3.0}, "cut": {"cut_after": 2},
                                    "malformed": {"malformed": True}}[fault])
    fakeapi.reply("answer")
    result = agent("run", "a")
    assert (result.code, result.out) == (0, "answer\n"), result.err
    assert unread(conn, "a") == 0 and kinds(conn, "a") == ["user", "assistant"]


def test_persistent_faults_exit_75_with_input_still_pending(conn, fakeapi, monkeypatch):
    monkeypatch.setenv("AGENTCTL_RETRY_SECONDS", "1")
    fork("-n", "a", "-m", "openai:gpt-test")
    agent("send", "a", "question")
    fakeapi.error(500, times=50)
    started = time.monotonic()
    result = agent("run", "a")
    assert result.code == 75 and time.monotonic() - started < 30    # not all 50 tries
    assert result.err.startswith("agent-run: model API unavailable") and result.err.count("\n") == 1
    assert registry.resolve(conn, "a")["status"] == "S"
    from agentctl.ops import turns
    assert turns.has_pending_input(conn, registry.resolve(conn, "a"))
    fakeapi.queue.clear()
    fakeapi.reply("finally")
    assert agent("run", "a").out == "finally\n"
    assert "question" in fakeapi.last["body"]["messages"][-1]["content"]


def test_refused_request_voids_the_turn_and_keeps_the_input(conn, fakeapi):
    """Restarted on failure: the turn is voided, its input pending again."""
    fork("-n", "a", "--restart", "on-failure", "-m", "openai:gpt-test", "prompt")
    agent("send", "a", "mail")
    fakeapi.error(400, "bad request")
    result = agent("run", "a")
    assert result.code == 69
    assert unread(conn, "a") == 1
    assert kinds(conn, "a") == ["user"]
    fakeapi.reply("ok")
    assert agent("run", "a").out == "ok\n"


def test_keys_never_reach_the_database_or_output(conn, fakeapi, home):
    fork("-n", "a", "-m", "openai:gpt-test", "hi")
    fakeapi.reply("fine")
    result = agent("run", "--json", "a")
    fakeapi.error(401, "invalid key", times=2)
    agent("send", "a", "more")
    failed = agent("run", "a")
    dump = stored(home).decode("latin-1")
    for text in (result.out, result.err, failed.out, failed.err, dump):
        assert OPENAI_KEY not in text and ANTHROPIC_KEY not in text


def test_model_selection(conn, monkeypatch, tmp_path):
    fork("-n", "a", "hi")
    result = agent("run", "a")
    assert (result.code, result.err) == (2, "agent-run: a: no model (give -m MODEL, fork it with -m, "
                                            "or set AGENTCTL_MODEL)\n")
    monkeypatch.setenv("AGENTCTL_MODEL", "echo")
    assert agent("run", "a").out == "hi\n"
    agent("send", "a", "x")
    result = agent("run", "-m", "openai:gpt-4o-mini", "a")
    assert result.code == 2 and "OPENAI_API_KEY" in result.err
    assert agent("run", "-m", "bogus", "a").code == 2
    assert unread(conn, "a") == 1          # nothing was taken


def test_signals_during_a_turn(conn, fakeapi, monkeypatch):
    monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "60")
    for name in ("k", "t", "s"):
        fork("-n", name, "-m", "openai:gpt-test", "go")
    for sig, name in (("KILL", "k"), ("TERM", "t"), ("STOP", "s")):
        fakeapi.requests.clear()
        timer = while_calling(fakeapi, lambda: signal(name, sig), "finished")
        result = agent("run", name)
        timer.join()
        row = registry.resolve(conn, name)
        if sig == "KILL":
            assert result.code == 3 and row["status"] == "Z" and row["exit_signal"] == "KILL"
            assert result.err == "agent-run: k: killed by KILL during its turn (voided)\n"
            assert kinds(conn, name) == ["user"]           # the partial turn is never replayed
            fakeapi.queue.clear()
        elif sig == "TERM":
            assert result.out == "finished\n"
            assert (row["status"], row["exit_signal"], row["result"]) == ("Z", "TERM", "finished")
        else:
            assert result.code == 0 and row["status"] == "T"
            assert agent("run", name).code == 3            # stopped: refused
            agent("kill", "-s", "CONT", name)
            assert agent("run", name).out == "finished\n"  # the open turn resumes


def test_sleep_sets_a_timer_that_all_honours(conn, tmp_path):
    model = script(tmp_path,
                   {"match": "TIMER", "reply": {"content": "awake"}},
                   {"steps": [{"content": "", "tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.5}}]}]})
    fork("-n", "a", "-m", model, "nap")
    assert agent("run", "a").code == 0
    wake_at = registry.resolve(conn, "a")["wake_at"]
    assert wake_at is not None
    assert agent("run", "--all").code == 1          # not due yet
    clock_passes(conn, wake_at, "the timer's time")
    result = shell("agent-run --all --json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["text"] == "awake"


def test_all_runs_every_agent_with_input_in_parallel_and_skips_stopped(conn):
    for name in ("a", "b", "c", "d"):
        fork("-n", name, "-m", "echo", f"hi {name}")
    agent("kill", "-s", "STOP", "d")
    result = shell("agent-run --all -j 4 --json")
    assert result.code == 0, result.err
    texts = sorted(json.loads(line)["text"] for line in result.out.splitlines())
    assert texts == ["hi a", "hi b", "hi c"]
    assert result.err == ""                 # every turn ran: nothing to add
    assert shell("agent-run --all").code == 1


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:             # gone meanwhile
        return b""


def test_all_names_a_turn_killed_by_a_signal_and_exits_128_plus_it(conn, fakeapi):
    fork("-n", "a", "-m", "echo", "hi a")
    slow = fork("-n", "b", "-m", "openai:gpt-test", "hi b")
    fakeapi.reply("too late", delay=20)
    env = dict(os.environ, PATH=os.path.join(ROOT, "bin") + os.pathsep + os.environ["PATH"],
               AGENTCTL_HTTP_TIMEOUT="30")
    proc = subprocess.Popen(["agent-run", "--all", "-j", "2"], env=env, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    wait_until(lambda: fakeapi.requests, "the model call")
    child = [p for p in os.listdir("/proc") if p.isdigit() and slow.encode() in cmdline(p)]
    assert len(child) == 1
    os.kill(int(child[0]), 9)
    out, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 137, err
    assert err == f"agent-run: {slow}: killed by signal 9\n"
    fakeapi.queue.clear()
    fakeapi.reply("on time")
    assert agent("run", "b").out == "on time\n"              # its open turn resumes


def test_usage_errors():
    assert agent("run").err == "agent-run: missing AGENT (and AGENT_ID is not set)\n"
    assert agent("run", "--all", "x").code == 2
    if not os.environ["AGENTCTL_DB"].startswith("postgresql://"):
        assert agent("run", "nobody").code == 2         # $AGENTCTL_DB names no database
    fork("-n", "somebody")
    assert agent("run", "nobody").code == 1             # no such agent
    assert agent("run", "--max-steps", "0", "x").code == 2


def test_a_weaker_signal_never_replaces_a_stronger_one(conn, fakeapi, monkeypatch):
    monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "60")
    fork("-n", "a", "-m", "openai:gpt-test", "go")

    def both():
        signal("a", "TERM")
        signal("a", "STOP")
    thread = while_calling(fakeapi, both, "finished")
    result = agent("run", "a")
    thread.join()
    row = registry.resolve(conn, "a")
    assert result.out == "finished\n" and (row["status"], row["exit_signal"]) == ("Z", "TERM")


def test_hup_during_a_turn_clears_after_it(conn, fakeapi, monkeypatch):
    monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "60")
    fork("-n", "a", "-m", "openai:gpt-test", "the task")
    thread = while_calling(fakeapi, lambda: signal("a", "HUP"), "finished")
    assert agent("run", "a").out == "finished\n"
    thread.join()
    # the second call of the turn still saw the turn's own input
    assert fakeapi.last["body"]["messages"][0]["content"] == "the task"
    assert kinds(conn, "a")[-1] == "clear"
    assert agent("replay", "a").out == ""


def test_an_architect_sleeps_on_its_result_until_mail(conn, tmp_path):
    model = script(tmp_path, {"reply": {"content": "the plan"}})
    fork("-n", "arch", "-r", "architect", "-m", model, "design it")
    conn.execute("UPDATE agents SET wake_at = 1 WHERE name = 'arch'")
    assert agent("run", "arch").out == "the plan\n"
    row = registry.resolve(conn, "arch")
    assert (row["status"], row["wake_at"]) == ("S", None)
    assert agent("run", "arch").code == 1
    agent("send", "arch", "revise")
    assert agent("run", "arch").code == 0


def test_the_lease_outlives_a_model_call_longer_than_itself(conn, fakeapi, monkeypatch):
    """The model call outlasts the lease: its reply is held until a rival agent-run,
    started once the lease the call began with has run out, has been told the agent
    is claimed (the heartbeat renewed the lease meanwhile, every third of it)."""
    monkeypatch.setenv("AGENTCTL_LEASE", "3")
    monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "60")
    fork("-n", "a", "-m", "openai:gpt-test", "go")
    hold = threading.Event()
    fakeapi.reply("slow", hold=hold)
    seen = []
    thread = once_requested(fakeapi, lambda: seen.append(rival("a", "3")), hold=hold)
    assert agent("run", "a").out == "slow\n"
    thread.join()
    assert seen[0].code == 75 and "claimed" in seen[0].err, seen[0]
    assert len(fakeapi.requests) == 1


def rival(ref, lease):
    """agent-run `ref` (AGENTCTL_LEASE=`lease`) once the lease the agent holds now has
    run out: unless it was renewed, the rival takes the agent over."""
    other = connect(os.environ["AGENTCTL_DB"])
    try:
        clock_passes(other, registry.resolve(other, ref)["lease_until"], "the lease")
    finally:
        other.close()
    return shell(f"agent-run {ref}", env={"AGENTCTL_LEASE": lease})


def test_the_lease_outlives_tool_calls_longer_than_itself(conn, tmp_path, monkeypatch):
    """A step's tool calls can block longer than the lease (the wait tool, up to 60 s
    each): the heartbeat covers the whole turn, so no second run takes it over. The
    wait here, for a child, lasts until the rival has come and the child is killed."""
    monkeypatch.setenv("AGENTCTL_LEASE", "3")
    model = script(tmp_path, {"match": "MID-TURN", "reply": {"content": "done"}},
                   {"match": "go", "steps": [
                       {"tool_calls": [{"name": "wait", "arguments": {"timeout": 60}},
                                       {"name": "send", "arguments": {"to": "peer",
                                                                      "body": "after the wait"}}]},
                       {"content": "done"}]})
    fork("-n", "peer")
    lead = fork("-n", "lead", "-m", model, "go")
    fork("-p", "lead", "-n", "w1")                      # alive: the wait goes on
    seen = []

    def rival_then_kill():
        watcher = connect(os.environ["AGENTCTL_DB"])
        try:
            wait_until(lambda: watcher.execute(
                "SELECT 1 FROM messages WHERE agent_id = ? AND tool_name = 'wait'",
                (lead,)).fetchone(), "the wait call")
        finally:
            watcher.close()
        try:
            seen.append(rival("lead", "3"))
        finally:
            signal("w1", "TERM")                        # the wait ends
    thread = threading.Thread(target=rival_then_kill)
    thread.start()
    assert agent("run", "lead").out == "done\n"
    thread.join()
    assert seen[0].code == 75 and "claimed" in seen[0].err, seen[0]
    assert agent("mail", "-c", "peer").out == "1\n"
    assert kinds(conn, "lead").count("assistant") == 2


def test_a_run_that_lost_its_claim_writes_nothing_more(conn, monkeypatch):
    """Should a run stall past its lease and another take the agent over, the
    first one's next write is refused inside its transaction: exit 75."""
    from agentctl.models import offline
    fork("-n", "a", "-m", "echo", "hello")

    def stalled(self, *args, **kwargs):
        other = connect(os.environ["AGENTCTL_DB"])
        other.execute("UPDATE agents SET lease_owner = 'elsewhere:1', lease_until = ? "
                      "WHERE name = 'a'", (time.time() + 300,))
        other.close()
        return real(self, *args, **kwargs)
    real = offline.EchoModel.complete
    monkeypatch.setattr(offline.EchoModel, "complete", stalled)
    result = agent("run", "a")
    assert result.code == 75 and "claimed by another agent-run while this one ran" in result.err
    assert kinds(conn, "a") == ["user"]                  # the reply was not recorded
    row = registry.resolve(conn, "a")
    assert (row["status"], row["lease_owner"], row["failures"]) == ("R", "elsewhere:1", 0)


def test_several_forks_in_one_step_give_each_child_a_valid_context(conn, tmp_path):
    model = script(tmp_path, {"match": "^Plan", "steps": [
        {"content": "", "tool_calls": [{"name": "fork", "arguments": {"name": "c1", "prompt": "one"}},
                                       {"name": "fork", "arguments": {"name": "c2", "prompt": "two"}}]},
        {"content": "ok"}]})
    fork("-n", "lead", "-m", model, "Plan")
    agent("run", "lead")
    for child in ("c1", "c2"):
        messages = json.loads(agent("replay", "--format", "openai", child).out)
        calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
        answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
        assert sorted(calls) == sorted(answered)
        assert messages[-1] == {"role": "user", "content": {"c1": "one", "c2": "two"}[child]}


def test_init_runs_no_turns(conn):
    result = agent("run", "init")
    assert (result.code, result.err) == (3, "agent-run: init doesn't run turns\n")
    assert agent("run", "-j", "2", "x").code == 2


def test_a_terminal_sees_the_reply_streamed(conn, fakeapi):
    import pty
    fork("-n", "a", "-m", "openai:gpt-test", "hi")
    fakeapi.reply("streamed words arrive in pieces", pieces=4)
    leader, follower = pty.openpty()
    proc = started("agent-run", "a", stdout=follower, text=False)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 1024)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    assert proc.wait() == 0, proc.stderr.read()
    assert output.replace(b"\r\n", b"\n") == b"streamed words arrive in pieces\n"
    assert fakeapi.last["body"]["stream"] is True


def test_a_bug_mid_turn_releases_the_agent_and_the_turn_resumes(conn, monkeypatch):
    from agentctl.models import offline
    fork("-n", "a", "-m", "echo", "hello")
    real = offline.EchoModel.complete

    def broken(self, *args, **kwargs):
        raise RuntimeError("model layer bug")
    monkeypatch.setattr(offline.EchoModel, "complete", broken)
    result = agent("run", "a")
    assert (result.code, result.err) == (70, "agent-run: internal error: RuntimeError: model layer bug "
                                             "(AGENTCTL_DEBUG=1 shows the details)\n")
    row = registry.resolve(conn, "a")
    assert (row["status"], row["lease_owner"], row["failures"]) == ("S", None, 1)
    assert conn.execute("SELECT status FROM turns").fetchall()[0][0] == "running"
    assert agent("run", "--all").code == 1               # backing off: cron leaves it alone
    monkeypatch.setattr(offline.EchoModel, "complete", real)
    assert agent("run", "a").out == "hello\n"            # the open turn resumes
    assert conn.execute("SELECT count(*), max(status) FROM turns").fetchone()[:] == (1, "done")


@pytest.mark.parametrize("value", ["lots", "０１００", "0", "-5", "1.5", "9" * 5000])
def test_a_bad_context_window_setting_is_refused_before_the_turn_opens(conn, monkeypatch,
                                                                       value):
    fork("-n", "a", "-m", "echo", "hello")
    monkeypatch.setenv("AGENTCTL_CONTEXT_WINDOW", value)
    result = agent("run", "a")
    shown = repr(value if len(value) <= 40 else value[:37] + "...")     # 40 in all
    assert result == Result(2, "", "agent-run: AGENTCTL_CONTEXT_WINDOW must be a whole number "
                                   f">= 1, not {shown}\n"), result
    assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 0
    assert registry.resolve(conn, "a")["status"] == "S"


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "1e400", "soon", "1e300"])
def test_a_lease_that_is_no_finite_positive_number_is_a_usage_error(conn, monkeypatch, value):
    """It was silently ignored (the released behaviour); as every other setting, it
    is exit 2 now, before the turn takes anything. 1e300 would overflow the
    heartbeat's wait."""
    fork("-n", "a", "-m", "echo", "hello")
    monkeypatch.setenv("AGENTCTL_LEASE", value)
    result = agent("run", "a")
    assert (result.code, result.out) == (2, ""), result
    assert result.err.startswith("agent-run: AGENTCTL_LEASE must be ") and value in result.err
    assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 0
    assert registry.resolve(conn, "a")["status"] == "S"


def test_format_json_is_the_record_and_json_its_alias(conn):
    """--format json (and jsonl) print the turn's record, as the released --json does."""
    records = []
    for n, flag in enumerate((["--format", "json"], ["--format", "jsonl"], ["--json"])):
        fork("-n", f"f{n}", "-m", "echo", "hello")
        result = agent("run", *flag, f"f{n}")
        assert result.code == 0, result.err
        records.append({k: v for k, v in json.loads(result.out).items()
                        if k not in ("turn", "agent")})
    assert records[0] == records[1] == records[2]
    assert records[0]["text"] == "hello" and records[0]["status"] == "done"
    fork("-n", "g", "-m", "echo", "hello")
    assert agent("run", "--format", "text", "g").out == "hello\n"
    assert agent("run", "--format", "tsv", "g").code == 2


def test_the_ps_tool_shows_the_status_agent_ps_shows(conn, tmp_path):
    """A child whose agent-run died holds status R in its row with a dead lease:
    agent-ps shows S, and so does the ps tool its parent's model calls."""
    fork("-n", "lead", "-m", script(tmp_path, {"steps": [
        {"tool_calls": [{"id": "p", "name": "ps", "arguments": {}}]}, {"content": "done"}]}))
    kid = fork("-p", "lead", "-n", "kid")
    conn.execute("UPDATE agents SET status = 'R', lease_owner = 'elsewhere:1', lease_until = ? "
                 "WHERE id = ?", (time.time() - 1, kid))
    assert agent("ps", "-o", "stat", "--format", "tsv", "--no-headers",
                 "--parent", "lead").out == "S\n"
    agent("send", "lead", "who is there?")
    assert agent("run", "lead").code == 0
    result = conn.execute("SELECT content FROM messages WHERE kind = 'tool_result' "
                          "AND tool_name = 'ps'").fetchone()[0]
    assert result == f"{kid} kid S agent"


def test_agentctl_host_names_the_lease_holder(conn, monkeypatch):
    """Containers often share a host name: AGENTCTL_HOST names the host in a lease."""
    fork("-n", "b", "-m", "echo", "hi")
    bad = shell("AGENTCTL_HOST=a:b agent-run b")
    assert bad.code == 2 and bad.err == "agent-run: AGENTCTL_HOST must be a host name " \
                                        "(no colon), not 'a:b'\n", bad
    assert registry.resolve(conn, "b")["status"] == "S"
    monkeypatch.setenv("AGENTCTL_HOST", "box-7")
    held = lease.claim(conn, "b")
    assert held["lease_owner"] == f"box-7:{os.getpid()}"
    assert lease.held(held)                     # this process, on "this host"
