"""The fake API's request checks (tests/fakechecks.py): the official SDKs' request types and the
rules the APIs enforce beyond them. They must refuse what the real APIs refuse, or the model
tests prove nothing about real servers; and conversations agentctl really builds must pass them."""

import json

import pytest
import requests

from tests.conftest import agent, fork, script
from tests.fakeapi import FakeAPI, fakeapi  # noqa: F401 (fixture)

OPENAI = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC = {"model": "claude-test", "max_tokens": 10,
             "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}


def calls(*ids):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]}


def uses(*ids):
    return {"role": "assistant", "content": [
        {"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ids]}


def results(*ids):
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i} for i in ids]}


def changed(body, **fields):
    return {**json.loads(json.dumps(body)), **fields}


BAD = [
    ("openai", changed(OPENAI, messages=[{"role": "wizard", "content": "hi"}]), "messages.0"),
    ("openai", changed(OPENAI, temprature=0.5), "temprature: Extra inputs are not permitted"),
    ("openai", changed(OPENAI, messages=[{"role": "user", "content": "hi", "seq": 1}]), "seq"),
    ("openai", changed(OPENAI, stream=True, stream_options={"include_usage": "yes"}),
     "include_usage"),
    ("openai", changed(OPENAI, messages=[{"role": "tool", "content": "x"}]), "tool_call_id"),
    ("openai", {"model": "gpt-test"}, "messages: Field required"),
    ("openai", changed(OPENAI, messages=[calls("a", "b"), {"role": "tool", "tool_call_id": "a",
                                                           "content": "x"}]),
     "did not have response messages: ['b']"),
    ("openai", changed(OPENAI, messages=[{"role": "tool", "tool_call_id": "a", "content": "x"}]),
     "must be a response to a preceding message"),
    ("openai", changed(OPENAI, messages=[calls(""), {"role": "tool", "tool_call_id": "",
                                                     "content": "x"}]), "id is empty"),
    ("anthropic", {k: v for k, v in ANTHROPIC.items() if k != "max_tokens"},
     "max_tokens: Field required"),
    ("anthropic", changed(ANTHROPIC, stream=True, stream_options={}), "stream_options"),
    ("anthropic", changed(ANTHROPIC, messages=[{"role": "tool", "content": "x"}]), "role"),
    ("anthropic", changed(ANTHROPIC, max_tokens="10"), "max_tokens: Input should be a valid"),
    ("anthropic", changed(ANTHROPIC, messages=[{"role": "user", "content": [
        {"type": "text", "text": " \n"}]}]), "non-whitespace text"),
    ("anthropic", changed(ANTHROPIC, system=" "), "non-whitespace text"),
    ("anthropic", changed(ANTHROPIC, messages=[{"role": "user", "content": []}]), "non-empty"),
    ("anthropic", changed(ANTHROPIC, messages=[uses("a.b"), results("a.b")]), "should match"),
    ("anthropic", changed(ANTHROPIC, messages=[uses("a"), results("a"), uses("a"),
                                               results("a")]), "must be unique"),
    ("anthropic", changed(ANTHROPIC, messages=[uses("a", "b"), results("a")]),
     "without tool_result blocks immediately after: ['b']"),
    ("anthropic", changed(ANTHROPIC, messages=[results("a")]), "unexpected tool_use_id"),
]


@pytest.fixture
def server():
    api = FakeAPI()
    yield api
    api.close()


@pytest.mark.parametrize("flavour, body, problem", BAD)
def test_a_body_the_real_api_refuses_is_answered_400_and_recorded(server, flavour, body, problem):
    path = "/v1/chat/completions" if flavour == "openai" else "/v1/messages"
    server.reply("never sent")
    response = requests.post(server.url + path, json=body, timeout=30)
    assert response.status_code == 400
    assert problem in response.json()["error"]["message"]
    assert len(server.violations) == 1 and problem in server.violations[0][1]
    assert len(server.queue) == 1       # what was queued is for the next, valid request


@pytest.mark.parametrize("flavour, body", [
    ("openai", OPENAI), ("openai", changed(OPENAI, stream=True,
                                           stream_options={"include_usage": True})),
    ("openai", changed(OPENAI, messages=[calls("a", "a"), {"role": "tool", "tool_call_id": "a",
                                                           "content": "x"}] * 2)),
    ("anthropic", ANTHROPIC), ("anthropic", changed(ANTHROPIC, stream=True, system="Be brief.")),
    ("anthropic", changed(ANTHROPIC, messages=[uses("a", "b"), results("b", "a")])),
])
def test_a_body_the_real_api_takes_is_answered(server, flavour, body):
    path = "/v1/chat/completions" if flavour == "openai" else "/v1/messages"
    server.reply("fine")
    response = requests.post(server.url + path, json=body, timeout=30)
    assert response.status_code == 200 and server.violations == []


# -- conversations agentctl builds ----------------------------------------------------------------

def test_a_conversation_of_the_scripted_model_continued_by_anthropic_is_one_it_takes(
        fakeapi, tmp_path):
    """The scripted model names its calls call_0_0 every turn and may say nothing but spaces;
    the same agent continued with a real API must send what that API takes."""
    fork("-n", "a", "-m", script(tmp_path, {"steps": [
        {"content": " \n", "tool_calls": [{"name": "ps", "arguments": {}}]},
        {"content": "done"}]}), "first")
    assert agent("run", "a").code == 0
    agent("send", "a", "second")
    assert agent("run", "a").code == 0
    agent("send", "a", "third")
    fakeapi.reply("ok")
    result = agent("run", "-m", "anthropic:claude-test", "a")
    assert (result.code, result.out) == (0, "ok\n"), result.err
    sent = fakeapi.last["body"]["messages"]
    ids = [b["id"] for m in sent for b in m["content"] if b["type"] == "tool_use"]
    assert ids == ["call_0_0", "call_0_0_1"]
