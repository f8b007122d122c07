"""openai:MODEL against the fake Chat Completions API: replies, tool calls, usage, the request sent."""

import json

import pytest

from agentctl.errors import UsageError
from agentctl.models import ToolCall, get_model
from agentctl.models.openai import StreamState
from tests.fakeapi import HELLO, OPENAI_KEY, ask, fakeapi  # noqa: F401 (fixture)

SPEC = "openai:gpt-test"
streamed = pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
# Arguments that must come back byte for byte: spacing, escapes, non-ASCII, even invalid JSON.
ARGS = ['{"path": "/tmp/a b.txt", "note": "caf\\u00e9 \\"quoted\\""}', '{ "n" :1 ,"x":"ünï"}',
        '{"broken": ']


@streamed
def test_request_sent(fakeapi, stream):
    fakeapi.reply("ok")
    ask(SPEC, stream)
    request = fakeapi.last
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == f"Bearer {OPENAI_KEY}"
    assert request["headers"]["content-type"] == "application/json"
    body = request["body"]
    assert body["model"] == "gpt-test"
    assert body["messages"] == list(HELLO)
    assert "tools" not in body          # an empty list upsets some compatible servers
    if stream:
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
    else:
        assert "stream" not in body and "stream_options" not in body


@streamed
def test_tool_calls_reassembled_exactly(fakeapi, stream):
    fakeapi.reply("Let me look.", tool_calls=[("read_file", ARGS[0]), ("call_x", "calc", ARGS[1]),
                                              ("read_file", ARGS[2])], pieces=4)
    reply, chunks = ask(SPEC, stream, tools=TOOLS)
    assert reply.text == "Let me look."
    assert reply.tool_calls == [ToolCall("call_fake0", "read_file", ARGS[0]),
                                ToolCall("call_x", "calc", ARGS[1]),
                                ToolCall("call_fake2", "read_file", ARGS[2])]
    assert reply.stop_reason == "tool_calls"
    assert fakeapi.last["body"]["tools"] == TOOLS


def test_conversation_with_tool_rounds_is_sent_as_is(fakeapi):
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is in /etc/motd?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "/etc/motd"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Welcome!"},
        {"role": "user", "content": "Thanks", "agentctl_seq": 17},    # a caller's own key
    ]
    fakeapi.reply("It says Welcome!")
    ask(SPEC, messages=messages, tools=TOOLS)
    sent = fakeapi.last["body"]["messages"]
    assert sent[:4] == messages[:4]
    assert sent[4] == {"role": "user", "content": "Thanks"}


@streamed
@pytest.mark.parametrize("usage, output", [((-1000000, 9), 9), ((2 ** 63 - 1, 2 ** 63), 2),
                                           ((True, 9), 9), ((10 ** 12 + 1, -1), 2)])
def test_usage_that_is_no_count_is_estimated(fakeapi, stream, usage, output):
    """A negative count would refund a budget, a huge one overflow SQLite."""
    fakeapi.reply("12345678", usage=usage)
    reply, _ = ask(SPEC, stream)
    assert reply.usage == {"input_tokens": 5, "output_tokens": output, "cache_read_tokens": 0,
                           "cache_write_tokens": 0, "estimated": True}


def test_loopback_server_needs_no_key(fakeapi, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    fakeapi.reply("local answer")
    reply, _ = ask(SPEC)
    assert reply.text == "local answer"
    assert "authorization" not in fakeapi.last["headers"]


@pytest.mark.parametrize("url", ["https://api.openai.com/v1", "http://10.0.0.5:8080/v1"])
def test_missing_key_for_a_remote_server(fakeapi, monkeypatch, url):
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    with pytest.raises(UsageError) as caught:
        ask("openai:gpt-4o-mini")
    assert str(caught.value) == "OPENAI_API_KEY is not set (needed by model openai:gpt-4o-mini)"
    assert caught.value.code == 2
    with pytest.raises(UsageError):
        get_model("openai:gpt-4o-mini").check()


def test_default_base_url_is_openai(fakeapi, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(UsageError, match="OPENAI_API_KEY is not set"):
        ask(SPEC)


def test_bad_base_url_is_a_usage_error_that_hides_the_value(fakeapi, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "user:hunter2@localhost:8080")
    with pytest.raises(UsageError) as caught:
        ask(SPEC)
    assert "OPENAI_BASE_URL must be an http:// or https:// URL" == str(caught.value)


def test_base_url_trailing_slash(fakeapi, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fakeapi.url + "/v1/")
    fakeapi.reply("ok")
    ask(SPEC)
    assert fakeapi.last["path"] == "/v1/chat/completions"


def test_model_name_keeps_colons_of_the_model():
    model = get_model("openai:llama3.1:8b")        # Ollama names contain colons
    assert model.name == "openai:llama3.1:8b"
    assert model.model == "llama3.1:8b"


# -- the stream accumulator, fed directly --------------------------------------------------------

def chunk(delta, finish=None):
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_stream_state_tolerates_repeated_names_and_missing_ids():
    state = StreamState(on_text=lambda text: None)
    for piece in ['{"a"', ': 1}']:
        state.feed(chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": piece}}]}))
    state.feed(chunk({}, "tool_calls"))
    reply = state.reply([])
    assert reply.tool_calls[0].name == "f"
    assert reply.tool_calls[0].arguments == '{"a": 1}'
    assert reply.tool_calls[0].id.startswith("call_")
    assert reply.stop_reason == "tool_calls"


def test_stream_state_object_arguments_and_length_stop():
    state = StreamState(on_text=lambda text: None)
    state.feed(chunk({"content": "abc"}))
    state.feed(chunk({"tool_calls": [{"index": 0, "id": "c1",
                                      "function": {"name": "g", "arguments": {"k": "v"}}}]}))
    state.feed(chunk({}, "length"))
    reply = state.reply([])
    assert json.loads(reply.tool_calls[0].arguments) == {"k": "v"}
    assert reply.stop_reason == "length"


# -- AGENTCTL_MAX_TOKENS -------------------------------------------------------------------------

@streamed
def test_max_tokens_is_sent_as_max_tokens_to_other_servers(fakeapi, monkeypatch, stream):
    fakeapi.reply("ok")
    ask(SPEC, stream)
    assert "max_tokens" not in fakeapi.last["body"]           # unset: the server's own limit
    assert "max_completion_tokens" not in fakeapi.last["body"]
    monkeypatch.setenv("AGENTCTL_MAX_TOKENS", "123")
    fakeapi.reply("ok")
    ask(SPEC, stream)
    assert fakeapi.last["body"]["max_tokens"] == 123           # llama.cpp's server, vLLM, Ollama
    assert "max_completion_tokens" not in fakeapi.last["body"]


@pytest.mark.parametrize("url, field", [("https://api.openai.com/v1", "max_completion_tokens"),
                                        ("https://api.openai.com/v1/", "max_completion_tokens"),
                                        ("https://openai.example.net/v1", "max_tokens")])
def test_max_tokens_field_follows_the_server(monkeypatch, url, field):
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("AGENTCTL_MAX_TOKENS", "500")
    model = get_model("openai:gpt-test")
    body = model.request_body(list(HELLO), [], False, model.endpoint())
    assert body[field] == 500
    assert {"max_tokens", "max_completion_tokens"} & set(body) == {field}


@pytest.mark.parametrize("value", ["0", "many", "-3"])
def test_bad_max_tokens_is_a_usage_error(fakeapi, monkeypatch, value):
    monkeypatch.setenv("AGENTCTL_MAX_TOKENS", value)
    with pytest.raises(UsageError, match="AGENTCTL_MAX_TOKENS must be a whole number >= 1"):
        get_model(SPEC).check()
    assert fakeapi.requests == []


def test_tool_ids_are_sent_as_they_are_but_for_none(fakeapi):
    def asks(*ids):
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
            for i in ids]}

    def answer(call_id):
        return {"role": "tool", "tool_call_id": call_id, "content": "ok"}

    fakeapi.reply("done")
    ask(SPEC, messages=[{"role": "user", "content": "go"}, asks("call_0_0"), answer("call_0_0"),
                        asks("call_0_0", "functions.f:1", ""), answer("call_0_0"),
                        answer("functions.f:1"), answer("")], tools=TOOLS)
    sent = fakeapi.last["body"]["messages"]
    assert [c["id"] for m in sent for c in m.get("tool_calls", ())] == \
        ["call_0_0", "call_0_0", "functions.f:1", "call_3"]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == \
        ["call_0_0", "call_0_0", "functions.f:1", "call_3"]


@streamed
def test_the_reply_names_the_response_and_the_model_that_gave_it(fakeapi, stream):
    fakeapi.reply("ok", served="gpt-test-2024-08-06", reply_id="chatcmpl-A1b2")
    reply, _ = ask(SPEC, stream)
    assert (reply.response_id, reply.response_model) == ("chatcmpl-A1b2", "gpt-test-2024-08-06")
    # a server that names neither (or not as text) leaves them empty; a long one is cut
    fakeapi.reply(body=json.dumps({"id": 7, "model": "m" * 300, "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"},
         "finish_reason": "stop"}]}).encode())
    reply, _ = ask(SPEC)
    assert reply.response_id == "" and len(reply.response_model) == 200
