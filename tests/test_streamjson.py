"""agent-run --format stream-json (agent-run(1), STREAM-JSON): the turn as it happens, one
JSON object a line, each an event of the event log, a message of the history, a piece of
streamed text, and last the turn's record or the error agent-run exits with."""

import json
import threading

from .conftest import agent, fork, script, started, wait_until
from .fakeapi import OPENAI_KEY, fakeapi  # noqa: F401 (a fixture)


def lines(text):
    return [json.loads(line) for line in text.splitlines()]


def test_a_turn_with_a_tool_call_line_by_line(tmp_path):
    a = fork("-n", "a", "-m", script(tmp_path, {"steps": [
        {"content": "let me look", "tool_calls": [{"id": "c1", "name": "ps", "arguments": {}}]},
        {"content": "all quiet"}]}), "look around")
    result = agent("run", "--format", "stream-json", "a")
    assert result.code == 0, result.err
    stream = lines(result.out)
    shape = [(r["type"], r.get("kind")) for r in stream]
    assert shape == [
        ("event", "turn-start"), ("message", "user"),
        ("text", None), ("message", "assistant"), ("message", "tool_call"), ("event", "call"),
        ("message", "tool_result"), ("event", "tool"),
        ("text", None), ("message", "assistant"), ("event", "call"),
        ("event", "turn-end"), ("result", None)]
    # an event as agent-log --format jsonl prints it, a message as agent-replay's jsonl
    log = lines(agent("log", "--format", "jsonl", "a").out)
    events = [{k: v for k, v in r.items() if k != "type"} for r in stream
              if r["type"] == "event"]
    assert events == [e for e in log if e["kind"] != "fork"]
    replay = lines(agent("replay", "--format", "jsonl", "a").out)
    messages = [{k: v for k, v in r.items() if k != "type"} for r in stream
                if r["type"] == "message"]
    assert messages == replay
    assert stream[4]["tool_name"] == "ps" and stream[4]["tool_call_id"] == "c1"
    assert stream[7]["data"]["outcome"] == "ok"
    assert [r["text"] for r in stream if r["type"] == "text"] == ["let me look", "all quiet"]
    assert all(r["agent"] == a and r["turn"] == 1 for r in stream if r["type"] == "text")
    agent("send", "a", "again")
    record = json.loads(agent("run", "--format", "json", "a").out)
    assert set(stream[-1]) == {"type"} | set(record)
    assert stream[-1]["status"] == "done" and stream[-1]["text"] == "all quiet"


def test_each_line_comes_the_moment_it_happens(fakeapi):  # noqa: F811
    """The turn's start is read while its model call is still in flight; the text streams
    in pieces as the API sends them (less what might begin a key, held back until the
    next piece shows it does not)."""
    fork("-n", "a", "-m", "openai:gpt-test", "hi")
    hold = threading.Event()
    said = "".join(f"word {i} " for i in range(40))      # longer than a key held back
    fakeapi.reply(said, pieces=4, hold=hold)
    proc = started("agent-run", "--format", "stream-json", "a")
    read = []
    reader = threading.Thread(target=lambda: read.extend(iter(proc.stdout.readline, "")))
    reader.start()
    try:
        wait_until(lambda: read and fakeapi.requests, "the first line, and the model call")
        first = json.loads(read[0])
        assert (first["type"], first["kind"]) == ("event", "turn-start")
        assert proc.poll() is None          # in flight, and its first lines are out
        assert fakeapi.last["body"]["stream"] is True
    finally:
        hold.set()
    reader.join(120)
    err = proc.stderr.read()
    assert proc.wait(120) == 0, err
    out = "".join(read)
    rest = lines(out)
    assert "".join(r["text"] for r in rest if r["type"] == "text") == said
    assert sum(1 for r in rest if r["type"] == "text") >= 3     # as it came
    assert rest[-1]["type"] == "result"


def test_a_key_the_model_repeats_is_never_streamed(fakeapi, monkeypatch):  # noqa: F811
    fork("-n", "a", "-m", "openai:gpt-test", "hi")
    fakeapi.reply(f"the key is {OPENAI_KEY}, see", pieces=7)
    result = agent("run", "--format", "stream-json", "a")
    assert result.code == 0 and OPENAI_KEY not in result.out
    text = "".join(r["text"] for r in lines(result.out) if r["type"] == "text")
    assert text.startswith("the key is ") and text.endswith(", see")


def test_a_paused_turn_ends_its_stream_with_its_record(tmp_path):
    fork("-n", "a", "-m", script(tmp_path, {"steps": [
        {"tool_calls": [{"id": "q", "name": "ask", "arguments": {"question": "which?"}}]},
        {"content": "thanks"}]}), "go")
    stream = lines(agent("run", "--no-prompt", "--format", "stream-json", "a").out)
    kinds = [r.get("kind") for r in stream]
    assert "ask" in kinds and "turn-end" not in kinds
    assert stream[-1]["type"] == "result" and stream[-1]["status"] == "paused"
    request = next(r for r in stream if r.get("kind") == "ask")["data"]["request"]
    agent("answer", str(request), "this one")
    stream = lines(agent("run", "--format", "stream-json", "a").out)
    # a resumed turn's messages so far come first, then what happens now
    assert [r.get("kind") for r in stream if r["type"] == "message"] == [
        "user", "assistant", "tool_call", "tool_result", "assistant"]
    assert stream[-1]["status"] == "done" and stream[-1]["text"] == "thanks"


def test_a_run_that_fails_ends_its_stream_with_the_error(tmp_path):
    fork("-n", "a", "-m", script(tmp_path, {"steps": [{"fail": "tempfail"}]}), "go")
    result = agent("run", "--format", "stream-json", "a")
    assert result.code == 75
    stream = lines(result.out)
    assert stream[-1]["type"] == "error" and stream[-1]["exit"] == 75
    assert "model API unavailable" in stream[-1]["error"]
    result = agent("run", "--format", "stream-json", "nobody")
    assert result.code == 1 and lines(result.out) == [
        {"type": "error", "exit": 1, "error": "no such agent: nobody"}]


def test_stream_json_is_one_turns_stream():
    fork("-n", "a", "-m", "echo", "hi")
    for args, said in ((["--all"], "not with --all"), (["--json", "a"], "not with --format"),
                       (["--list-tools", "a"], "--list-tools lists")):
        result = agent("run", "--format", "stream-json", *args)
        assert result.code == 2 and said in result.err


def test_a_compactions_summary_is_no_text_of_the_turn(tmp_path):
    """Its call is a model call of the turn (a call event) and its record a compaction
    event, but its text is no reply: the text lines are the turn's replies alone."""
    model = script(tmp_path, {"match": r"^\[COMPACT\]", "reply": {"content": "SUMMARY of it all"}},
                   {"match": "first", "reply": {"content": "ok", "usage": {"input_tokens": 5000,
                                                                          "output_tokens": 10}}},
                   {"reply": {"content": "fine"}})
    fork("-n", "a", "-m", model, "-w", "3000", "first")
    assert agent("run", "a").code == 0
    agent("send", "a", "second")
    stream = lines(agent("run", "--format", "stream-json", "a").out)
    kinds = [r.get("kind") for r in stream if r["type"] == "event"]
    assert kinds.count("call") == 2 and "compaction" in kinds
    assert [r["text"] for r in stream if r["type"] == "text"] == ["fine"]
