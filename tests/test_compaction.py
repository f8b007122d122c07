"""Compaction: a context window per agent, the older part summarised by the agent's model,
replay starting from the summary with the recent messages verbatim, nothing deleted."""

import json

import pytest

from agentctl import voice
from agentctl.turn import compaction
from agentctl.store import registry
from agentctl.models import offline
from agentctl.models.base import estimate_tokens, message_chars

from .conftest import agent, script, scripted_calls
from .fakeapi import fakeapi  # noqa: F401

ANSWER = "An answer that is long enough to fill the context quickly. " * 7      # ~100 tokens
SUMMARY = "Summary: the operator asked numbered questions; I answered each one."


@pytest.fixture
def calls(monkeypatch):
    """What each model call was sent: (kind, estimated tokens of its messages)."""
    return scripted_calls(monkeypatch, lambda messages: (
        "summary" if offline.latest_user_text(messages).startswith("[COMPACT]") else "step",
        estimate_tokens(message_chars(messages))))


def rules(tmp_path):
    return script(tmp_path, {"match": r"^\[COMPACT\]", "reply": {"content": SUMMARY}},
                  {"reply": {"content": ANSWER}})


def converse(turns, window, model):
    """The operator mails a question a turn; returns the tokens each turn sent."""
    assert agent("fork", "-n", "a", "-m", model, "-w", window, "-s", "Answer briefly.").code == 0
    for n in range(1, turns + 1):
        assert agent("send", "a", f"Question {n}: " + "why is the sky blue? " * 8).code == 0
        result = agent("run", "a", "--json")
        assert result.code == 0, result.err
    return [json.loads(line) for line in agent("ps", "-a", "-o", "id", "--format", "jsonl").lines]


def replay(ref, *args):
    result = agent("replay", ref, "--format", "jsonl", *args)
    assert result.code == 0, result.err
    return [json.loads(line) for line in result.lines]


def test_fifty_turns_stay_under_the_window(tmp_path, calls, conn):
    converse(50, 2000, rules(tmp_path))
    steps = [tokens for kind, tokens in calls if kind == "step"]
    summaries = [tokens for kind, tokens in calls if kind == "summary"]
    assert len(steps) == 50
    assert max(steps) <= 2000
    assert summaries, "the context outgrew the window, so it must have been compacted"
    assert max(summaries) <= 2000 + 400        # the summarised part: at most one turn over
    # The summary sits where replay says: first, then messages kept from keep_from on.
    records = replay("a")
    assert records[0]["kind"] == "system"
    head = records[1]
    assert head["kind"] == "compaction" and head["content"] == SUMMARY
    kept = [r["id"] for r in records[2:]]
    assert kept and min(kept) == head["keep_from"] and kept == sorted(kept)
    assert head["id"] > head["keep_from"]
    # Nothing is deleted: --full shows every message the agent ever recorded.
    full = replay("a", "--full")
    total = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert len(full) == total + 1          # and the system prompt
    assert sum(r["kind"] == "compaction" for r in full) == len(summaries)
    text = agent("replay", "a").out
    assert text.count("compaction") == 1 and f"(keeps #{head['keep_from']} on)" in text


def test_without_compaction_the_context_grows(tmp_path, calls):
    converse(50, 1_000_000, rules(tmp_path))
    steps = [tokens for kind, tokens in calls if kind == "step"]
    assert all(kind == "step" for kind, _ in calls)
    assert steps == sorted(steps) and steps[-1] > 4 * 2000


def test_the_model_sees_the_summary_as_a_user_message_first(tmp_path, calls):
    converse(25, 1500, rules(tmp_path))
    messages = json.loads(agent("replay", "a", "--format", "openai").out)
    assert [m["role"] for m in messages[:2]] == ["system", "user"]
    assert messages[1]["content"] == voice.SUMMARY_HEAD + SUMMARY
    assert all(m["role"] != "system" for m in messages[1:])


def test_reported_usage_triggers_compaction(tmp_path, calls, conn):
    model = script(tmp_path, {"match": r"^\[COMPACT\]", "reply": {"content": SUMMARY}},
                   {"match": "first", "reply": {"content": "ok",
                                                "usage": {"input_tokens": 5000,
                                                          "output_tokens": 10}}},
                   {"reply": {"content": "fine"}})
    assert agent("fork", "-n", "a", "-m", model, "-w", "3000", "first").code == 0
    assert agent("run", "a").code == 0
    measured = conn.execute("SELECT tokens FROM messages WHERE kind = 'assistant'").fetchone()
    assert measured[0] == 5010
    assert [k for k, _ in calls] == ["step"]
    assert agent("send", "a", "second").code == 0
    assert agent("run", "a").code == 0
    assert [k for k, _ in calls] == ["step", "summary", "step"]
    records = replay("a")
    assert records[0]["kind"] == "compaction"
    assert [r["content"] for r in records[1:]] == ["ok", records[2]["content"], "fine"]
    assert "second" in records[2]["content"]
    # The summary call is charged to the turn.
    turn = conn.execute("SELECT input_tokens FROM turns ORDER BY id DESC").fetchone()
    assert turn[0] == sum(tokens for _, tokens in calls[1:])


def test_a_child_compacts_messages_kept_in_its_parent(tmp_path, calls, conn):
    model = rules(tmp_path)
    assert agent("fork", "-n", "p", "-m", model, "-w", "100000").code == 0
    for n in range(6):
        agent("send", "p", f"Question {n}")
        assert agent("run", "p").code == 0
    child = agent("fork", "-p", "p", "-n", "c", "-w", "600", "Go on.").out.strip()
    assert registry.resolve(conn, "c")["context_window"] == 600
    assert agent("run", "c").code == 0
    assert [k for k, _ in calls][-2:] == ["summary", "step"]
    records = replay("c")
    head = records[0]
    assert head["kind"] == "compaction" and head["agent_id"] == child
    owners = [r["agent_id"] for r in records[1:]]
    assert owners[0] != child, "the kept messages start in the parent's history"
    assert [r["id"] for r in records[1:]] == sorted(r["id"] for r in records[1:])
    assert records[1]["id"] == head["keep_from"]
    # The parent is untouched, and a grandchild inherits the child's summary and window.
    assert all(r["kind"] != "compaction" for r in replay("p"))
    agent("fork", "-p", "c", "-n", "g")
    assert replay("g")[0]["id"] == head["id"]
    assert registry.resolve(conn, "g")["context_window"] == 600
    # A message summarised is in the record (--full), not in the context: no fork there.
    summarised = replay("c", "--full")[1]["id"]
    assert summarised < head["keep_from"]
    result = agent("fork", "-p", "c", "--at", str(summarised))
    assert (result.code, result.err) == (
        2, f"agent-fork: message {summarised} is not in the context of c (see agent-replay c)\n")
    assert agent("fork", "-p", "c", "--at", str(head["keep_from"])).code == 0


def test_a_voided_compaction_is_not_a_boundary(tmp_path, conn):
    converse(12, 1000, rules(tmp_path))
    row = conn.execute("SELECT id FROM messages WHERE kind = 'compaction' "
                       "ORDER BY id DESC").fetchone()
    before = len(replay("a"))
    with conn:
        conn.execute("UPDATE messages SET void = 1 WHERE id = ?", (row[0],))
    after = replay("a")
    assert all(r["id"] != row[0] for r in after) and len(after) > before


def test_cut_never_splits_a_call_from_its_result():
    def row(i, kind):
        return {"id": i, "kind": kind, "content": "x" * 40, "tool_name": None}
    rows = [row(1, "user"), row(2, "assistant"), row(3, "tool_call"), row(4, "tool_result"),
            row(5, "assistant"), row(6, "tool_call"), row(7, "tool_result")]
    index = compaction.cut(rows, 30)
    assert rows[index]["kind"] in ("user", "assistant") and index == 4
    assert compaction.cut(rows[:1], 30) is None      # nothing before it to summarise


@pytest.mark.parametrize("args, message", [
    (["-w", "0"], "--context-window"), (["-w", "many"], "--context-window")])
def test_bad_windows(args, message):
    result = agent("fork", *args)
    assert result.code == 2 and message in result.err and len(result.err.splitlines()) == 1


def test_bad_window_in_the_environment(tmp_path, monkeypatch):
    agent("fork", "-n", "a", "-m", rules(tmp_path), "hello")
    monkeypatch.setenv("AGENTCTL_CONTEXT_WINDOW", "lots")
    result = agent("run", "a")
    assert result.code == 2 and "AGENTCTL_CONTEXT_WINDOW" in result.err
    monkeypatch.setenv("AGENTCTL_CONTEXT_WINDOW", "100000")
    assert agent("run", "a").code == 0, "the prompt stayed pending"


def test_full_refuses_what_is_not_a_record():
    agent("fork", "-n", "a")
    for args in (["--full", "--ranges"], ["--full", "--format", "openai"]):
        result = agent("replay", "a", *args)
        assert result.code == 2 and "--full" in result.err


@pytest.mark.parametrize("fmt", ["jsonl", "openai", "text"])
def test_ranges_take_no_format(fmt):
    agent("fork", "-n", "a")
    result = agent("replay", "--ranges", "--format", fmt, "a")
    assert (result.code, result.out) == (2, "")
    assert result.err == ("agent-replay: --ranges and --format don't go together "
                          "(the ranges are of the context, one tab-separated line each)\n")


def test_the_summary_call_is_charged_to_the_budget(tmp_path, calls, conn):
    assert agent("fork", "-n", "lead", "--budget", "1000000").code == 0
    assert agent("fork", "-p", "lead", "-n", "a", "-m", rules(tmp_path), "-w", "800",
                 "--budget", "500000").code == 0
    for n in range(8):
        agent("send", "a", f"Question {n}: " + "why? " * 30)
        assert agent("run", "a").code == 0
    assert "summary" in [k for k, _ in calls]
    spent = registry.resolve(conn, "a")["spent"]
    turns = conn.execute("SELECT sum(input_tokens + output_tokens) FROM turns").fetchone()[0]
    assert spent == turns and spent > sum(tokens for _, tokens in calls)   # inputs + outputs
    row = agent("ps", "--format", "jsonl", "-o", "name,spent,budget", "--parent", "lead").lines[0]
    assert json.loads(row) == {"name": "a", "spent": spent, "budget": 500000}


@pytest.mark.parametrize("model", ["openai:gpt-test", "anthropic:claude-test"])
def test_the_summary_request_on_the_wire_holds_no_tool_calls(model, fakeapi):
    """A history with tool calls is summarised from a transcript: the request has no
    tool blocks and offers no tools, which an API may refuse otherwise."""
    agent("fork", "-n", "a", "-m", model, "-w", "300", "Count my mail. " + "pad " * 40)
    fakeapi.reply("", tool_calls=[("check_mail", "{}")], usage=(200, 10))
    fakeapi.reply("You have no mail. " * 10, usage=(260, 60))
    assert agent("run", "a").code == 0
    agent("send", "a", "Anything new?")
    fakeapi.reply("Summary: asked to count mail; none.", usage=(300, 12))
    fakeapi.reply("Nothing new.", usage=(120, 4))
    result = agent("run", "a")
    assert result.code == 0 and result.out == "Nothing new.\n", result.err
    summary = fakeapi.requests[2]["body"]
    assert "tools" not in summary
    text = json.dumps(summary["messages"])
    assert "[COMPACT]" in text and "check_mail" in text           # the transcript
    assert "tool_use" not in text and "tool_calls" not in text and '"tool"' not in text
    step = json.dumps(fakeapi.requests[3]["body"])
    assert "Summary: asked to count mail; none." in step and "Anything new?" in step


def test_a_blank_summary_records_nothing_and_is_charged(tmp_path, calls, conn):
    """agentctl(7): the context goes over the window as it is, the summary call is paid."""
    model = script(tmp_path, {"match": r"^\[COMPACT\]", "reply": {"content": " \n "}},
                   {"reply": {"content": "ok", "usage": {"input_tokens": 5000,
                                                         "output_tokens": 10}}})
    assert agent("fork", "-n", "a", "-m", model, "-w", "3000", "first").code == 0
    assert agent("run", "a").code == 0
    agent("send", "a", "second")
    assert agent("run", "a").out == "ok\n"
    assert [k for k, _ in calls] == ["step", "summary", "step"]
    assert all(r["kind"] != "compaction" for r in replay("a", "--full"))
    turn = conn.execute("SELECT input_tokens FROM turns ORDER BY id DESC").fetchone()
    assert turn[0] == 5000 + calls[1][1]
    agent("send", "a", "third")
    assert agent("run", "a").code == 0
    assert [k for k, _ in calls][3:] == ["summary", "step"], "the next call tries again"


def test_one_huge_message_is_sent_over_the_window_without_a_summary_call(tmp_path, calls):
    assert agent("fork", "-n", "a", "-m", rules(tmp_path), "-w", "100",
                 "Read this: " + "word " * 400).code == 0
    assert agent("run", "a").code == 0
    assert [k for k, _ in calls] == ["step"] and calls[0][1] > 400
