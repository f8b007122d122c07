"""kill -9 of agent-run at every step boundary of a multi-step turn, then
agent-run again: the end state is the one an uninterrupted run leaves.

The turn (a scripted model) sends mail to a peer and to itself, forks a
child, reads its own mail mid-turn, signals the child, collects it with
wait, and ends: every kind of effect a tool has. crash_wrapper.py kills the
run just before and just after each of its commits, and inside each model
call; the test enumerates them all until the run gets through uncrashed.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from agentctl.store import db, registry

from .conftest import ROOT, agent, fork, script

WRAPPER = os.path.join(ROOT, "tests", "crash_wrapper.py")
AN_ID = re.compile(r"\b[A-Za-z0-9_-]{22}\b")
OPERATOR_MAILS = ("first operator mail", "second operator mail")

RULES = [
    {"match": "exit notification", "steps": [
        {"content": "collecting", "tool_calls": [{"id": "t_wait", "name": "wait",
                                                  "arguments": {}}]},
        {"content": "all done"}]},
    {"match": "note to self", "steps": [
        {"content": "stopping w1", "tool_calls": [
            {"id": "t_kill", "name": "kill", "arguments": {"agent": "w1"}},
            {"id": "t_check", "name": "check_mail", "arguments": {}}]},
        {"content": "unexpected: no exit notification"}]},
    {"match": "INBOX", "steps": [
        {"content": "starting", "tool_calls": [
            {"id": "t_peer", "name": "send", "arguments": {"to": "peer", "body": "hello peer"}},
            {"id": "t_self", "name": "send", "arguments": {"to": "lead", "body": "note to self"}},
            {"id": "t_fork", "name": "fork", "arguments": {"name": "w1", "prompt": "Survey"}},
            {"id": "t_read", "name": "read_mail", "arguments": {}}]},
        {"content": "unexpected: no mid-turn mail"}]},
]


def setup(path, monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTCTL_DB", str(path))
    fork("-n", "peer")
    fork("-n", "lead", "-m", script(tmp_path, *RULES, name="turn.jsonl"), "Plan the work")
    for body in OPERATOR_MAILS:
        assert agent("send", "lead", body).code == 0


def crashed_run(point, at, path, *args):
    """agent-run in a subprocess killed at (point, at); its exit status."""
    env = dict(os.environ, AGENTCTL_DB=str(path))
    proc = subprocess.run([sys.executable, WRAPPER, point, str(at), *args], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9 or "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode


def finish(path):
    """agent-run until it has nothing to do, as cron would; the exit statuses."""
    codes = []
    while not codes or codes[-1] == 0:
        result = agent("run", "lead")
        codes.append(result.code)
        assert len(codes) < 5 and result.code in (0, 1), result.err
    return codes


def snapshot(path):
    """What an uninterrupted run decides, with ids and times left out."""
    conn = db.connect(str(path))
    try:
        lead = registry.resolve(conn, "lead")
        children = conn.execute("SELECT id, name, status, exit_signal FROM agents "
                                "WHERE forked_from = ?", (lead["id"],)).fetchall()
        child_ids = [c["id"] for c in children]
        events = sorted(tuple(r) for r in conn.execute(
            f"SELECT kind, detail FROM events WHERE agent_id IN "
            f"({','.join('?' * len(child_ids))}) AND kind != 'fork'", child_ids))
        sent = sorted((r["recipient"], AN_ID.sub("ID", r["body"])) for r in conn.execute(
            "SELECT coalesce(r.name, r.id) AS recipient, m.body FROM mail m "
            "JOIN agents r ON r.id = m.recipient_id WHERE m.sender_id = ? OR m.sender_id IN "
            f"({','.join('?' * len(child_ids))})", [lead["id"], *child_ids]))
        unread = {r[0]: r[1] for r in conn.execute(
            "SELECT coalesce(a.name, '?'), count(*) FROM mail m JOIN agents a "
            "ON a.id = m.recipient_id WHERE m.read_at IS NULL GROUP BY a.name")}
        turns = [tuple(r) for r in conn.execute(
            "SELECT status, steps, mail_read FROM turns WHERE agent_id = ?", (lead["id"],))]
        own = conn.execute("SELECT id, kind, content, tool_name, tool_call_id FROM messages "
                           "WHERE agent_id = ? AND void = 0 ORDER BY id", (lead["id"],)).fetchall()
        # every operator mail consumed exactly once: read, and in exactly one inbox message
        consumed = [sum(m["content"].count(body) for m in own if m["kind"] == "user")
                    for body in OPERATOR_MAILS]
        read = conn.execute("SELECT count(*) FROM mail WHERE recipient_id = ? AND sender_id IS NULL "
                            "AND read_at IS NOT NULL AND read_turn IS NOT NULL",
                            (lead["id"],)).fetchone()[0]
        replay = json.loads(agent("replay", "--format", "openai", "lead").out)
        calls = [c["id"] for m in replay if m["role"] == "assistant"
                 for c in m.get("tool_calls", ())]
        answers = [m["tool_call_id"] for m in replay if m["role"] == "tool"]
        return {
            "lead": (lead["status"], lead["lease_owner"]),
            "children": sorted((c["name"], c["status"], c["exit_signal"]) for c in children),
            "child events": events, "sent": sent, "unread": unread, "turns": turns,
            "consumed": consumed, "operator mails read": read,
            "replay": [(m["role"], [c["function"]["name"] for c in m.get("tool_calls", ())])
                       for m in replay],
            "calls answered once": sorted(calls) == sorted(answers) == sorted(set(answers)),
            "messages": [(m["kind"], m["tool_name"], m["tool_call_id"],
                          AN_ID.sub("ID", m["content"]) if m["kind"] == "tool_result" else None)
                         for m in own],
            "final": [m["content"] for m in own if m["kind"] == "assistant"][-1:],
        }
    finally:
        conn.close()


@pytest.fixture
def reference(tmp_path, monkeypatch):
    path = tmp_path / "reference.db"
    setup(path, monkeypatch, tmp_path)
    assert finish(path) == [0, 1]
    state = snapshot(path)
    # the scenario does what it claims, so a crash has every effect to double
    assert state["sent"] == [("lead", "note to self"),
                             ("lead", "w1 (ID) was killed by TERM; exit status 143"),
                             ("peer", "hello peer")]
    assert state["children"] == [("w1", "X", "TERM")]
    assert state["child events"] == [("exit", "killed by TERM"), ("mail", None), ("reap", None),
                                     ("signal", "TERM")]
    assert state["turns"] == [("done", 4, 4)] and state["consumed"] == [1, 1]
    assert state["unread"] == {"peer": 1} and state["lead"] == ("S", None)
    assert state["final"] == ["all done"] and state["calls answered once"]
    return state


def tally(state, reference):
    """(mails lost, effects doubled) of a crashed run against the reference."""
    lost = sum(1 for n in state["consumed"] if n == 0) + \
        max(0, len(reference["sent"]) - len(state["sent"]))
    doubled = sum(n - 1 for n in state["consumed"] if n > 1) + \
        max(0, len(state["sent"]) - len(reference["sent"])) + \
        max(0, len(state["children"]) - len(reference["children"]))
    return lost, doubled


def crash_everywhere(point, reference, tmp_path, monkeypatch, second=None, scenario=None):
    """Crash at `point` N = 1, 2, ... until a run gets through; after each,
    finish the turn and compare. With `second`, the resuming run is crashed
    too, at the same N. `scenario` (a module) gives setup, finish, snapshot
    and tally, this one's by default. Returns how many crashes were injected."""
    s = scenario or sys.modules[__name__]
    crashes = 0
    for at in range(1, 200):
        path = tmp_path / f"{point}-{second}-{at}.db"
        s.setup(path, monkeypatch, tmp_path)
        code = crashed_run(point, at, path, "lead")
        if code != -9:
            assert code == 0
            break
        crashes += 1
        if second and crashed_run(second, at, path, "lead") == -9:
            crashes += 1
        s.finish(path)
        state = s.snapshot(path)
        lost, doubled = s.tally(state, reference)
        assert (lost, doubled) == (0, 0), f"crash {point} #{at}: {lost} lost, {doubled} doubled"
        assert state == reference, f"crash {point} #{at} (then {second})"
    assert crashes >= 3, "the crash points were never reached"
    return crashes


@pytest.mark.sqlite_files
@pytest.mark.parametrize("point", ["before", "after", "model"])
def test_kill_9_at_every_step_boundary(point, reference, tmp_path, monkeypatch):
    crashes = crash_everywhere(point, reference, tmp_path, monkeypatch)
    print(f"crashes injected ({point}): {crashes}; mails lost, effects doubled: none")


@pytest.mark.sqlite_files
def test_kill_9_again_while_resuming(reference, tmp_path, monkeypatch):
    crashes = crash_everywhere("before", reference, tmp_path, monkeypatch, second="after")
    print(f"crashes injected (before, then after): {crashes}; mails lost, effects doubled: none")


def test_a_turn_cut_between_its_last_reply_and_its_commit_asks_the_model_no_more(
        conn, monkeypatch):
    from agentctl.store import turnlog
    fork("-n", "a", "-m", "echo", "hello")
    real = turnlog.finish

    def cut(*args, **kwargs):
        raise RuntimeError("cut before the commit")
    monkeypatch.setattr(turnlog, "finish", cut)
    assert agent("run", "a").code == 70
    monkeypatch.setattr(turnlog, "finish", real)
    result = agent("run", "--json", "a")
    assert json.loads(result.out)["steps"] == 1 and json.loads(result.out)["text"] == "hello"
    assert [r[0] for r in conn.execute("SELECT kind FROM messages ORDER BY id")] == \
        ["user", "assistant"]


def test_the_wait_tool_reaps_and_answers_in_one_transaction(conn, tmp_path, monkeypatch):
    from agentctl.store import history
    fork("-n", "lead", "-m", script(tmp_path, {"steps": [
        {"tool_calls": [{"id": "w", "name": "wait", "arguments": {}}]}, {"content": "ok"}]}))
    fork("-p", "lead", "-n", "w1")
    agent("kill", "w1")
    real = history.append

    def cut(conn, agent_id, kind, *args, **kwargs):
        if kind == "tool_result" and kwargs.get("tool_name") == "wait":
            raise RuntimeError("cut before the result")
        return real(conn, agent_id, kind, *args, **kwargs)
    monkeypatch.setattr(history, "append", cut)
    assert agent("run", "lead").code == 70
    assert registry.resolve(conn, "w1")["status"] == "Z"      # not reaped without a result
    monkeypatch.setattr(history, "append", real)
    assert agent("run", "lead").out == "ok\n"
    result = conn.execute("SELECT content FROM messages WHERE kind = 'tool_result'").fetchone()[0]
    assert result.endswith(" w1 killed 143")
    assert registry.resolve(conn, "w1")["status"] == "X"
