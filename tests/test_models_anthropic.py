"""anthropic:MODEL against the fake Messages API: replies, tool calls, usage, and the conversion of
OpenAI-form conversations into the request the server receives."""

import json

import pytest

from agentctl.errors import UsageError
from agentctl.models import ModelError, ToolCall
from agentctl.models.anthropic import StreamState, convert_messages, parse_message
from tests.fakeapi import ANTHROPIC_KEY, ask, fakeapi  # noqa: F401 (fixture)

SPEC = "anthropic:claude-test"
streamed = pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                           "parameters": SCHEMA}},
         {"type": "function", "function": {"name": "now"}}]


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "system", "content": "Answer in English."},
    {"role": "user", "content": "Read two files."},
    {"role": "assistant", "content": "Reading.", "tool_calls": [
        call("toolu_1", "read_file", '{"path": "/a"}'), call("toolu_2", "read_file", '{"path": "/b"}')]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "A"},
    {"role": "tool", "tool_call_id": "toolu_2", "content": "B"},
    {"role": "user", "content": "And summarise."},
    {"role": "assistant", "content": None, "tool_calls": [call("toolu_3", "now", "not json")]},
    {"role": "tool", "tool_call_id": "toolu_3", "content": ""},
]


@streamed
def test_request_headers_and_body(fakeapi, stream, monkeypatch):
    fakeapi.reply("ok")
    ask(SPEC, stream)
    request = fakeapi.last
    assert request["path"] == "/v1/messages"
    assert request["headers"]["x-api-key"] == ANTHROPIC_KEY
    assert request["headers"]["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request["headers"]
    body = request["body"]
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 4096
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]
    assert body.get("stream", False) is stream
    assert "tools" not in body


def test_max_tokens_setting(fakeapi, monkeypatch):
    monkeypatch.setenv("AGENTCTL_MAX_TOKENS", "123")
    fakeapi.reply("ok")
    ask(SPEC)
    assert fakeapi.last["body"]["max_tokens"] == 123


@streamed
def test_tool_calls(fakeapi, stream):
    arguments = '{"path": "/tmp/caf\\u00e9 \\"x\\".txt", "lines": [1, 2]}'
    fakeapi.reply("Let me look.", tool_calls=[("toolu_a", "read_file", arguments),
                                              ("toolu_b", "now", "")], pieces=5)
    reply, _ = ask(SPEC, stream, tools=TOOLS)
    assert reply.text == "Let me look."
    assert [(c.id, c.name) for c in reply.tool_calls] == [("toolu_a", "read_file"), ("toolu_b", "now")]
    if stream:      # streamed input_json_delta pieces come back exactly as the model wrote them
        assert reply.tool_calls[0].arguments == arguments
    else:           # a plain reply carries parsed input, serialised again
        assert json.loads(reply.tool_calls[0].arguments) == json.loads(arguments)
    assert reply.tool_calls[1].arguments == "{}"
    assert reply.stop_reason == "tool_calls"


def test_tools_are_converted(fakeapi):
    fakeapi.reply("ok")
    ask(SPEC, tools=TOOLS)
    assert fakeapi.last["body"]["tools"] == [
        {"name": "read_file", "description": "Read a file.", "input_schema": SCHEMA},
        {"name": "now", "description": "", "input_schema": {"type": "object", "properties": {}}}]


def test_conversation_is_converted(fakeapi):
    fakeapi.reply("Done.")
    ask(SPEC, messages=CONVERSATION, tools=TOOLS)
    body = fakeapi.last["body"]
    assert body["system"] == "You are terse.\n\nAnswer in English."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Read two files."}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "/a"}},
            {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "/b"}}]},
        {"role": "user", "content": [            # both results, then the next user text: one message
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "B"},
            {"type": "text", "text": "And summarise."}]},
        {"role": "assistant", "content": [        # invalid arguments are replayed as empty input
            {"type": "tool_use", "id": "toolu_3", "name": "now", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_3"}]},
    ]


def test_consecutive_same_role_messages_are_merged():
    system, turns = convert_messages([
        {"role": "user", "content": "one"}, {"role": "user", "content": ""},
        {"role": "user", "content": "two"}, {"role": "assistant", "content": "three"},
        {"role": "assistant", "content": "four"}, {"role": "developer", "content": "sys"}])
    assert system == "sys"
    assert [t["role"] for t in turns] == ["user", "assistant"]
    assert [b["text"] for b in turns[0]["content"]] == ["one", "two"]
    assert [b["text"] for b in turns[1]["content"]] == ["three", "four"]


def test_tool_results_open_the_user_message():
    _, turns = convert_messages([
        {"role": "assistant", "content": "", "tool_calls": [call("t1", "f", "{}")]},
        {"role": "user", "content": "meanwhile"},
        {"role": "tool", "tool_call_id": "t1", "content": "result"}])
    assert [b["type"] for b in turns[1]["content"]] == ["tool_result", "text"]


def test_cached_prompt_tokens_count_as_input():
    body = {"content": [{"type": "text", "text": "hi"}], "stop_reason": "max_tokens",
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 100,
                      "cache_creation_input_tokens": 5, "output_tokens": 3}}
    reply = parse_message(body, [])
    assert reply.usage == {"input_tokens": 115, "output_tokens": 3, "cache_read_tokens": 100,
                           "cache_write_tokens": 5, "estimated": False}
    assert reply.stop_reason == "length"


def test_overloaded_event_in_stream_is_retried(fakeapi):
    fakeapi.reply("Hello there", cut_after=4, error_event="overloaded_error").reply("Hello")
    reply, _ = ask(SPEC, stream=True)
    assert reply.text == "Hello"
    assert len(fakeapi.requests) == 2


def test_other_error_event_in_stream_is_a_model_error(fakeapi):
    fakeapi.reply("Hello there", cut_after=4, error_event="invalid_request_error")
    with pytest.raises(ModelError, match="anthropic: invalid_request_error: Overloaded"):
        ask(SPEC, stream=True)


def test_stream_state_skips_unknown_events_and_keeps_block_order():
    state = StreamState(on_text=lambda text: None)
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 7, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "A"}},
        {"type": "some_future_event"},
        {"type": "content_block_start", "index": 2, "content_block": {
            "type": "tool_use", "id": "t", "name": "f", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"x"'}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ":1}"}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}},
        {"type": "message_stop"}]
    for event in events:
        state.feed(event)
    reply = state.reply([])
    assert reply.text == "A"
    assert reply.tool_calls == [ToolCall("t", "f", '{"x":1}')]
    assert reply.usage == {"input_tokens": 7, "output_tokens": 12, "cache_read_tokens": 0,
                           "cache_write_tokens": 0, "estimated": False}


def test_missing_key_for_a_remote_server(fakeapi, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    with pytest.raises(UsageError) as caught:
        ask("anthropic:claude-sonnet-4-5")
    assert str(caught.value) == ("ANTHROPIC_API_KEY is not set "
                                 "(needed by model anthropic:claude-sonnet-4-5)")
    assert fakeapi.requests == []


def test_arguments_nested_too_deep_are_replayed_as_empty_input():
    deep = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    _, turns = convert_messages([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [call("t1", "f", deep)]},
        {"role": "tool", "tool_call_id": "t1", "content": "error: arguments too deep"}])
    assert turns[1]["content"] == [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]


# -- what the API refuses, mended: whitespace-only text, tool ids ---------------------------------

def asks(*ids):
    return {"role": "assistant", "content": None,
            "tool_calls": [call(i, "read_file", '{"path": "/a"}') for i in ids]}


def answer(call_id):
    return {"role": "tool", "tool_call_id": call_id, "content": "A"}


ID_CONVERSATION = [
    {"role": "user", "content": "first"}, asks("call_0_0"), answer("call_0_0"),
    {"role": "user", "content": "second"}, asks("call_0_0"), answer("call_0_0"),   # again
    asks("functions.read_file:0", ""), answer("functions.read_file:0"), answer(""),
    asks("dup", "dup"), answer("dup"), answer("dup"),
    asks("toolu_" + "x" * 70), answer("toolu_" + "x" * 70),
]


def ids_sent(turns):
    uses = [b["id"] for t in turns for b in t["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for t in turns for b in t["content"] if b["type"] == "tool_result"]
    return uses, results


def test_tool_ids_are_made_unique_and_valid_in_call_and_result_alike():
    uses, results = ids_sent(convert_messages(ID_CONVERSATION)[1])
    assert uses == ["call_0_0", "call_0_0_1", "functions_read_file_0_2", "call_3", "dup", "dup_5",
                    "toolu_" + "x" * 34 + "_6"]
    assert results == uses


def test_tool_ids_are_the_same_for_the_calls_a_longer_conversation_shares():
    whole = ids_sent(convert_messages(ID_CONVERSATION)[1])[0]
    for end in range(len(ID_CONVERSATION)):
        part = ids_sent(convert_messages(ID_CONVERSATION[:end])[1])[0]
        assert part == whole[:len(part)]
    assert convert_messages(ID_CONVERSATION) == convert_messages(ID_CONVERSATION)


def test_whitespace_only_text_is_left_out():
    system, turns = convert_messages([
        {"role": "system", "content": " \n"}, {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "  "}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "\n\n", "tool_calls": [call("t1", "now", "{}")]},
        {"role": "tool", "tool_call_id": "t1", "content": " \t"},
        {"role": "assistant", "content": "\t"}, {"role": "user", "content": "more"}])
    assert system == "Be brief."
    assert turns == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "now",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"},
                                     {"type": "text", "text": "more"}]}]


@pytest.mark.parametrize("name, sent", [("functions.read_file", "functions_read_file"),
                                        ("", "unnamed"), ("x" * 80, "x" * 64)])
def test_a_tool_name_the_api_refuses_is_replayed_mended(name, sent):
    _, turns = convert_messages([{"role": "user", "content": "go"},
                                 {"role": "assistant", "content": "",
                                  "tool_calls": [call("t1", name, "{}")]}, answer("t1")])
    assert turns[1]["content"][0]["name"] == sent


@streamed
def test_the_reply_names_the_response_and_the_model_that_gave_it(fakeapi, stream):
    fakeapi.reply("ok", served="claude-test-20250929", reply_id="msg_01XyZ")
    reply, _ = ask(SPEC, stream)
    assert (reply.response_id, reply.response_model) == ("msg_01XyZ", "claude-test-20250929")
    reply = parse_message({"content": [{"type": "text", "text": "hi"}], "id": ["x"]}, [])
    assert (reply.response_id, reply.response_model) == ("", "")
