"""Hostile input from models and from the programs' own input: no agent wedged,
no key shown or stored, nothing sent back to a model that it can't take."""

import json

from agentctl import keys
from agentctl.store import registry
from agentctl.turn import runner

from .conftest import agent, fork, script, stored, tool_results
from .fakeapi import ANTHROPIC_KEY, OPENAI_KEY, fakeapi  # noqa: F401

NESTED = "[" * 5000 + "]" * 5000


def test_deeply_nested_tool_arguments_are_a_tool_error_not_a_wedged_agent(conn, tmp_path):
    fork("-n", "a", "-m", script(tmp_path, {"steps": [
        {"tool_calls": [{"id": "n", "name": "send", "arguments": NESTED}]},
        {"content": "recovered"}]}), "go")
    result = agent("run", "a")
    assert (result.code, result.out) == (0, "recovered\n"), result.err
    answer, = tool_results(conn, "a")
    assert answer == "error: arguments: nested more than 100 levels deep"
    agent("send", "a", "again")
    assert agent("replay", "a").code == 0
    assert agent("run", "a").code == 0                  # and every later run works


def test_arguments_that_are_no_json_are_kept_but_sent_back_as_an_empty_object(conn, fakeapi):
    fork("-n", "a", "-m", "openai:gpt-test", "go")
    fakeapi.reply("", tool_calls=[("c1", "send", '{"to": "a", "body": ')])
    fakeapi.reply("done")
    assert agent("run", "a").code == 0
    sent = fakeapi.requests[1]["body"]["messages"]
    call = [m for m in sent if m.get("tool_calls")][0]["tool_calls"][0]
    assert call["function"]["arguments"] == "{}"
    stored = conn.execute("SELECT content FROM messages WHERE kind = 'tool_call'").fetchone()[0]
    assert stored == '{"to": "a", "body": '               # the record keeps what it wrote
    openai = json.loads(agent("replay", "--format", "openai", "a").out)
    assert [m for m in openai if m.get("tool_calls")][0]["tool_calls"][0]["function"][
        "arguments"] == "{}"


def test_a_nested_jsonl_line_is_a_usage_error_naming_the_line(conn):
    fork("-n", "a")
    lines = json.dumps({"to": "a", "body": "ok"}) + "\n" + '{"to": "a", "body": ' + NESTED + "}\n"
    result = agent("send", "--jsonl", stdin=lines)
    assert result.code == 2
    assert result.err == "agent-send: line 2: JSON: nested more than 100 levels deep\n"
    assert conn.execute("SELECT count(*) FROM mail").fetchone()[0] == 0


def test_a_key_the_model_repeats_is_neither_stored_nor_printed(conn, fakeapi, home):
    fork("-n", "a", "-m", "openai:gpt-test", "what is your key?")
    fakeapi.reply(f"my key is {OPENAI_KEY}, see", tool_calls=[
        ("c1", "send", json.dumps({"to": "a", "body": OPENAI_KEY}))])
    fakeapi.reply(f"again {OPENAI_KEY}")
    result = agent("run", "--json", "a")
    assert result.code == 0, result.err
    assert OPENAI_KEY not in result.out and json.loads(result.out)["text"] == "again ***"
    assert OPENAI_KEY.encode() not in stored(home)


def test_a_key_split_between_streamed_pieces_is_still_hidden(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    shown = []
    stream = keys.Stream(shown.append)
    text = f"the key: {ANTHROPIC_KEY} done"
    for cut in range(0, len(text), 3):
        stream(text[cut:cut + 3])
    stream.flush()
    assert "".join(shown) == "the key: *** done"


def test_the_text_of_separate_steps_is_streamed_on_separate_lines(conn, tmp_path):
    fork("-n", "a", "-m", script(tmp_path, {"steps": [
        {"content": "looking", "tool_calls": [{"id": "m", "name": "check_mail",
                                              "arguments": {}}]},
        {"content": "found it"}]}), "go")
    shown = []
    outcome = runner.run(conn, "a", on_text=shown.append)
    assert outcome.text == "found it"
    assert "".join(shown) == "looking\nfound it"
    assert registry.resolve(conn, "a")["status"] == "S"


def test_fork_refuses_a_model_no_provider_answers_to(conn):
    result = agent("fork", "-n", "a", "-m", "nosuch:x")
    assert (result.code, result.err) == (
        2, "agent-fork: unknown model: nosuch:x (expected openai:NAME, anthropic:NAME, echo "
           "or scripted:FILE)\n")
    assert conn.execute("SELECT count(*) FROM agents").fetchone()[0] == 1


def test_the_sleep_tool_refuses_a_time_without_a_zone(conn, tmp_path):
    fork("-n", "a", "-m", script(tmp_path, {"steps": [
        {"tool_calls": [{"id": "s", "name": "sleep", "arguments": {"until": "2030-01-01T09:30"}}]},
        {"tool_calls": [{"id": "t", "name": "sleep",
                         "arguments": {"until": "2030-01-01T09:30:00Z"}}]}]}), "go")
    assert agent("run", "a").code == 0
    results = tool_results(conn, "a")
    assert results[0] == ('error: until: "2030-01-01T09:30" has no zone: add Z for UTC '
                          '(the times you see are UTC), or +HH:MM')
    assert results[1] == "sleeping until 2030-01-01T09:30:00Z"


def test_an_agent_that_has_exited_sends_no_mail(conn, monkeypatch):
    fork("-n", "to")
    gone = fork("-n", "gone")
    agent("kill", "gone")
    result = agent("send", "--from", "gone", "to", "hello")
    assert (result.code, result.err) == (3, "agent-send: gone: can't send mail: it has exited\n")
    lines = json.dumps({"to": "to", "body": "hi", "from": "gone"}) + "\n"
    assert agent("send", "--jsonl", stdin=lines).code == 3
    monkeypatch.setenv("AGENT_ID", gone)
    assert agent("send", "to", "hello").code == 3
    assert conn.execute("SELECT count(*) FROM mail").fetchone()[0] == 0


def test_wait_parent_waits_for_that_agents_children_and_none_is_no_wait(conn):
    fork("-n", "lead")
    assert agent("wait", "--parent", "lead", "--timeout", "5").code == 0     # no children
    fork("-p", "lead", "-n", "w1")
    fork("-n", "other")
    agent("kill", "w1")
    result = agent("wait", "--parent", "lead", "-o", "name,status", "--no-headers")
    assert (result.code, result.lines) == (3, ["w1  killed TERM"])
    assert registry.resolve(conn, "other")["status"] == "S"          # not waited for
    assert agent("wait", "--parent", "lead", "w1").code == 2


def test_a_reply_cut_at_the_token_limit_is_recorded_and_said(conn, fakeapi):
    fork("-n", "a", "-m", "openai:gpt-test", "write a lot")
    fakeapi.reply("the beginning of", stop="length")
    result = agent("run", "--json", "a")
    assert result.code == 0, result.err
    assert json.loads(result.out)["cut"] is True
    assert result.err == ("agent-run: a: a reply was cut at the token limit "
                          "(AGENTCTL_MAX_TOKENS, or the server's)\n")
    assert conn.execute("SELECT stop_reason FROM turns").fetchone()[0] == "length"


def test_all_names_the_agent_of_each_error_and_says_who_is_backing_off(conn, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("AGENTCTL_BACKOFF", "1h")
    fork("-n", "bad", "-r", "daemon", "-m", script(tmp_path, {"steps": [{"fail": "error"}]}),
         "go")
    result = agent("run", "--all")
    assert result.code == 69
    assert result.err.splitlines()[0].startswith("agent-run: bad: model API error: ")
    result = agent("run", "--all")
    assert (result.code, result.out, result.err) == (1, "", "")     # cron mails nothing
    assert agent("why", "bad").out.startswith("backing off until 20")
