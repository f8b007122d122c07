"""What a reply holds and the faults of the model APIs, for both providers, plain and streamed:
faults retried within the budget, then TempFail (75); refusals are ModelError (69). Run against
the fake API in tests/fakeapi.py."""

import json
import socket
import time

import pytest

from agentctl.errors import TempFail, UsageError
from agentctl.models import ModelError
from tests.fakeapi import MODELS, ask, assert_no_secret, fakeapi  # noqa: F401 (fixture)

both = pytest.mark.parametrize("spec", MODELS)
streamed = pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])


def refusal(spec, stream=False):
    """The message of the ModelError (exit 69) that ask() raises."""
    with pytest.raises(ModelError) as caught:
        ask(spec, stream)
    assert caught.value.code == 69
    return str(caught.value)


def timed(function, *args, **kwargs):
    start = time.monotonic()
    result = function(*args, **kwargs)
    return result, time.monotonic() - start


# -- what a reply holds, from either provider ------------------------------------------------------

@both
@streamed
def test_text_reply(fakeapi, spec, stream):
    fakeapi.reply("Hello, world! How are you today?", usage=(21, 9))
    reply, chunks = ask(spec, stream)
    assert reply.text == "Hello, world! How are you today?"
    assert reply.tool_calls == []
    assert reply.usage == {"input_tokens": 21, "output_tokens": 9, "cache_read_tokens": 0,
                           "cache_write_tokens": 0, "estimated": False}
    assert reply.stop_reason == "stop"
    assert chunks == (["Hello, worl", "d! How are ", "you today?"] if stream else [])


@both
@streamed
def test_usage_estimated_when_the_server_gives_none(fakeapi, spec, stream):
    fakeapi.reply("12345678", usage=None)
    reply, _ = ask(spec, stream)
    # "Be brief." + "Say hello." = 19 chars -> 5 tokens; "12345678" -> 2.
    assert reply.usage == {"input_tokens": 5, "output_tokens": 2, "cache_read_tokens": 0,
                           "cache_write_tokens": 0, "estimated": True}


# -- faults: retried within the budget, or refused -------------------------------------------------

@both
@streamed
def test_429_waits_for_retry_after_then_succeeds(fakeapi, spec, stream):
    fakeapi.error(429, "rate limited", retry_after=1).reply("hello after the wait")
    (reply, _), elapsed = timed(ask, spec, stream)
    assert reply.text == "hello after the wait"
    assert 0.9 <= elapsed < 15                  # the second asked, not a minute later
    assert len(fakeapi.requests) == 2


@both
@streamed
@pytest.mark.parametrize("status", [500, 503, 529])
def test_server_error_then_success(fakeapi, spec, stream, status):
    fakeapi.error(status, "oops").reply("fine now")
    reply, _ = ask(spec, stream)
    assert reply.text == "fine now"
    assert len(fakeapi.requests) == 2


@both
@streamed
def test_timeout_then_success(fakeapi, spec, stream, monkeypatch):
    # The client's read timeout is 1 s; the first answer comes after 3 s.
    monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "1")
    fakeapi.reply("too late", delay=3.0).reply("in time")
    (reply, _), elapsed = timed(ask, spec, stream)
    assert reply.text == "in time"
    assert 0.9 < elapsed < 15


@both
def test_stream_stalled_midway_then_success(fakeapi, spec, monkeypatch):
    monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "1")
    fakeapi.reply("stalls in the middle", stall_after=3, stall=3.0).reply("flows")
    reply, _ = ask(spec, stream=True)
    assert reply.text == "flows"


@both
@streamed
def test_cut_connection_then_success(fakeapi, spec, stream):
    # Streamed: dropped after 5 events (some text sent); plain: dropped after half the body.
    fakeapi.reply("Hello there, this will be cut", cut_after=5).reply("Hello again")
    reply, chunks = ask(spec, stream)
    assert reply.text == "Hello again"
    assert len(fakeapi.requests) == 2
    if stream:
        # What was streamed before the cut was streamed; the retry streams again from the start.
        assert "".join(chunks).endswith("Hello again")
        assert len("".join(chunks)) > len("Hello again")


@both
def test_stream_ended_without_end_mark_is_retried(fakeapi, spec):
    fakeapi.reply("Hello there, unfinished", cut_after=3, clean=True).reply("complete")
    reply, _ = ask(spec, stream=True)
    assert reply.text == "complete"
    assert len(fakeapi.requests) == 2


@both
@streamed
def test_malformed_json_then_success(fakeapi, spec, stream):
    fakeapi.reply("garbled", malformed=True).reply("clean")
    reply, _ = ask(spec, stream)
    assert reply.text == "clean"
    assert len(fakeapi.requests) == 2


@both
@streamed
def test_persistent_500_gives_tempfail_in_bounded_time(fakeapi, spec, stream):
    fakeapi.error(500, "down", times=10)
    start = time.monotonic()
    with pytest.raises(TempFail) as caught:
        ask(spec, stream)
    assert time.monotonic() - start < 15        # no long waits between the tries
    provider = spec.split(":")[0]
    assert str(caught.value) == f"model API unavailable: {provider}: HTTP 500 after 4 tries: down"
    assert caught.value.code == 75
    assert len(fakeapi.requests) == 4
    assert_no_secret(caught.value)


@both
def test_persistent_5xx_keeps_the_servers_words_redacted_and_bounded(fakeapi, spec):
    from tests.fakeapi import ANTHROPIC_KEY, OPENAI_KEY
    key = OPENAI_KEY if spec.startswith("openai") else ANTHROPIC_KEY
    fakeapi.error(503, f"Overloaded, key {key} " + "z" * 300 + "\nsecond line", times=4)
    with pytest.raises(TempFail) as caught:
        ask(spec)
    words = str(caught.value).split(" after 4 tries: ", 1)[1]
    assert words.startswith("Overloaded, key *** zzz") and len(words) <= 200
    assert_no_secret(caught.value)


def test_persistent_5xx_from_a_proxy_keeps_its_first_line(fakeapi):
    fakeapi.error(502, body=b"502 Bad Gateway\n<html><body>nginx</body></html>", times=4)
    with pytest.raises(TempFail) as caught:
        ask("openai:gpt-test")
    assert str(caught.value) == ("model API unavailable: openai: HTTP 502 after 4 tries: "
                                 "502 Bad Gateway")


@both
def test_persistent_malformed_gives_tempfail(fakeapi, spec):
    for _ in range(4):
        fakeapi.reply("x", malformed=True)
    with pytest.raises(TempFail, match=r"malformed response \(not JSON\) after 4 tries"):
        ask(spec)


@both
def test_tries_are_shared_between_http_and_stream_retries(fakeapi, spec):
    # Two HTTP 500s, then two cut streams: one retry loop counts them all, 4 tries.
    fakeapi.error(500, times=2).reply("cut", cut_after=2).reply("cut", cut_after=2)
    fakeapi.reply("never reached")
    with pytest.raises(TempFail, match="after 4 tries"):
        ask(spec, stream=True)
    assert len(fakeapi.requests) == 4


def test_retry_tries_setting(fakeapi, monkeypatch):
    monkeypatch.setenv("AGENTCTL_RETRY_TRIES", "1")
    fakeapi.error(503, times=2)
    with pytest.raises(TempFail, match="HTTP 503 after 1 try: fake error$"):
        ask("openai:gpt-test")
    assert len(fakeapi.requests) == 1


@both
def test_retry_after_beyond_budget_gives_up_at_once(fakeapi, spec):
    fakeapi.error(429, "slow down", retry_after=120).reply("never")
    start = time.monotonic()
    with pytest.raises(TempFail) as caught:
        ask(spec)
    assert time.monotonic() - start < 15        # not the 120 s
    assert "HTTP 429 after 1 try" in str(caught.value)
    assert "120 s" in str(caught.value)
    assert len(fakeapi.requests) == 1


def test_time_budget_bounds_the_retries(fakeapi, monkeypatch):
    monkeypatch.setenv("AGENTCTL_RETRY_TRIES", "50")
    monkeypatch.setenv("AGENTCTL_RETRY_SECONDS", "0.5")
    monkeypatch.setenv("AGENTCTL_RETRY_BACKOFF", "0.1")
    fakeapi.error(500, times=50)
    start = time.monotonic()
    with pytest.raises(TempFail, match=r"HTTP 500 after \d+ tries \(retry time"):
        ask("anthropic:claude-test")
    # (0.5 s and a try on a quiet machine; 50 tries with backoffs from 0.1 s, doubling,
    # would take hours)
    assert time.monotonic() - start < 10
    assert 2 <= len(fakeapi.requests) < 10


def test_budget_also_bounds_stream_retries(fakeapi, monkeypatch):
    monkeypatch.setenv("AGENTCTL_RETRY_TRIES", "50")
    monkeypatch.setenv("AGENTCTL_RETRY_SECONDS", "0.5")
    monkeypatch.setenv("AGENTCTL_RETRY_BACKOFF", "0.1")
    for _ in range(50):
        fakeapi.reply("cut short", cut_after=2)
    start = time.monotonic()
    with pytest.raises(TempFail, match="cut off after"):
        ask("openai:gpt-test", stream=True)
    assert time.monotonic() - start < 10        # (as above)


@both
def test_unreachable_server_gives_tempfail(fakeapi, monkeypatch, spec):
    with socket.socket() as sock:       # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(TempFail) as caught:
        ask(spec)
    assert f"cannot connect to 127.0.0.1:{port} after 4 tries" in str(caught.value)
    assert_no_secret(caught.value)


@both
@streamed
def test_401_is_a_model_error_without_the_key(fakeapi, spec, stream):
    from tests.fakeapi import ANTHROPIC_KEY, OPENAI_KEY
    key = OPENAI_KEY if spec.startswith("openai") else ANTHROPIC_KEY
    fakeapi.error(401, f"Incorrect API key provided: {key}")
    assert refusal(spec, stream) == (f"model API error: {spec.split(':')[0]}: HTTP 401: "
                                     "Incorrect API key provided: ***")
    assert len(fakeapi.requests) == 1


@both
def test_api_error_message_is_one_line_of_at_most_200_chars(fakeapi, spec):
    fakeapi.error(404, "model not found: " + "x" * 300 + "\nsecond line")
    refused = refusal(spec)
    message = refused.split("HTTP 404: ", 1)[1]
    assert message.startswith("model not found: xxx")
    assert len(message) <= 200
    assert "\n" not in refused


@both
def test_400_is_not_retried(fakeapi, spec):
    fakeapi.error(400, "bad request").reply("never")
    with pytest.raises(ModelError, match="HTTP 400: bad request"):
        ask(spec)
    assert len(fakeapi.requests) == 1


@pytest.mark.parametrize("variable", ["AGENTCTL_RETRY_SECONDS", "AGENTCTL_HTTP_TIMEOUT",
                                      "AGENTCTL_RETRY_BACKOFF", "AGENTCTL_RETRY_TRIES"])
def test_bad_setting_is_a_usage_error(fakeapi, monkeypatch, variable):
    monkeypatch.setenv(variable, "soon")
    with pytest.raises(UsageError, match=f"{variable} must be a (whole )?number"):
        ask("openai:gpt-test")


@both
def test_server_ignoring_stream_gets_its_text_streamed_in_one_piece(fakeapi, spec):
    fakeapi.reply("all at once", ignore_stream=True)
    reply, chunks = ask(spec, stream=True)
    assert reply.text == "all at once"
    assert chunks == ["all at once"]


def test_unparsable_retry_after_falls_back_to_backoff(fakeapi):
    fakeapi.error(503, retry_after="in a moment").reply("back")
    reply, _ = ask("openai:gpt-test")
    assert reply.text == "back"


@both
def test_a_kept_alive_connection_is_reused_and_one_the_server_closed_is_retried(fakeapi, spec):
    from agentctl.models import get_model
    from tests.fakeapi import HELLO
    model = get_model(spec)
    fakeapi.reply("first").reply("unanswered", drop=True).reply("second")
    assert model.complete(list(HELLO), []).text == "first"
    assert model.complete(list(HELLO), []).text == "second"
    assert len(fakeapi.requests) == 3
    # The second call went out on the first call's connection, which the server closed.
    assert len(fakeapi.sockets) == 2


@both
def test_tls_failure_is_a_model_error(fakeapi, monkeypatch, spec):
    # The fake server speaks plain HTTP: a TLS handshake with it fails.
    host = fakeapi.url.split("//")[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"https://{host}/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"https://{host}")
    assert refusal(spec) == f"model API error: {spec.split(':')[0]}: TLS failure with {host}"


# -- bodies beyond jsonin's bounds: refused at once, never a crash -------------------------------------

DEEP = b"[" * 50_000 + b"]" * 50_000


@both
@streamed
def test_a_body_nested_too_deep_is_a_model_error_at_once(fakeapi, spec, stream):
    fakeapi.reply(body=b'{"choices": ' + DEEP + b"}").reply("never")
    assert refusal(spec, stream) == (f"model API error: {spec.split(':')[0]}: response: "
                                     "nested more than 100 levels deep")
    assert len(fakeapi.requests) == 1


@both
@streamed
def test_a_body_too_large_is_a_model_error_at_once(fakeapi, monkeypatch, spec, stream):
    monkeypatch.setattr("agentctl.jsonin.MAX_BYTES", 4096)
    fakeapi.reply("x" * 5000).reply("never")
    with pytest.raises(ModelError, match=r": response: larger than 4 KiB$"):
        ask(spec, stream)
    assert len(fakeapi.requests) == 1


# -- keys: redacted before any text is cut ---------------------------------------------------------------

@both
def test_a_key_straddling_the_cut_of_a_stream_error_is_redacted_whole(fakeapi, spec):
    from tests.fakeapi import ANTHROPIC_KEY, OPENAI_KEY
    key = OPENAI_KEY if spec.startswith("openai") else ANTHROPIC_KEY
    message = "x" * 190 + key + " and more"
    error = ({"error": {"message": message}} if spec.startswith("openai") else
             {"type": "error", "error": {"type": "invalid_request_error", "message": message}})
    for _ in range(4):
        fakeapi.reply(body=json.dumps(error).encode())
    with pytest.raises((TempFail, ModelError)) as caught:
        ask(spec, stream=True)
    assert "x" * 190 + "***" in str(caught.value)
    assert key[:6] not in str(caught.value)


def test_redact_replaces_each_key_of_8_characters_or_more(monkeypatch):
    from agentctl.keys import redact
    monkeypatch.setenv("OPENAI_API_KEY", " sk-abcdefgh \n")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "short")
    assert redact("key sk-abcdefgh, sk-abcdefgh; a short one") == "key ***, ***; a short one"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-abcdefgh-longer")
    assert redact("sk-abcdefgh-longer") == "***"
    assert redact("") == "" and redact(None) is None


# -- refusals that say what to do --------------------------------------------------------------------

@both
def test_401_without_a_key_names_the_variable_to_set(fakeapi, monkeypatch, spec):
    variable = "OPENAI_API_KEY" if spec.startswith("openai") else "ANTHROPIC_API_KEY"
    monkeypatch.delenv(variable)        # a loopback server may need none: this one does
    fakeapi.error(401, "Missing API key")
    assert refusal(spec) == (f"model API error: {spec.split(':')[0]}: HTTP 401: "
                             f"Missing API key (set {variable})")


CONTEXT_HINT = " (a smaller context window may help: agent-fork -w TOKENS or AGENTCTL_CONTEXT_WINDOW)"


@pytest.mark.parametrize("spec, message", [
    ("openai:gpt-test", "This model's maximum context length is 8192 tokens. However, your "
                        "messages resulted in 9001 tokens."),
    ("anthropic:claude-test", "prompt is too long: 210000 tokens > 200000 maximum"),
    ("openai:gpt-test", "the request exceeds the available context size, try increasing it"),
])
def test_400_for_a_context_too_long_hints_at_a_smaller_window(fakeapi, spec, message):
    fakeapi.error(400, message)
    assert refusal(spec) == (f"model API error: {spec.split(':')[0]}: HTTP 400: "
                             f"{message}{CONTEXT_HINT}")


def test_400_whose_error_code_says_context_length_exceeded_hints_too(fakeapi):
    body = {"error": {"message": "Invalid request.", "type": "invalid_request_error",
                      "param": "messages", "code": "context_length_exceeded"}}
    fakeapi.error(400, body=json.dumps(body).encode())
    assert refusal("openai:gpt-test") == ("model API error: openai: HTTP 400: Invalid request."
                                          f"{CONTEXT_HINT}")


def test_other_400s_get_no_hint(fakeapi):
    fakeapi.error(400, "messages: roles must alternate")
    assert refusal("anthropic:claude-test").endswith("HTTP 400: messages: roles must alternate")


@both
@pytest.mark.parametrize("key", ["sk-café-0123456789", "sk-ключ-0123456789", "sk-01234\n56789",
                                 "sk-01234 56789", "sk-0123456789\x7f"])
def test_a_key_no_http_header_can_carry_is_a_usage_error(fakeapi, monkeypatch, spec, key):
    variable = "OPENAI_API_KEY" if spec.startswith("openai") else "ANTHROPIC_API_KEY"
    monkeypatch.setenv(variable, key)
    from agentctl.models import get_model
    for call in (get_model(spec).check, lambda: ask(spec)):
        with pytest.raises(UsageError) as caught:
            call()
        assert str(caught.value) == (f"{variable} must be printable ASCII without spaces "
                                     "(it is sent in an HTTP header)")
        assert caught.value.code == 2
    assert fakeapi.requests == []


@both
@streamed
def test_a_reply_cut_for_its_length_says_so(fakeapi, spec, stream):
    fakeapi.reply("The answer is", stop="length")
    reply, _ = ask(spec, stream)
    assert (reply.text, reply.stop_reason) == ("The answer is", "length")
