"""The offline models (echo, scripted:FILE), get_model's names, and the import cost of the package."""

import json
import os
import subprocess
import sys

import pytest

from agentctl.errors import TempFail, UsageError
from agentctl.models import ModelError, Reply, ToolCall, get_model

from .conftest import script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user(text):
    return {"role": "user", "content": text}


def assistant(text="", calls=0):
    message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [{"id": f"c{i}", "type": "function",
                                  "function": {"name": "f", "arguments": "{}"}} for i in range(calls)]
    return message


def tool(text="ok"):
    return {"role": "tool", "tool_call_id": "c0", "content": text}


# -- get_model -----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["gpt-4o", "openai:", "anthropic:", "scripted:", "echo:x",
                                  "mistral:large", "", "ECHO", "openai: gpt-4o"])
def test_unknown_model_is_a_usage_error(spec):
    with pytest.raises(UsageError) as caught:
        get_model(spec)
    assert str(caught.value) == (f"unknown model: {spec} (expected openai:NAME, anthropic:NAME, "
                                 "echo or scripted:FILE)")
    assert caught.value.code == 2


@pytest.mark.parametrize("spec", ["echo", "openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5",
                                  "scripted:/no/such/file"])
def test_model_names(spec):
    assert get_model(spec).name == spec     # the spec round-trips: store it, get_model it again


# -- echo ----------------------------------------------------------------------------------------

def test_echo_answers_with_the_latest_user_message():
    messages = [{"role": "system", "content": "sys"}, user("first"), assistant("reply"),
                user("  second\nline  "), tool("tool output")]
    chunks = []
    reply = get_model("echo").complete(messages, [], on_text=chunks.append)
    assert reply == Reply("  second\nline  ", [], {"input_tokens": 10, "output_tokens": 4,
                                                   "cache_read_tokens": 0,
                           "cache_write_tokens": 0, "estimated": True}, "stop")
    assert chunks == ["  second\nline  "]


def test_echo_without_a_user_message():
    reply = get_model("echo").complete([{"role": "system", "content": "x"}], [])
    assert reply.text == "" and reply.tool_calls == []


# -- scripted ------------------------------------------------------------------------------------

def run(spec, messages, on_text=None):
    return get_model(spec).complete(messages, [], on_text=on_text)


def test_scripted_rules_match_in_order(tmp_path):
    spec = script(tmp_path,
                  "# greetings first", "",
                  {"match": "(?i)hello", "reply": {"content": "Hi!"}},
                  {"match": "bye", "reply": {"content": "Bye."}},
                  {"reply": {"content": "Pardon?"}},
                  {"match": "never", "reply": {"content": "shadowed"}})
    assert run(spec, [user("HELLO there")]).text == "Hi!"
    assert run(spec, [user("ok bye now")]).text == "Bye."
    assert run(spec, [user("never")]).text == "Pardon?"


def test_scripted_matches_the_latest_user_message_only(tmp_path):
    spec = script(tmp_path, {"match": "^second$", "reply": {"content": "yes"}})
    assert run(spec, [user("second"), assistant("x"), user("second")]).text == "yes"
    with pytest.raises(ModelError, match=r"scripted: no rule matches 'first' \(step 0\)"):
        run(spec, [user("second"), assistant("x"), user("first")])


def test_scripted_steps_follow_tool_rounds(tmp_path):
    spec = script(tmp_path, {"match": "go", "steps": [
        {"content": "Looking.", "tool_calls": [{"name": "read", "arguments": {"path": "/a"}},
                                               {"name": "list", "id": "mine"}]},
        {"tool_calls": [{"name": "read", "arguments": "{\"path\": \"/b\""}]},
        {"content": "Done."}]})
    first = run(spec, [user("go")])
    assert first.text == "Looking."
    assert first.tool_calls == [ToolCall("call_0_0", "read", '{"path": "/a"}'),
                                ToolCall("mine", "list", "{}")]
    assert first.stop_reason == "tool_calls"
    history = [user("go"), assistant("Looking.", calls=2), tool(), tool()]
    second = run(spec, history)
    assert second.tool_calls == [ToolCall("call_1_0", "read", '{"path": "/b"')]   # raw, invalid
    history += [assistant("", calls=1), tool()]
    assert run(spec, history).text == "Done."
    history += [assistant("Done."), tool()]
    assert run(spec, history).text == "Done."           # past the end: the last step repeats
    assert run(spec, history + [user("go again")]).text == "Looking."     # a new turn: step 0


def test_scripted_usage_given_or_estimated(tmp_path):
    spec = script(tmp_path, {"match": "a", "reply": {"content": "x", "usage": {"input_tokens": 100,
                                                                               "output_tokens": 5}}},
                  {"reply": {"content": "12345", "usage": {"output_tokens": 9}}})
    assert run(spec, [user("a")]).usage == {"input_tokens": 100, "output_tokens": 5,
                                            "cache_read_tokens": 0,
                           "cache_write_tokens": 0, "estimated": False}
    assert run(spec, [user("bbbbbbbbb")]).usage == {"input_tokens": 3, "output_tokens": 9,
                                                    "cache_read_tokens": 0,
                           "cache_write_tokens": 0, "estimated": True}


def test_scripted_streams_its_text_once(tmp_path):
    spec = script(tmp_path, {"reply": {"content": "streamed"}})
    chunks = []
    run(spec, [user("x")], on_text=chunks.append)
    assert chunks == ["streamed"]


def test_scripted_failures(tmp_path):
    spec = script(tmp_path, {"match": "temp", "reply": {"fail": "tempfail"}},
                  {"match": "err", "reply": {"fail": "error", "content": "quota exceeded"}})
    with pytest.raises(TempFail, match=r"model API unavailable: scripted: simulated failure \(.*:1\)"):
        run(spec, [user("temp")])
    with pytest.raises(ModelError, match=r"model API error: scripted: quota exceeded \(.*:2\)") as c:
        run(spec, [user("err")])
    assert c.value.code == 69


def test_scripted_json_array_file(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps([{"match": "x", "reply": {"content": "X"}},
                                {"steps": [{"content": "one"}, {"content": "two"}]}], indent=2))
    assert run(f"scripted:{path}", [user("x")]).text == "X"
    assert run(f"scripted:{path}", [user("y"), assistant("one")]).text == "two"


def test_scripted_file_is_read_at_each_call(tmp_path):
    spec = script(tmp_path, {"reply": {"content": "old"}})
    model = get_model(spec)
    assert model.complete([user("x")], []).text == "old"
    script(tmp_path, {"reply": {"content": "new"}})
    assert model.complete([user("x")], []).text == "new"


@pytest.mark.parametrize("lines, where, problem", [
    (['{"reply": {"content": "ok"}}', "", "# fine", "{not json"], ":4:", "not JSON"),
    (['{"reply": {"content": "ok"}}', '{"match": "(", "reply": {}}'], ":2:", "bad match regex"),
    (['{"reply": {"content": 5}}'], ":1:", "content must be a string"),
    (['{"match": "x"}'], ":1:", "needs either reply or steps"),
    (['{"reply": {}, "steps": [{}]}'], ":1:", "needs either reply or steps"),
    (['{"steps": []}'], ":1:", "steps must be a non-empty list"),
    (['{"reply": {"fail": "crash"}}'], ":1:", "fail must be"),
    (['{"reply": {"tool_calls": [{"arguments": {}}]}}'], ":1:", "each tool call needs a name"),
    (['{"reply": {"contents": "typo"}}'], ":1:", "unknown reply key 'contents'"),
    (['{"replies": {}}'], ":1:", "unknown key 'replies'"),
    (['["not", "a rule"]'], ":1:", "a rule must be an object"),
    (["[", '  {"reply": {}},', '  {"reply": {"usage": {"input_tokens": "x"}}}', "]"], ":3:",
     "usage must be"),
    (["[", '  {"reply": {}},', '  {"reply": {}', "]"], ":4:", "not JSON"),
    (["[", '  {"reply": {}}', "]", "trailing"], ":4:", "after the closing"),
])
def test_scripted_bad_file_names_file_and_line(tmp_path, lines, where, problem):
    spec = script(tmp_path, *lines)
    with pytest.raises(UsageError) as caught:
        run(spec, [user("x")])
    message = str(caught.value)
    assert message.startswith(f"scripted: {tmp_path / 'script.jsonl'}{where} ")
    assert problem in message
    with pytest.raises(UsageError):
        get_model(spec).check()


def test_scripted_missing_or_empty_file(tmp_path):
    with pytest.raises(UsageError, match=r"scripted: cannot read .*nope.jsonl: No such file"):
        run(f"scripted:{tmp_path / 'nope.jsonl'}", [user("x")])
    with pytest.raises(UsageError, match="no rules"):
        run(script(tmp_path, "# only a comment"), [user("x")])


# -- import cost ---------------------------------------------------------------------------------

def python(code):
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_offline_models_never_import_requests(tmp_path):
    spec = script(tmp_path, {"reply": {"content": "canned"}})
    out = python(f"""
import sys
import agentctl.models
print(sorted(m for m in ("requests", "urllib3", "json") if m in sys.modules))
m = agentctl.models.get_model("echo")
print(m.complete([{{"role": "user", "content": "hi"}}], []).text)
print(agentctl.models.get_model("{spec}").complete([], []).text)
agentctl.models.get_model("openai:gpt-4o-mini")     # naming an API model costs nothing either
agentctl.models.get_model("anthropic:claude-sonnet-4-5")
print("requests" in sys.modules, "urllib3" in sys.modules)
""")
    assert out.split("\n")[:4] == ["[]", "hi", "canned", "False False"]


# -- rules beyond jsonin's bounds ------------------------------------------------------------------

DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize("form", ["jsonl", "array"])
def test_rules_nested_too_deep_are_a_usage_error_naming_the_line(tmp_path, form):
    rule = '{"reply": {"content": "x", "usage": {"input_tokens": %s}}}' % DEEP
    text = f'# a comment [[[[\n{{"reply": {{}}}}\n{rule}\n' if form == "jsonl" else \
        f'[\n{{"reply": {{}}}},\n{rule}\n]\n'
    path = tmp_path / "deep.jsonl"
    path.write_text(text)
    for call in (get_model(f"scripted:{path}").check,
                 lambda: run(f"scripted:{path}", [user("hi")])):
        with pytest.raises(UsageError) as caught:
            call()
        assert str(caught.value) == f"scripted: {path}:3: nested more than 100 levels deep"
        assert caught.value.code == 2


def test_no_rule_message_redacts_a_key_before_cutting(tmp_path, monkeypatch):
    key = "sk-test-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    spec = script(tmp_path, {"match": "^never$", "reply": {"content": "x"}})
    with pytest.raises(ModelError) as caught:
        run(spec, [user("y" * 50 + key)])
    assert "'" + "y" * 50 + "***'" in str(caught.value)
    assert key[:6] not in str(caught.value)
