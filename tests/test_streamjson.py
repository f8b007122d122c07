"""agent-run --format stream-json (agent-run(1), The stream): the turn as it happens, one
JSON object a line: first its init line, then each an event of the event log, a message of
the history, a piece of streamed text, a retry of a model call, and last the turn's record
or the error agent-run exits with."""

import json
import sys
import threading

from .conftest import agent, fork, script, started, wait_until
from .fakeapi import OPENAI_KEY, fakeapi  # noqa: F401 (a fixture)

RENAMED = {"agent_id": "agent", "turn_id": "turn", "created_at": "time"}   # replay's: ours


def lines(text):
    return [json.loads(line) for line in text.splitlines()]


def streamed(*args):
    """The lines of agent-run --format stream-json ARGS, and its exit status."""
    result = agent("run", "--format", "stream-json", *args)
    return lines(result.out), result.code


def test_a_turn_with_a_tool_call_line_by_line(tmp_path):
    a = fork("-n", "a", "-m", script(tmp_path, {"steps": [
        {"content": "let me look", "tool_calls": [{"id": "c1", "name": "ps", "arguments": {}}]},
        {"content": "all quiet"}]}), "look around")
    stream, code = streamed("a")
    assert code == 0
    shape = [(r["type"], r.get("kind")) for r in stream]
    assert shape == [
        ("init", None), ("event", "turn-start"), ("message", "user"),
        ("text", None), ("message", "assistant"), ("message", "tool_call"), ("event", "call"),
        ("message", "tool_result"), ("event", "tool"),
        ("text", None), ("message", "assistant"), ("event", "call"),
        ("event", "turn-end"), ("result", None)]
    # an event as agent-log --format jsonl prints it, with its turn; a message as
    # agent-replay's jsonl, in the stream's names
    log = lines(agent("log", "--format", "jsonl", "a").out)
    events = [{k: v for k, v in r.items() if k not in ("type", "turn")} for r in stream
              if r["type"] == "event"]
    assert events == [e for e in log if e["kind"] != "fork"]
    assert all(r["turn"] == r["data"]["turn"] == 1 for r in stream if r["type"] == "event")
    replay = lines(agent("replay", "--format", "jsonl", "a").out)
    messages = [{k: v for k, v in r.items() if k != "type"} for r in stream
                if r["type"] == "message"]
    assert messages == [{RENAMED.get(k, k): v for k, v in m.items()} for m in replay]
    assert stream[5]["tool_name"] == "ps" and stream[5]["tool_call_id"] == "c1"
    assert stream[8]["data"]["outcome"] == "ok"
    assert [r["text"] for r in stream if r["type"] == "text"] == ["let me look", "all quiet"]
    assert all(r["agent"] == a and r["turn"] == 1 for r in stream)
    agent("send", "a", "again")
    record = json.loads(agent("run", "--format", "json", "a").out)
    assert set(stream[-1]) == {"type", "time"} | set(record)
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
        wait_until(lambda: len(read) >= 2 and fakeapi.requests,
                   "the first lines, and the model call")
        first, second = json.loads(read[0]), json.loads(read[1])
        assert first["type"] == "init" and first["model"] == "openai:gpt-test"
        assert (second["type"], second["kind"]) == ("event", "turn-start")
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
    assert stream[0]["type"] == "init" and stream[0]["agent"] == stream[-1]["agent"]
    assert {k: stream[-1][k] for k in ("type", "exit", "kind", "turn")} == {
        "type": "error", "exit": 75, "kind": "unavailable", "turn": stream[0]["turn"]}
    assert stream[-1]["error"] == result.err.removeprefix("agent-run: ").rstrip("\n")
    # a run that fails before it knows its agent: an init line of nulls, then the error
    stream, code = streamed("nobody")
    assert code == 1 and [{k: v for k, v in r.items() if k != "time"} for r in stream] == [
        {"type": "init", "agent": None, "turn": None, "version": "2.0",
         "agentctl": stream[0]["agentctl"], "name": None, "resumed": None, "model": None,
         "tools": None, "mcp": None},
        {"type": "error", "agent": None, "turn": None, "exit": 1, "kind": "nothing",
         "error": "no such agent: nobody"}]
    agent("kill", "-s", "STOP", "a")
    stream, code = streamed("a")
    assert code == 3 and (stream[-1]["kind"], stream[-1]["exit"]) == ("refused", 3)


def test_a_refusal_says_its_kind_and_message_without_the_key(fakeapi):  # noqa: F811
    fork("-n", "a", "-m", "openai:gpt-test", "hi")
    fakeapi.error(401, f"Incorrect API key provided: {OPENAI_KEY}")
    stream, code = streamed("a")
    assert code == 69 and [(r["type"], r.get("kind")) for r in stream
                           if r["type"] != "message"] == [
        ("init", None), ("event", "turn-start"), ("event", "fail"), ("event", "held"),
        ("error", "auth")]          # no retry: a refusal is for good
    assert stream[-1] == {"type": "error", "time": stream[-1]["time"],
                          "agent": stream[0]["agent"], "turn": stream[0]["turn"],
                          "exit": 69, "kind": "auth",
                          "error": "model API error: openai: HTTP 401: "
                                   "Incorrect API key provided: ***"}


def test_an_unreachable_server_is_retried_then_said(fakeapi, monkeypatch):  # noqa: F811
    import socket
    with socket.socket() as sock:       # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("AGENTCTL_RETRY_TRIES", "3")
    fork("-n", "a", "-m", "openai:gpt-test", "hi")
    stream, code = streamed("a")
    assert code == 75
    retries = [r for r in stream if r["type"] == "retry"]
    assert [(r["attempt"], r["tries"], r["status"]) for r in retries] == [
        (1, 3, None), (2, 3, None)]
    assert all(r["reason"] == f"cannot connect to 127.0.0.1:{port}" and r["delay"] >= 0
               for r in retries)
    assert (stream[-1]["type"], stream[-1]["exit"], stream[-1]["kind"]) == (
        "error", 75, "unreachable")
    assert stream[-1]["error"] == (f"model API unavailable: openai: cannot connect to "
                                   f"127.0.0.1:{port} after 3 tries")


def test_each_retry_is_a_line(fakeapi):  # noqa: F811
    """A retried call says why, and how long it waits; the text of a try that failed
    is followed by its retry line, and the next try's text starts again."""
    fork("-n", "a", "-m", "openai:gpt-test", "hi")
    fakeapi.error(429, "slow down").error(500, "oops")
    fakeapi.reply("half of it", cut_after=2)
    fakeapi.reply("answer")
    stream, code = streamed("a")
    assert code == 0, stream[-1]
    retries = [r for r in stream if r["type"] == "retry"]
    assert [(r["attempt"], r["status"], r["reason"]) for r in retries] == [
        (1, 429, "HTTP 429: slow down"), (2, 500, "HTTP 500: oops"),
        (3, None, f"response from {fakeapi.url.removeprefix('http://')} cut off")]
    assert all(r["tries"] == 4 and 0 <= r["delay"] < 1 for r in retries)
    cut = stream.index(retries[-1])
    assert "".join(r["text"] for r in stream[:cut] if r["type"] == "text") == "half"
    assert [r["text"] for r in stream[cut:] if r["type"] == "text"] == ["answer"]
    assert stream[-1]["type"] == "result" and stream[-1]["text"] == "answer"


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


def test_every_line_type_names_its_fields_alike(fakeapi):  # noqa: F811
    """Each type of line begins with type, time, agent and turn, and no line holds a
    field by another name (the history's agent_id, turn_id, created_at), however deep."""
    from agentctl.cli.streamjson import TYPES
    fork("-n", "a", "-m", "openai:gpt-test", "hi")
    fakeapi.error(503, "busy")
    fakeapi.reply("hello")
    seen = streamed("a")[0] + streamed("nobody")[0]
    assert {r["type"] for r in seen} == set(TYPES)

    def names(value):
        if isinstance(value, dict):
            return set(value) | set().union(*map(names, value.values()))
        if isinstance(value, list):
            return set().union(*map(names, value))
        return set()
    for line in seen:
        assert list(line)[:4] == ["type", "time", "agent", "turn"], line
        assert not names(line) & set(RENAMED), line
        assert isinstance(line["time"], float) and line["time"] > 1e9
        assert line["agent"] is None or isinstance(line["agent"], str)
        assert line["turn"] is None or isinstance(line["turn"], int)
    assert [r["version"] for r in seen if r["type"] == "init"] == ["2.0", "2.0"]


def test_init_says_what_the_turn_offers_and_where_it_comes_from(tmp_path, monkeypatch):
    """The tools with their sources, and the MCP servers the agent's grants reach with
    how the turn's start found each: listed now, failed, then its tools kept."""
    from .test_mcp import SERVER, TESTS, configure
    work = tmp_path / "work"
    configure(tmp_path, monkeypatch, {
        "notes": {"command": sys.executable, "args": [SERVER], "ro": [TESTS]},
        "broken": {"command": str(tmp_path / "no-such-server")}})
    fork("-n", "a", "-m", "echo", "--allow", "read_file", "--allow", "notes__*",
         "--allow", "broken__*", "--cwd", str(work), "hi")
    stream, code = streamed("a")
    assert code == 0, stream[-1]
    init = stream[0]
    assert (init["type"], init["name"], init["model"], init["resumed"]) == (
        "init", "a", "echo", False)
    tools = {t["name"]: t for t in init["tools"]}
    assert tools["fork"] == {"name": "fork", "source": "built-in"}
    assert tools["read_file"]["source"] == "program"
    assert tools["read_file"]["path"].endswith("/agentctl/toolbox/read_file")
    assert tools["notes__add"] == {"name": "notes__add", "source": "mcp", "server": "notes"}
    assert not any(name.startswith("broken__") for name in tools)
    servers = {s["server"]: s for s in init["mcp"]}
    assert servers["notes"] == {"server": "notes", "transport": "stdio", "status": "started",
                                "error": None}
    assert servers["broken"]["status"] == "failed"
    assert servers["broken"]["error"].startswith("MCP server broken: can't start it")
    agent("send", "a", "again")
    servers = {s["server"]: s["status"] for s in streamed("a")[0][0]["mcp"]}
    assert servers == {"notes": "cached", "broken": "failed"}
