"""Pause for a human: the ask tool and --ask approvals pause the turn (status P); the
operator (agent-answer) or an ancestor (the answer tool) decides; the next run resumes
the turn at the call."""

import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from agentctl.store import registry

from .conftest import (ASKING, BIN, PATIENCE, agent, clock_passes, fork, pending_ids, script,
                       shell, status, tool_results)


def test_a_question_pauses_the_turn_and_the_operators_answer_resumes_it(tmp_path, conn):
    fork("-n", "w", "-m", script(tmp_path, ASKING), "go")
    paused = agent("run", "w")
    assert paused.code == 0 and paused.out == ""
    assert "w: paused: request" in paused.err and "(agent-answer)" in paused.err
    assert status(conn, "w") == "P"
    assert registry.resolve(conn, "w")["lease_owner"] is None      # it holds no lease
    assert agent("ps", "--status", "P", "-o", "name", "--no-headers").lines == ["w"]
    assert agent("run", "w").code == 1                  # nothing to do until answered
    assert agent("run", "--all").code == 1
    listed = [json.loads(line) for line in agent("answer", "--format", "jsonl").lines]
    assert [(r["name"], r["kind"], r["what"]) for r in listed] == [("w", "question",
                                                                    "Which color?")]
    check = agent("answer", "-c")
    assert (check.code, check.out) == (0, "1\n")
    req = listed[0]["id"]
    assert agent("answer", req[:6], "blue").out == f"{req} answered\n"
    assert status(conn, "w") == "S"
    assert agent("answer", "-c").code == 1
    resumed = agent("run", "w")
    assert resumed.code == 0 and resumed.out == "done asking\n", resumed
    assert tool_results(conn, "w") == ["blue"]
    assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 1     # the same turn
    replay = agent("replay", "w").out
    assert replay.index("Which color?") < replay.index("blue") < replay.index("done asking")


def test_an_approval_runs_the_call_after_approve_and_not_after_deny(files, conn):
    work, model = files
    fork("-n", "a", "--allow", "write_file", "--ask", "write_*", "--cwd", str(work), "--shared",
         "-m", model, "write")
    fork("-n", "b", "--allow", "write_file", "--ask", "write_*", "--cwd", str(work), "--shared",
         "-m", model, "write")
    assert agent("run", "a").code == 0 and agent("run", "b").code == 0
    listed = [json.loads(line) for line in agent("answer", "--format", "jsonl").lines]
    # the exact call, control characters escaped as JSON does
    assert listed[0]["what"] == 'write_file {"path": "out.txt", "content": "hi\\u001b]0;x"}'
    assert not (work / "out.txt").exists()
    assert agent("answer", "--deny", listed[1]["id"], "not now").code == 0
    assert agent("answer", "--approve", listed[0]["id"]).code == 0
    assert agent("run", "b").code == 0
    assert tool_results(conn, "b") == ["error: denied by the operator: not now"]
    assert not (work / "out.txt").exists()
    assert agent("run", "a").out == "wrote it\n"
    assert (work / "out.txt").read_text() == "hi\x1b]0;x"
    assert tool_results(conn, "a") == ["wrote 7 bytes to out.txt"]


def test_a_call_that_does_not_fit_its_tool_is_put_to_no_one(tmp_path, conn):
    """Its arguments are checked before anyone is asked: an approval would only run a
    call that fails."""
    work = tmp_path / "work"
    work.mkdir()
    model = script(tmp_path, {"match": "^write", "steps": [
        {"content": "", "tool_calls": [{"name": "write_file", "arguments": {"path": 5}}]},
        {"content": "gave up"}]})
    fork("-n", "a", "--allow", "write_file", "--ask", "write_*", "--cwd", str(work), "--shared",
         "-m", model, "write")
    assert agent("run", "a").out == "gave up\n"
    assert tool_results(conn, "a") == ["error: content is missing"]
    assert pending_ids() == [] and status(conn, "a") == "S"


def test_the_parent_is_told_by_mail_and_answers_with_the_answer_tool(tmp_path, conn):
    lead_model = script(tmp_path, {"match": "INBOX", "steps": [
        {"content": "", "tool_calls": [{"name": "answer", "arguments": {"request": "REQ",
                                                                        "answer": "green"}}]},
        {"content": "answered"}]}, name="lead.jsonl")
    fork("-n", "lead", "-m", lead_model)
    fork("-p", "lead", "-n", "w", "-m", script(tmp_path, ASKING), "go")
    assert agent("run", "w").code == 0
    req = pending_ids()[0]
    assert [r[0] for r in conn.execute("SELECT kind FROM mail")] == ["request"]
    body = agent("mail", "--peek", "-r", "lead").out
    assert f"asks (request {req})" in body and "Which color?" in body
    (tmp_path / "lead.jsonl").write_text((tmp_path / "lead.jsonl").read_text()
                                         .replace("REQ", req))
    assert agent("run", "lead").code == 0
    assert tool_results(conn, "lead") == [f"request {req} answered"]
    assert agent("run", "w").out == "done asking\n"
    assert tool_results(conn, "w") == ["green"]
    late = agent("answer", req, "red")          # the first answer won
    assert late.code == 3 and late.err == f"agent-answer: request {req} was already " \
                                            "answered by lead\n"


def test_a_request_expires_at_its_deadline(files, conn, tmp_path, monkeypatch):
    work, model = files
    fork("-n", "g", "--allow", "write_file", "--ask", "write_*:1s", "--cwd", str(work), "--shared",
         "-m", model, "write")
    fork("-n", "q", "-m", script(tmp_path, ASKING), "go")
    monkeypatch.setenv("AGENTCTL_ASK_TIMEOUT", "1")
    assert agent("run", "g").code == 0 and agent("run", "q").code == 0
    assert len(pending_ids()) == 2
    clock_passes(conn, conn.execute("SELECT max(deadline) FROM requests").fetchone()[0],
                 "the requests' deadlines")
    result = agent("run", "--all")          # carries the deadlines out, then resumes both
    assert result.code == 0, result.err
    assert pending_ids() == []
    assert tool_results(conn, "g") == ["error: no answer in time: the request expired"]
    assert tool_results(conn, "q") == ["error: no answer in time: the request expired"]
    assert not (work / "out.txt").exists()
    assert agent("answer", "--approve", conn.execute(
        "SELECT id FROM requests WHERE kind = 'approval'").fetchone()[0]).code == 3


def test_signals_on_a_paused_agent(tmp_path, conn):
    for name in ("s", "t", "k"):
        fork("-n", name, "-m", script(tmp_path, ASKING), "go")
        agent("run", name)
    agent("kill", "-s", "STOP", "s")
    assert status(conn, "s") == "T"
    agent("kill", "-s", "CONT", "s")
    assert status(conn, "s") == "P"                     # back to its request
    agent("kill", "t")                                  # TERM: denied, ends its turn, exits
    assert status(conn, "t") == "S"
    assert agent("run", "t").out == "done asking\n"
    assert tool_results(conn, "t") == ["error: denied by the operator: the agent was sent TERM"]
    assert status(conn, "t") == "Z" and registry.resolve(conn, "t")["exit_signal"] == "TERM"
    agent("kill", "-s", "KILL", "k")                    # KILL: cancelled, at once
    assert status(conn, "k") == "Z"
    decisions = dict(conn.execute(
        "SELECT a.name, r.decision FROM requests r JOIN agents a ON a.id = r.agent_id"))
    assert decisions == {"s": None, "t": "denied", "k": "cancelled"}


def test_the_operator_is_asked_at_the_terminal(tmp_path, conn):
    """stdin, stdout and stderr all a terminal (a pseudo-terminal here): asked right
    there, as sudo asks for a password, and the same turn goes on."""
    fork("-n", "w", "-m", script(tmp_path, ASKING), "go")
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(sys.executable, [sys.executable, os.path.join(BIN, "agent-run"), "w"],
                  dict(os.environ))
    seen = b""
    deadline = time.monotonic() + PATIENCE
    while b"answer> " not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.5)[0]:
            seen += os.read(fd, 1024)
    os.write(fd, b"purple\n")
    while time.monotonic() < deadline:
        try:
            if select.select([fd], [], [], 0.5)[0]:
                chunk = os.read(fd, 1024)
                if not chunk:
                    break
                seen += chunk
        except OSError:
            break
    _, code = os.waitpid(pid, 0)
    assert b"w asks: Which color?" in seen or b"asks: Which color?" in seen, seen
    assert os.waitstatus_to_exitcode(code) == 0, seen
    assert b"done asking" in seen
    assert tool_results(conn, "w") == ["purple"] and status(conn, "w") == "S"


def test_no_prompt_and_a_pipe_never_ask(tmp_path, conn):
    fork("-n", "w", "-m", script(tmp_path, ASKING), "go")
    result = shell("agent-run --no-prompt w < /dev/null")
    assert result.code == 0 and status(conn, "w") == "P"


WRAPPER = os.path.join(os.path.dirname(__file__), "crash_wrapper.py")


def wrapped(point, n, *args, program="run"):
    return subprocess.run([sys.executable, WRAPPER, point, str(n), *args],
                          env=dict(os.environ, CRASH_PROGRAM=program), capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=60)


@pytest.mark.sqlite_files
@pytest.mark.parametrize("point", ["before", "after"])
def test_kill_9_at_every_boundary_of_asking_answering_and_resuming(files, tmp_path, point,
                                                                   monkeypatch):
    """agent-run, then agent-answer, killed at their Nth commit for every N; whatever is
    run after finishes the work: the request is made once, decided once, and the file
    written exactly once."""
    from agentctl.store import db
    work, model = files
    for n in range(1, 10):
        path = str(tmp_path / f"{point}-{n}.db")
        monkeypatch.setenv("AGENTCTL_DB", path)
        for f in work.iterdir():
            f.unlink()
        fork("-n", "w", "--allow", "write_file", "--ask", "write_*", "--cwd", str(work), "--shared",
             "-m", model, "write")
        wrapped(point, n, "w")                              # asking (and maybe more)
        answers = 0
        for _ in range(10):
            ids = pending_ids()
            if ids:
                if answers == 0:                            # answering, killed
                    wrapped(point, 1, "--approve", ids[0], program="answer")
                else:
                    assert agent("answer", "--approve", ids[0]).code == 0
                answers += 1
                continue
            result = agent("run", "w")                      # resuming
            if result.code == 1:
                break
            assert result.code in (0, 75), result
        conn = db.connect(path)
        assert (work / "out.txt").exists(), (point, n, agent("log").out, pending_ids())
        assert (work / "out.txt").read_text() == "hi\x1b]0;x", (point, n)
        assert tool_results(conn, "w") == ["wrote 7 bytes to out.txt"], (point, n)
        assert conn.execute("SELECT count(*), min(decision) FROM requests").fetchone()[:] == \
            (1, "approved"), (point, n)
        assert status(conn, "w") == "S" and registry.resolve(conn, "w")["lease_owner"] is None
        conn.close()


def test_only_an_ancestor_that_could_make_the_call_without_asking_may_approve(files, tmp_path,
                                                                                conn):
    """A lead forked with --allow write_file --ask write_file forks a worker whose write
    pauses: the lead's own model approved it with the answer tool, and the file was
    written with no decision by anyone who may write without asking. Now the lead is
    refused; an ancestor that may write without asking, or the operator, decides."""
    work, model = files
    approving = script(tmp_path, {"match": "INBOX", "steps": [
        {"content": "", "tool_calls": [{"name": "answer", "arguments": {"request": "REQ",
                                                                        "approve": True}}]},
        {"content": "approved"}]}, name="approver.jsonl")
    fork("-n", "boss", "--allow", "write_file", "--cwd", str(work), "--shared", "-m", approving)
    fork("-p", "boss", "-n", "lead", "--allow", "write_file", "--ask", "write_file",
         "-m", approving)
    fork("-p", "lead", "-n", "w", "--allow", "write_file", "--cwd", str(work), "--shared", "-m", model,
         "write")
    assert agent("run", "w").code == 0 and status(conn, "w") == "P"
    req = pending_ids()[0]
    path = tmp_path / "approver.jsonl"
    path.write_text(path.read_text().replace("REQ", req))
    assert agent("run", "lead").code == 0
    assert tool_results(conn, "lead") == [f"error: request {req}: lead may not run write_file "
                                     "without asking, so it may not approve it"]
    assert status(conn, "w") == "P" and not (work / "out.txt").exists()
    agent("send", "boss", "INBOX: approve it")
    assert agent("run", "boss").code == 0
    assert tool_results(conn, "boss") == [f"request {req} approved"]
    assert agent("run", "w").out == "wrote it\n"
    assert (work / "out.txt").exists()


def test_the_grants_know_every_built_in_tool():
    from agentctl.ops.grants import BUILT_IN
    from agentctl.turn.builtin import SPECS
    assert BUILT_IN == set(SPECS)
