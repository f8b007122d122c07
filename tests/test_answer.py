"""agent-answer: the operator, or an ancestor, decides a paused agent's request: only
they may; one decision wins a race; none is taken after the deadline; a wrong one is
refused in one line."""

import pytest

from .conftest import (ASKING, agent, clock_passes, fork, pending_ids, script, shell, started,
                       status, tool_results)


def test_only_an_ancestor_may_answer(tmp_path):
    fork("-n", "w", "-m", script(tmp_path, ASKING), "go")
    stranger = fork("-n", "stranger")
    agent("run", "w")
    req = pending_ids()[0]
    result = shell(f"AGENT_ID={stranger} agent-answer {req} hi")
    assert result.code == 3 and "only the operator or an ancestor" in result.err


@pytest.mark.parametrize("args, code, message", [
    (["--approve", "REQ"], 2, "is a question: answer it with TEXT"),
    (["REQ", ""], 2, "an empty answer"),
    (["nope", "x"], 1, "no such request: nope"),
    (["abc", "x"], 2, "a request prefix has at least 4 characters"),
    (["--approve", "--deny", "REQ"], 2, "--approve or --deny, not both"),
    (["-c", "REQ"], 2, "-c takes no REQ"),
    (["--approve"], 2, "missing REQ"),
])
def test_bad_answers_are_one_line(tmp_path, args, code, message):
    fork("-n", "w", "-m", script(tmp_path, ASKING), "go")
    agent("run", "w")
    req = pending_ids()[0]
    result = agent("answer", *[req if a == "REQ" else a for a in args])
    assert (result.code, result.out) == (code, ""), result
    assert result.err.startswith("agent-answer: ") and message in result.err
    assert result.err.count("\n") == 1
    assert pending_ids() == [req]


def test_two_answers_racing_one_wins(tmp_path):
    fork("-n", "w", "-m", script(tmp_path, ASKING), "go")
    agent("run", "w")
    req = pending_ids()[0]
    procs = [started("agent-answer", req, f"answer {n}") for n in range(6)]
    outcomes = [(p.wait(), p.communicate()) for p in procs]
    won = [o for o in outcomes if o[0] == 0]
    lost = [o for o in outcomes if o[0] == 3]
    assert len(won) == 1 and len(lost) == 5, outcomes
    assert all("was already answered by the operator" in o[1][1] for o in lost)


def test_a_decision_after_the_deadline_is_refused_whoever_comes_first(files, conn, tmp_path):
    """agent-answer after a request's deadline answered it, and a late --approve would
    run the call, when no writing program had carried the deadline out in between."""
    work, model = files
    fork("-n", "g", "--allow", "write_file", "--ask", "write_*:1s", "--cwd", str(work),
         "-m", model, "write")
    assert agent("run", "g").code == 0 and status(conn, "g") == "P"
    req, deadline = conn.execute("SELECT id, deadline FROM requests").fetchone()
    clock_passes(conn, deadline, "the request's deadline")
    late = agent("answer", "--approve", req)
    assert late.code == 3
    assert late.err.startswith(f"agent-answer: request {req} expired: no answer in time")
    assert agent("run", "g").code == 0
    assert tool_results(conn, "g") == ["error: no answer in time: the request expired"]
    assert not (work / "out.txt").exists()
