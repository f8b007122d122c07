"""kill -9 at every commit and model call of a turn that compacts its context,
writes a shared document and mails a peer, under a budget: after agent-run
again, the end state is the uninterrupted one, budget spending included
(only recorded model calls are charged, so a repeated call is charged once)."""

import re
import sys

import pytest

from agentctl.store import db, registry

from .conftest import agent, fork, script
from .test_crash import crash_everywhere, finish

AN_ID = re.compile(r"\b[A-Za-z0-9_-]{22}\b")
WHEN = re.compile(r"\d{4}-\d\d-\d\dT[\d:]+Z \(\w+ ago\)")
RULES = [
    {"match": r"^\[COMPACT\]", "reply": {"content": "Summary: three questions, answered."}},
    {"match": "Final task", "steps": [
        {"content": "filing", "tool_calls": [
            {"id": "d", "name": "doc_put", "arguments": {"name": "notes/final",
                                                         "body": "# Final\n\nfiled once\n",
                                                         "visibility": "global"}},
            {"id": "s", "name": "send", "arguments": {"to": "peer", "body": "filed"}}]},
        {"content": "done"}]},
    {"reply": {"content": "An answer. " * 30}},
]


def setup(path, monkeypatch, tmp_path):
    """A lead with history enough to compact, then the turn under test pending."""
    monkeypatch.setenv("AGENTCTL_DB", str(path))
    fork("-n", "peer")
    fork("-n", "lead", "-m", script(tmp_path, *RULES, name="long.jsonl"), "-w", "500",
         "--budget", "100000")
    for n in range(3):
        agent("send", "lead", f"Question {n}: " + "tell me more. " * 20)
        assert agent("run", "lead").code == 0
    assert agent("send", "lead", "Final task: file the notes").code == 0


def snapshot(path):
    conn = db.connect(str(path))
    try:
        lead = registry.resolve(conn, "lead")
        return {
            "messages": [(r[0], WHEN.sub("TIME", AN_ID.sub("ID", r[1]))) for r in conn.execute(
                "SELECT kind, content FROM messages WHERE agent_id = ? AND void = 0 "
                "ORDER BY id", (lead["id"],))],
            "compactions": [r[0] for r in conn.execute(
                "SELECT t.id = (SELECT max(id) FROM turns) FROM messages m JOIN turns t "
                "ON t.id = m.turn_id WHERE m.kind = 'compaction' AND m.void = 0 ORDER BY m.id")],
            "documents": [tuple(r) for r in conn.execute(
                "SELECT name, version, body FROM documents ORDER BY id")],
            "mail to peer": [r[0] for r in conn.execute(
                "SELECT body FROM mail m JOIN agents a ON a.id = m.recipient_id "
                "WHERE a.name = 'peer'")],
            "spent": (lead["spent"], lead["tokens_in"], lead["tokens_out"]),
            "turns": [tuple(r) for r in conn.execute(
                "SELECT status, steps, input_tokens, output_tokens FROM turns")],
            "replay": agent("replay", "--format", "jsonl", "lead").out.count("\n"),
        }
    finally:
        conn.close()


def tally(state, reference):
    """(mails lost, effects doubled): mail to the peer and document versions."""
    mails = len(state["mail to peer"]) - len(reference["mail to peer"])
    versions = len(state["documents"]) - len(reference["documents"])
    return max(0, -mails) + max(0, -versions), max(0, mails) + max(0, versions)


@pytest.fixture
def reference(tmp_path, monkeypatch):
    path = tmp_path / "reference.db"
    setup(path, monkeypatch, tmp_path)
    finish(path)
    state = snapshot(path)
    assert state["compactions"][-1] == 1, "the turn under test compacts"
    assert state["documents"] == [("notes/final", 1, "# Final\n\nfiled once\n")]
    assert state["mail to peer"] == ["filed"]
    assert state["spent"][0] == state["spent"][1] + state["spent"][2] > 0
    return state


@pytest.mark.sqlite_files
@pytest.mark.parametrize("point", ["before", "after", "model"])
def test_kill_9_in_a_compacting_turn_under_a_budget(point, reference, tmp_path, monkeypatch):
    crashes = crash_everywhere(point, reference, tmp_path, monkeypatch,
                               scenario=sys.modules[__name__])
    print(f"crashes injected in a compacting turn ({point}): {crashes}")
