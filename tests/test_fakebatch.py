"""The fake batch APIs (tests/fakebatch.py), driven by the official SDKs. Each answer is also
validated against the SDK's type, strictly (JSON's own types: the SDKs build their objects
without checking them), and must hold no key the type lacks: then the fake speaks the wire
form the batch client will be tested against."""

import functools
import json

import anthropic
import openai
import pydantic
import pytest
import requests
from anthropic.types.messages import MessageBatch, MessageBatchIndividualResponse
from openai.types import Batch, FileObject
from openai.types.chat import ChatCompletion

from tests.fakeapi import ANTHROPIC_KEY, OPENAI_KEY, FakeAPI, fakeapi  # noqa: F401 (fixture)

HI = [{"role": "user", "content": "hi"}]
CHAT = {"model": "gpt-test", "messages": HI}
MESSAGE = {"model": "claude-test", "max_tokens": 10, "messages": HI}


@pytest.fixture
def server():
    """A fake without the fixture's verdict: for the calls the real APIs refuse."""
    api = FakeAPI()
    yield api
    api.close()


def strictly(kind, data):
    """data validated as the SDK's type `kind`, with no key anywhere that the type lacks."""
    def extras(value, where):
        if isinstance(value, pydantic.BaseModel):
            assert not value.model_extra, f"{where}: keys {kind.__name__} lacks: " \
                                          f"{sorted(value.model_extra)}"
            for name in type(value).model_fields:
                extras(getattr(value, name), f"{where}.{name}")
        elif isinstance(value, list):
            for n, item in enumerate(value):
                extras(item, f"{where}.{n}")
    parsed = kind.model_validate_json(json.dumps(data), strict=True)
    extras(parsed, kind.__name__)
    return parsed


@functools.lru_cache(maxsize=2)        # a client is slow to make (its TLS context)
def oai(api, key=OPENAI_KEY):
    return openai.OpenAI(base_url=api.url + "/v1", api_key=key, max_retries=0)


@functools.lru_cache(maxsize=2)
def ant(api):
    return anthropic.Anthropic(base_url=api.url, api_key=ANTHROPIC_KEY, max_retries=0)


def jsonl(lines):
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def openai_lines(n=2, **body):
    return [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": dict(CHAT, **body)} for i in range(n)]


def openai_batch(api, lines=None, metadata=None):
    client = oai(api)
    upload = client.files.with_raw_response.create(file=("in.jsonl", jsonl(
        lines or openai_lines())), purpose="batch")
    strictly(FileObject, upload.http_response.json())
    return client.batches.create(input_file_id=upload.parse().id, metadata=metadata,
                                 endpoint="/v1/chat/completions", completion_window="24h")


def retrieve(api, batch_id):
    raw = oai(api).batches.with_raw_response.retrieve(batch_id)
    return strictly(Batch, raw.http_response.json())


def content(api, file_id):
    return [json.loads(line) for line in oai(api).files.content(file_id).text.splitlines()]


def anthropic_batch(api, n=2, **params):
    return ant(api).messages.batches.create(requests=[
        {"custom_id": f"q{i}", "params": dict(MESSAGE, **params)} for i in range(n)])


def raw_results(api, batch_id):
    return requests.get(f"{api.url}/v1/messages/batches/{batch_id}/results", timeout=30,
                        headers={"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"})


def results(api, batch_id):
    batch = ant(api).messages.batches.with_raw_response.retrieve(batch_id)
    strictly(MessageBatch, batch.http_response.json())
    assert batch.parse().results_url == f"{api.url}/v1/messages/batches/{batch_id}/results"
    text = raw_results(api, batch_id).text
    typed = {r.custom_id: r.result for r in ant(api).messages.batches.results(batch_id)}
    lines = [strictly(MessageBatchIndividualResponse, json.loads(t)) for t in text.splitlines()]
    assert [line.custom_id for line in lines] == list(typed)
    return typed


# -- OpenAI ---------------------------------------------------------------------------------------

def test_an_openai_batch_of_two_that_succeeds(fakeapi):
    batch = openai_batch(fakeapi, metadata={"agent": "a1"})
    assert (batch.status, batch.request_counts.total, batch.metadata) == ("validating", 0,
                                                                          {"agent": "a1"})
    assert retrieve(fakeapi, batch.id).status == "in_progress"     # until the test ends it
    fakeapi.reply("one", tool_calls=[("ps", "{}")], usage=(40, 9), cached=(32, 0))
    fakeapi.reply("two", usage=(30, 5))
    fakeapi.batches.finish()
    done = retrieve(fakeapi, batch.id)
    assert (done.status, done.request_counts.completed, done.error_file_id) == ("completed", 2,
                                                                               None)
    assert (done.usage.input_tokens, done.usage.output_tokens,
            done.usage.input_tokens_details.cached_tokens) == (70, 14, 32)
    lines = content(fakeapi, done.output_file_id)
    assert [line["custom_id"] for line in lines] == ["r1", "r0"]    # in no promised order
    replies = {line["custom_id"]: strictly(ChatCompletion, line["response"]["body"])
               for line in lines}
    assert replies["r0"].choices[0].message.tool_calls[0].function.name == "ps"
    assert replies["r0"].usage.prompt_tokens_details.cached_tokens == 32
    assert replies["r1"].choices[0].message.content == "two"
    assert {r.service_tier for r in replies.values()} == {"default"}
    assert all(line["response"]["status_code"] == 200 and line["error"] is None for line in lines)
    made = fakeapi.batches[batch.id]
    assert (made.provider, made.custom_ids, made.bodies, made.cancelled) == (
        "openai", ["r0", "r1"], [CHAT, CHAT], False)
    assert (made.polls, made.fetches) == (2, 1)
    assert fakeapi.batches.calls == {"upload": 1, "create": 1, "poll": 2, "results": 1}
    assert [(r["method"], r["path"]) for r in fakeapi.requests][:2] == [
        ("POST", "/v1/files"), ("POST", "/v1/batches")]
    assert fakeapi.requests[0]["body"]["purpose"] == "batch"


def test_an_openai_batch_that_expires_and_one_request_that_errs(fakeapi):
    batch = openai_batch(fakeapi, openai_lines(3))
    fakeapi.reply("one").error(400, "bad")
    fakeapi.batches.expire(batch.id, done=2)
    done = retrieve(fakeapi, batch.id)
    assert (done.status, done.request_counts.completed, done.request_counts.failed) == (
        "expired", 1, 2)
    assert [line["custom_id"] for line in content(fakeapi, done.output_file_id)] == ["r0"]
    errors = {line["custom_id"]: line for line in content(fakeapi, done.error_file_id)}
    assert errors["r1"]["response"]["status_code"] == 400 and errors["r1"]["error"] is None
    assert errors["r1"]["response"]["body"]["error"]["message"] == "bad"
    assert (errors["r2"]["response"], errors["r2"]["error"]["code"]) == (None, "batch_expired")
    assert fakeapi.batches[batch.id].outcomes == {"r0": "succeeded", "r1": "errored",
                                                  "r2": "expired"}


def test_an_openai_batch_cancelled_and_one_that_failed(fakeapi):
    client = oai(fakeapi)
    batch = openai_batch(fakeapi)
    assert client.batches.cancel(batch.id).status == "cancelling"
    done = retrieve(fakeapi, batch.id)                  # the next poll ends it
    assert (done.status, done.output_file_id, done.request_counts.failed) == ("cancelled", None, 2)
    assert {line["error"]["code"] for line in content(fakeapi, done.error_file_id)} == {
        "batch_cancelled"}
    assert fakeapi.batches[batch.id].cancelled
    other = openai_batch(fakeapi)
    fakeapi.reply("x").reply("y")
    fakeapi.batches.finish(other.id)
    with pytest.raises(openai.BadRequestError):         # not after it has ended
        client.batches.cancel(other.id)
    failed = openai_batch(fakeapi)
    fakeapi.batches.fail(failed.id, "no such model")
    done = retrieve(fakeapi, failed.id)
    assert (done.status, done.errors.data[0].message) == ("failed", "no such model")
    assert fakeapi.batches.calls["cancel"] == 2


def test_openai_batches_listed_newest_first_and_found_by_metadata(fakeapi):
    made = [openai_batch(fakeapi, metadata={"agent": f"a{i}"}).id for i in range(3)]
    page = oai(fakeapi).batches.with_raw_response.list(limit=2)
    data = page.http_response.json()
    assert [b["id"] for b in data["data"]] == made[:0:-1] and data["has_more"]
    assert (data["first_id"], data["last_id"], data["object"]) == (made[2], made[1], "list")
    strictly(Batch, data["data"][0])
    found = [b.id for b in oai(fakeapi).batches.list(limit=2)      # every page, by `after`
             if (b.metadata or {}).get("agent") == "a0"]
    assert found == [made[0]] and fakeapi.batches.calls["list"] == 3


def test_finish_ends_each_batch_as_its_state_says(fakeapi):
    cancelled, running = openai_batch(fakeapi), openai_batch(fakeapi)
    oai(fakeapi).batches.cancel(cancelled.id)
    fakeapi.reply("a").reply("b")
    assert [b.id for b in fakeapi.batches.finish()] == [cancelled.id, running.id]
    assert [retrieve(fakeapi, b.id).status for b in (cancelled, running)] == ["cancelled",
                                                                               "completed"]
    assert len(fakeapi.queue) == 0


def test_auto_ends_a_batch_at_its_first_poll(fakeapi):
    fakeapi.batches.auto = True
    batch = openai_batch(fakeapi)
    fakeapi.reply("one").reply("two")
    assert retrieve(fakeapi, batch.id).status == "completed"


def test_a_create_whose_answer_is_lost_leaves_its_batch_to_be_found(fakeapi):
    seen = []
    fakeapi.batches.drop_create(1, before=seen.append)
    with pytest.raises(openai.APIConnectionError):
        openai_batch(fakeapi, metadata={"turn": "7"})
    (batch,) = fakeapi.batches.made
    assert seen == [batch] and batch.metadata == {"turn": "7"}
    listed = [b.id for b in oai(fakeapi).batches.list() if b.metadata == {"turn": "7"}]
    assert listed == [batch.id]


# -- Anthropic ------------------------------------------------------------------------------------

def test_an_anthropic_batch_of_two_that_succeeds(fakeapi):
    client = ant(fakeapi)
    batch = anthropic_batch(fakeapi)
    assert (batch.processing_status, batch.request_counts.processing) == ("in_progress", 2)
    assert client.messages.batches.retrieve(batch.id).results_url is None
    fakeapi.reply("one", usage=(50, 9), cached=(30, 10)).reply("two", tool_calls=[("ps", "{}")])
    fakeapi.batches.finish(batch.id)
    ended = client.messages.batches.retrieve(batch.id)
    assert (ended.processing_status, ended.request_counts.succeeded) == ("ended", 2)
    typed = results(fakeapi, batch.id)
    assert list(typed) == ["q1", "q0"]
    one = typed["q0"].message
    assert (one.content[0].text, one.usage.input_tokens, one.usage.cache_read_input_tokens,
            one.usage.cache_creation_input_tokens, one.usage.service_tier) == (
        "one", 10, 30, 10, "batch")
    assert typed["q1"].message.content[-1].name == "ps"
    made = fakeapi.batches[batch.id]
    assert (made.provider, made.custom_ids, made.bodies) == ("anthropic", ["q0", "q1"],
                                                             [MESSAGE, MESSAGE])
    assert fakeapi.batches.calls == {"create": 1, "poll": 4, "results": 2}


def test_an_anthropic_batch_that_expires_with_a_request_that_errs(fakeapi):
    batch = anthropic_batch(fakeapi, 3)
    fakeapi.reply("one").error(500, "down")
    fakeapi.batches.expire(done=2)
    typed = results(fakeapi, batch.id)
    assert {c: r.type for c, r in typed.items()} == {"q0": "succeeded", "q1": "errored",
                                                     "q2": "expired"}
    assert (typed["q1"].error.error.type, typed["q1"].error.error.message) == ("api_error",
                                                                               "down")
    counts = ant(fakeapi).messages.batches.retrieve(batch.id).request_counts
    assert (counts.succeeded, counts.errored, counts.expired, counts.processing) == (1, 1, 1, 0)


def test_an_anthropic_batch_cancelled(fakeapi):
    client = ant(fakeapi)
    batch = anthropic_batch(fakeapi)
    assert client.messages.batches.cancel(batch.id).processing_status == "canceling"
    early = raw_results(fakeapi, batch.id)                  # no results before it ends
    assert early.status_code == 400 and "has not ended" in early.json()["error"]["message"]
    ended = client.messages.batches.retrieve(batch.id)
    assert (ended.processing_status, ended.request_counts.canceled) == ("ended", 2)
    assert ended.cancel_initiated_at is not None
    assert {r.type for r in results(fakeapi, batch.id).values()} == {"canceled"}


def test_anthropic_batches_listed_a_page_at_a_time(fakeapi):
    made = [anthropic_batch(fakeapi, 1).id for _ in range(3)]
    page = ant(fakeapi).messages.batches.list(limit=2)
    assert [b.id for b in page.data] == made[:0:-1] and page.has_more
    assert [b.id for b in ant(fakeapi).messages.batches.list(limit=2)] == made[::-1]
    after = ant(fakeapi).messages.batches.list(limit=5, after_id=made[2])
    assert [b.id for b in after.data] == made[1::-1] and not after.has_more


# -- what the real APIs refuse ---------------------------------------------------------------

BAD_FILES = [
    (openai_lines(1, temprature=0.5), "temprature: Extra inputs are not permitted"),
    (openai_lines(1, stream=True), "body.stream: a batch's requests are not streamed"),
    (openai_lines(1) * 2, "custom_id 'r0' is not unique"),
    (openai_lines(1) + [dict(openai_lines(2)[1], body=dict(CHAT, model="gpt-other"))],
     "one model per batch file, not ['gpt-other', 'gpt-test']"),
    ([dict(openai_lines(1)[0], url="/v1/embeddings")], "only POST /v1/chat/completions"),
    ([dict(openai_lines(1)[0], body=dict(CHAT, messages=[{"role": "tool", "tool_call_id": "a",
                                                          "content": "x"}]))],
     "must be a response to a preceding message"),
]


@pytest.mark.parametrize("lines, problem", BAD_FILES)
def test_a_bad_openai_file_is_refused_and_recorded(server, lines, problem):
    with pytest.raises(openai.BadRequestError) as refused:
        oai(server).files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    assert problem in refused.value.message
    assert len(server.violations) == 1 and problem in server.violations[0][1]
    assert server.batches.made == [] and len(server.batches.files) == 0


@pytest.mark.parametrize("params, problem", [
    (dict(MESSAGE, stream=True), "params.stream: a batch's requests are not streamed"),
    (dict(MESSAGE, max_tokens="10"), "max_tokens: Input should be a valid integer"),
    (dict(MESSAGE, messages=[{"role": "user", "content": " "}]), "non-whitespace text")])
def test_a_bad_anthropic_request_is_refused_and_recorded(server, params, problem):
    with pytest.raises(anthropic.BadRequestError) as refused:
        ant(server).messages.batches.create(requests=[{"custom_id": "q0", "params": params}])
    assert problem in str(refused.value)
    assert len(server.violations) == 1 and problem in server.violations[0][1]


def test_a_batch_create_of_the_wrong_form_and_a_wrong_key_are_refused(server):
    with pytest.raises(openai.BadRequestError):
        oai(server).batches.create(input_file_id="file-none", endpoint="/v1/chat/completions",
                                   completion_window="24h")
    with pytest.raises(anthropic.BadRequestError):
        ant(server).messages.batches.create(requests=[{"custom_id": "q 0", "params": MESSAGE}])
    assert len(server.violations) == 2
    with pytest.raises(openai.AuthenticationError):
        oai(server, key="sk-wrong").batches.list()
    assert len(server.violations) == 2                  # a client's key is no rule it broke


def test_a_behaviour_of_the_wire_in_a_batch_fails_the_test(server):
    server.reply("cut", cut_after=2).reply(malformed=True)
    batch = anthropic_batch(server)
    server.batches.finish()
    assert "cut_after" in server.errors[0] and len(server.errors) == 1
    first, second = raw_results(server, batch.id).text.splitlines()
    json.loads(second)                                  # q0's (results come last first)
    with pytest.raises(ValueError):                     # q1's, malformed
        json.loads(first)


# -- the direct path's flex tier --------------------------------------------------------------

def test_a_flex_request_is_answered_as_flex_unless_a_behaviour_says_otherwise(fakeapi):
    client = oai(fakeapi)
    fakeapi.reply("a").reply("b", service_tier="default").reply("c")
    assert client.chat.completions.create(service_tier="flex", **CHAT).service_tier == "flex"
    assert client.chat.completions.create(service_tier="flex", **CHAT).service_tier == "default"
    chunks = list(client.chat.completions.create(service_tier="flex", stream=True, **CHAT))
    assert {c.service_tier for c in chunks} == {"flex"}
    fakeapi.reply("d")
    assert client.chat.completions.create(**CHAT).service_tier is None
    fakeapi.flex_unavailable()
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(service_tier="flex", **CHAT)
    assert (refused.value.status_code, refused.value.code) == (429, "resource_unavailable")
