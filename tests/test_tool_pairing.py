"""A tool result is sent only after its call, and every call is sent with a result, in what
agent-replay --format openai prints and what agent-run sends: a child whose parent's forking
turn was voided, a child forked at a call."""

import json

import pytest

from .conftest import agent, fork, script, scripted_calls

FORKING = {"match": "^go$", "steps": [
    {"content": "f", "tool_calls": [{"name": "fork",
                                     "arguments": {"name": "kid", "prompt": "child task"}}]},
    {"fail": "tempfail"}]}


@pytest.fixture
def sent(monkeypatch):
    """The messages of every call agent-run made to the scripted model."""
    return scripted_calls(monkeypatch)


def paired(messages):
    """Every tool message answers, once, a call of the assistant message before it (tool
    messages only in between), and every call is answered before anything else comes."""
    waiting = set()
    for m in messages:
        if m["role"] == "tool":
            if m["tool_call_id"] not in waiting:
                return False
            waiting.discard(m["tool_call_id"])
        elif waiting:
            return False
        else:
            waiting = {c["id"] for c in m.get("tool_calls") or ()}
    return not waiting


def openai(ref):
    result = agent("replay", "--format", "openai", ref)
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_a_child_of_a_voided_forking_turn_gets_no_result_without_its_call(tmp_path, sent):
    """The parent's turn forks, then is voided (KILL outside a run): its call is not
    in the child's context, nor is the child's answer to it."""
    fork("-n", "a", "-m", script(tmp_path, FORKING, {"reply": {"content": "done"}}), "go")
    assert agent("run", "a").code == 75
    assert agent("kill", "-s", "KILL", "a").code == 0
    assert agent("replay", "--full", "kid").out.count("(void)") == 2
    context = openai("kid")
    assert paired(context)
    assert [(m["role"], m["content"]) for m in context] == [("user", "go"),
                                                           ("user", "child task")]
    result = agent("run", "kid")
    assert (result.code, result.out) == (0, "done\n"), result.err
    assert sent[-1] == context and all(paired(m) for m in sent)


def test_a_turn_refused_after_it_forked_keeps_the_fork(tmp_path, sent, conn):
    """A request refused for good (exit 69) after a step ran its calls holds the agent
    with its turn open: the fork happened, so the step stays, and is not done again
    when the turn resumes."""
    steps = dict(FORKING, steps=FORKING["steps"][:1] + [{"fail": "error"}])
    fork("-n", "a", "-m", script(tmp_path, steps), "go")
    assert agent("run", "a").code == 69
    assert agent("why", "a").out.startswith("held after a failure")
    assert conn.execute("SELECT status FROM turns").fetchone()[0] == "running"
    script(tmp_path, dict(FORKING, steps=FORKING["steps"][:1] + [{"content": "done"}]))
    assert agent("run", "a").out == "done\n"                  # resumed, not redone
    assert conn.execute("SELECT count(*) FROM agents WHERE name = 'kid'").fetchone()[0] == 1
    context = openai("kid")
    assert paired(context)
    assert [m["role"] for m in context] == ["user", "assistant", "tool", "user"]
    assert sent and all(paired(m) for m in sent)


def test_a_child_forked_at_a_call_sees_it_answered(tmp_path, sent, conn):
    model = script(tmp_path, {"match": "^go$", "steps": [
        {"tool_calls": [{"name": "ps", "arguments": {}}]}, {"content": "listed"}]},
        {"reply": {"content": "ok"}})
    fork("-n", "a", "-m", model, "go")
    assert agent("run", "a").out == "listed\n"
    call = conn.execute("SELECT id FROM messages WHERE kind = 'tool_call'").fetchone()[0]
    fork("-p", "a", "-n", "b", "--at", call)
    context = openai("b")
    assert paired(context) and [m["role"] for m in context] == ["user", "assistant", "tool"]
    assert agent("send", "b", "and now?").code == 0
    assert agent("run", "b").out == "ok\n"
    assert paired(sent[-1]) and sent[-1][:3] == context


def test_a_task_refused_after_a_step_is_held_and_its_parent_told(tmp_path, conn):
    """Its steps kept and its turn open: held, not exited (a fix resumes it); its
    parent learns by a failure mail."""
    steps = dict(FORKING, steps=[{"tool_calls": [{"name": "ps", "arguments": {}}]},
                                 {"fail": "error"}])
    fork("-n", "boss")
    fork("-p", "boss", "-n", "t", "-r", "task", "-m", script(tmp_path, steps), "go")
    assert agent("run", "t").code == 69
    assert agent("wait", "--timeout", "0", "t").code == 1     # not exited
    assert agent("mail", "-c", "boss").out == "1\n"          # the failure notice
    script(tmp_path, dict(FORKING, steps=[steps["steps"][0], {"content": "listed"}]))
    assert agent("run", "t").out == "listed\n"
    result = agent("wait", "--format", "json", "-o", "name,status,exit_code", "t")
    assert result.code == 0 and json.loads(result.out) == [
        {"name": "t", "status": "exited", "exit_code": 0}]


