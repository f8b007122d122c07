"""An MCP server's question during a call (elicitation/create) as a request: the turn
pauses, agent-run exits, the operator (or an ancestor) answers with agent-answer, and
the next agent-run makes the call again, giving the server the answer it asks for
(agent-run(1), MCP servers; ops/elicitation.py)."""

import json
import os

import pytest

from agentctl.errors import UsageError
from agentctl.ops import elicitation
from agentctl.store.db import connect

from .conftest import (agent, calling, fork, mails, pending_ids, script, shell, status,
                       tool_results)
from .test_external_tools import work_dir
from .test_mcp import configure, notes, starts


@pytest.fixture
def asked(tmp_path, monkeypatch):
    """Agent w called notes__greet, whose server asked who is there: (its request, the
    server's start count file)."""
    work = work_dir(tmp_path)
    configure(tmp_path, monkeypatch, {"notes": notes(work / "starts")})
    fork("-n", "w", "--allow", "notes__*",
         "-m", script(tmp_path, calling([("notes__greet", {})])), "go")
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    assert status(connect(os.environ["AGENTCTL_DB"]), "w") == "P"
    req, = pending_ids()
    return req, work / "starts"


def test_a_servers_question_pauses_the_turn_and_its_answer_is_given_to_the_call_again(asked):
    req, count = asked
    conn = connect(os.environ["AGENTCTL_DB"])
    listed = agent("answer", "--format", "json")
    row, = json.loads(listed.out)
    assert (row["kind"], row["what"]) == ("elicitation", "notes__greet asks: Who is there? "
                                          "[name (string, required), age (integer)]")
    assert tool_results(conn, "w") == []            # no result yet: the call waits
    decided = agent("answer", req, '{"name": "Ada", "age": 36}')
    assert decided.code == 0, decided.err
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    assert tool_results(conn, "w") == ["hello Ada, 36"]
    assert starts(count) == 2                       # asked once, then called again
    assert status(conn, "w") != "P" and pending_ids() == []


def test_a_denied_question_is_declined_to_the_server(asked):
    req, _ = asked
    assert agent("answer", "--deny", req, "not telling").code == 0
    assert agent("run", "w").code == 0
    assert tool_results(connect(os.environ["AGENTCTL_DB"]), "w") == ["no one (decline)"]


@pytest.mark.parametrize("answer, said", [
    ("Ada", "form has name (string, required), age (integer): answer with a JSON object"),
    ('{"age": 3}', "wants 'name' too"),
    ('{"name": "Ada", "age": "old"}', "field 'age' is integer: 'old' is not"),
    ('{"name": "Ada", "pet": "cat"}', "has no field 'pet'"),
])
def test_an_answer_that_does_not_fit_the_form_is_refused_in_one_line(asked, answer, said):
    req, _ = asked
    refused = agent("answer", req, answer)
    assert (refused.code, refused.out) == (2, ""), refused
    assert refused.err.startswith(f"agent-answer: request {req}: the server's ") and \
        said in refused.err and refused.err.count("\n") == 1, refused.err
    assert agent("answer", "--approve", req).code == 2
    assert pending_ids() == [req]


def test_a_one_field_form_takes_its_text_and_fields_are_read_as_their_kind():
    form = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}},
                       "required": ["n"]})
    assert elicitation.content(form, "42") == {"n": 42}
    flag = {"properties": {"ok": {"type": "boolean"}}}
    assert elicitation.content(flag, "yes") == {"ok": True}
    with pytest.raises(UsageError, match="answer yes or no"):
        elicitation.content(flag, "perhaps")
    pick = {"properties": {"c": {"type": "string", "enum": ["red", "blue"]}}}
    assert elicitation.fields(pick) == "c (one of red|blue)"
    with pytest.raises(UsageError, match="one of red|blue"):
        elicitation.content(pick, "green")
    assert elicitation.answers([{"decision": "answered", "answer": '{"n": 1}'},
                                {"decision": "denied", "answer": "no"},
                                {"decision": "expired", "answer": None}]) == [
        {"action": "accept", "content": {"n": 1}}, {"action": "decline"},
        {"action": "cancel"}]


def test_a_childs_question_is_mailed_to_its_parent_which_may_answer_it(tmp_path, monkeypatch):
    work = work_dir(tmp_path)
    configure(tmp_path, monkeypatch, {"notes": notes(work / "starts")})
    lead = fork("-n", "lead", "--allow", "notes__*", "-m", "echo", "hi")
    fork("-n", "c", "--parent", "lead", "--allow", "notes__*",
         "-m", script(tmp_path, calling([("notes__greet", {})])), "go")
    assert agent("run", "c").code == 0
    req, = pending_ids()
    conn = connect(os.environ["AGENTCTL_DB"])
    told, = mails(conn, "lead", "request")
    assert f"called notes__greet, whose MCP server asks (request {req}):\nWho is there?\n" \
        "Its form: name (string, required), age (integer)." in told
    answered = shell(f"AGENT_ID={lead} agent-answer {req} '{{\"name\": \"Bo\"}}'")
    assert answered.code == 0, answered.err
    assert agent("run", "c").code == 0
    assert tool_results(conn, "c") == ["hello Bo, 0"]


def test_at_a_terminal_the_operator_is_asked_there_and_the_call_made_again(tmp_path,
                                                                           monkeypatch):
    """stdin, stdout and stderr a (pseudo-)terminal: the server's question is asked
    right there, again after an answer that doesn't fit its form, and the same run
    makes the call again with the answer."""
    import pty
    import select
    import sys
    import time
    from .conftest import BIN, PATIENCE
    work = work_dir(tmp_path)
    configure(tmp_path, monkeypatch, {"notes": notes(work / "starts")})
    fork("-n", "w", "--allow", "notes__*",
         "-m", script(tmp_path, calling([("notes__greet", {})])), "go")
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(sys.executable, [sys.executable, os.path.join(BIN, "agent-run"), "w"],
                  dict(os.environ))
    seen, deadline = b"", time.monotonic() + PATIENCE

    def until(text):
        nonlocal seen
        while seen.count(b"answer> ") < text and time.monotonic() < deadline:
            try:
                if select.select([fd], [], [], 0.5)[0]:
                    seen += os.read(fd, 4096)
            except OSError:         # (it ended: what it said is in `seen`)
                return
    until(1)
    os.write(fd, b"Ada\n")                          # (two fields: not a JSON object)
    until(2)
    os.write(fd, b'{"name": "Ada", "age": 3}\n')
    while time.monotonic() < deadline:
        try:
            if not select.select([fd], [], [], 0.5)[0]:
                continue
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    _, code = os.waitpid(pid, 0)
    assert b"the MCP server of notes__greet asks: Who is there?" in seen, seen
    assert b"answer with a JSON object" in seen, seen
    assert os.waitstatus_to_exitcode(code) == 0, seen
    assert tool_results(connect(os.environ["AGENTCTL_DB"]), "w") == ["hello Ada, 3"]
