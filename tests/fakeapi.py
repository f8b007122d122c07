"""A fake model API on 127.0.0.1 that speaks both wire formats, for the model tests.

    POST /v1/chat/completions   OpenAI Chat Completions, plain JSON or an SSE stream ending in [DONE]
    POST /v1/messages           Anthropic Messages, plain JSON or the event stream
    and both providers' batch APIs (tests/fakebatch.py: fakeapi.batches)

It records every request (method, path, headers, parsed body) and answers from a queue of
behaviours:

    fakeapi.reply("text", tool_calls=[("name", '{"raw": "json"}')], usage=(11, 7))
    fakeapi.reply("text", cut_after=3)       # drop the connection after 3 stream events
    fakeapi.reply("text", malformed=True)    # a body (or one stream event) that isn't JSON
    fakeapi.reply("text", delay=1.0)         # answer only after the client has timed out
    fakeapi.reply("text", drop=True)         # close the connection without answering
    fakeapi.reply(body=b"[[[1]]]")           # this body (to a stream: this one event's data)
    fakeapi.reply("text", gzip=True)         # the body gzip'd (Content-Encoding), a stream too
    fakeapi.error(429, "slow down", retry_after=1)
    fakeapi.flex_unavailable()               # OpenAI's 429 to a flex request

Every request body is checked first against the official SDKs' request types (openai's
CompletionCreateParams, anthropic's MessageCreateParams, validated by pydantic with unknown keys
refused) and against the rules those APIs enforce beyond their types (tool ids, tool results
answering the calls before them, text that isn't only whitespace: tests/fakechecks.py). A body
that fails is answered 400 with the problem, and recorded: the fixture then fails the test,
whatever it expected. The replies' bodies and events are made by tests/fakewire.py.

Test modules import the fixture: `from tests.fakeapi import fakeapi`.
"""

import gzip
import json
import socket
import sys
import time
import traceback
import zlib
from collections import deque

import pytest

from . import fakebatch, localhttp
from .fakechecks import Schemas, request_problem
from .fakewire import (anthropic_events, anthropic_plain, error_body, openai_chunks, openai_plain,
                       openai_tier)

OPENAI_KEY = "sk-test-openai-S3CRET-9f8e7d"
ANTHROPIC_KEY = "sk-ant-test-S3CRET-1a2b3c"


class FakeAPI(localhttp.LocalServer):
    def __init__(self, server_class=None, handler_class=None):
        Schemas.start()
        self.requests = []
        self.violations = []        # (path, problem) for each request body that broke the rules
        self.queue = deque()
        self.errors = []            # tracebacks of requests the fake failed to handle
        self.batches = fakebatch.Batches(self, {"openai": OPENAI_KEY, "anthropic": ANTHROPIC_KEY})
        super().__init__(handler_class or Handler, server_class or Server)

    def reply(self, text="", tool_calls=(), usage=(11, 7), pieces=3, cached=(0, 0), timings=None,
              **faults):
        """Queue a reply. tool_calls: (name, arguments) pairs or (id, name, arguments) triples.
        usage: (prompt tokens, output tokens); cached: of the prompt tokens, (read from the
        provider's cache, written to it), in each API's form (OpenAI reports only reads);
        timings: an object llama.cpp's server adds to an OpenAI reply (and its last chunk).

        faults: cut_after=N events (clean=True ends the stream neatly but without its end mark),
        gzip=True sends the body (a stream: each event as it goes) gzip'd (with body=bytes:
        those bytes as they are, under Content-Encoding: gzip),
        malformed=True, delay=seconds before answering, hold=an Event to wait for first, stall_after=N events + stall=seconds,
        error_event="overloaded_error" sent after cut_after events (Anthropic streams),
        ignore_stream=True answers a stream request with a plain JSON body, drop=True closes the
        connection without a word, as a server closing a kept-alive connection at once does,
        body=bytes answers with these bytes (a stream request: with one event holding them),
        stop="length" ends the reply for its length (Anthropic's stop_reason max_tokens).
        A reply names the model asked for and a fixed id, unless served="MODEL" and
        reply_id="ID" name others. An OpenAI reply to a request for service_tier "flex" says
        "flex", unless service_tier="default" (or another) says the tier that served it.
        A batch's request (tests/fakebatch.py) takes a reply as a direct request does.
        """
        calls = []
        for i, call in enumerate(tool_calls):
            call_id, name, arguments = call if len(call) == 3 else (None, *call)
            calls.append({"id": call_id, "name": name, "arguments": arguments, "index": i})
        self.queue.append(dict(faults, text=text, calls=calls, usage=usage, pieces=pieces,
                               cached=cached, timings=timings))
        return self

    def error(self, status, message="fake error", retry_after=None, times=1, body=None,
              code=None):
        """Queue an error in the provider's JSON form (code: OpenAI's error.code), or with
        body=bytes as its text/html body. A batch's request that takes it errs."""
        for _ in range(times):
            self.queue.append({"status": status, "message": message, "retry_after": retry_after,
                               "body": body, "code": code})
        return self

    def flex_unavailable(self, times=1):
        """Queue OpenAI's answer to a flex request it has no capacity for: 429 Resource
        Unavailable (not billed; the client may retry, or ask the standard tier)."""
        return self.error(429, "Resource Unavailable", times=times, code="resource_unavailable")

    def next_behaviour(self):
        """What answers the next request, direct or in a batch: the queue's first."""
        return self.queue.popleft() if self.queue else {
            "status": 400, "message": "fakeapi: nothing queued", "retry_after": None}

    def record(self, handler, body):
        self.requests.append({"method": handler.command, "path": handler.path, "body": body,
                              "headers": {k.lower(): v for k, v in handler.headers.items()},
                              "at": time.time()})

    @property
    def last(self):
        return self.requests[-1]


# A client that goes away is no fault of the fake's: a test's client timeout, a killed
# agent-run, a connection the fixture shuts at its end.
DISCONNECTED = (ConnectionError, TimeoutError)


class Server(localhttp.Server):
    def handle_error(self, request, client_address):
        """socketserver prints a traceback for any exception of a handler, into the middle
        of the test output. A client that disconnected is expected: nothing said. Anything
        else is kept, for the fixture to fail the test that made the request with it (and
        printed if it comes after that test)."""
        exc = sys.exc_info()[1]
        if isinstance(exc, DISCONNECTED) or (self.owner.closed and isinstance(exc, OSError)):
            return
        if self.owner.closed:
            super().handle_error(request, client_address)
        else:
            self.owner.errors.append(traceback.format_exc())


class Handler(localhttp.Handler):
    timeout = 10

    def post(self, fake, raw):
        if fake.batches.serve(self, raw):
            return
        body = json.loads(raw)
        fake.record(self, body)
        flavour = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}.get(self.path)
        try:
            problem = flavour and request_problem(flavour, body)
        except AssertionError as exc:   # no SDKs to check with: no request passes unchecked
            problem = str(exc)
        if problem:
            fake.violations.append((self.path, problem))
            behaviour = {"status": 400, "message": f"fakeapi: invalid request: {problem}"}
        else:
            behaviour = fake.next_behaviour()
        try:
            if flavour is None:
                self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            elif behaviour.get("drop"):
                self.drop()
            elif "status" in behaviour:
                self.send_error_reply(flavour, behaviour)
            else:
                time.sleep(behaviour.get("delay", 0))
                if "hold" in behaviour:         # a threading.Event the test sets
                    behaviour["hold"].wait(60)
                if body.get("stream") and not behaviour.get("ignore_stream"):
                    self.send_stream(flavour, behaviour, body)
                else:
                    self.send_plain(flavour, behaviour, body)
        except OSError:         # the client gave up on us (a timeout test): nothing to do
            self.close_connection = True

    def do_GET(self):
        if not self.server.owner.batches.serve(self, b""):
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})

    do_DELETE = do_GET

    # -- plain responses ----------------------------------------------------------------------

    def send_json(self, status, obj, headers=(), raw=None, cut=False, kind="application/json"):
        data = raw if raw is not None else json.dumps(obj).encode()
        self.answer(status, data, kind, headers, cut)
        if cut:
            self.drop()

    def send_error_reply(self, flavour, behaviour):
        status = behaviour["status"]
        obj = error_body(flavour, status, behaviour["message"], behaviour.get("code"))
        retry_after = behaviour.get("retry_after")
        headers = [("Retry-After", str(retry_after))] if retry_after is not None else []
        if behaviour.get("body") is not None:       # as a proxy in front of the API would answer
            self.send_json(status, None, headers, raw=behaviour["body"], kind="text/html")
        else:
            self.send_json(status, obj, headers)

    def send_plain(self, flavour, behaviour, body):
        gzipped = [("Content-Encoding", "gzip")] if behaviour.get("gzip") else []
        if behaviour.get("body") is not None:
            return self.send_json(200, None, gzipped, raw=behaviour["body"])
        if behaviour.get("malformed"):
            return self.send_json(200, None, raw=b'{"id": "broken", "choices": [{"mess')
        render = openai_plain if flavour == "openai" else anthropic_plain
        obj = render(behaviour, behaviour.get("served") or body.get("model"))
        if flavour == "openai" and openai_tier(behaviour, body):
            obj["service_tier"] = openai_tier(behaviour, body)
        if gzipped:
            return self.send_json(200, None, gzipped, raw=gzip.compress(json.dumps(obj).encode()))
        self.send_json(200, obj, cut=behaviour.get("cut_after") is not None)

    # -- streams ------------------------------------------------------------------------------

    def send_stream(self, flavour, behaviour, body):
        if flavour == "openai":
            include_usage = (body.get("stream_options") or {}).get("include_usage")
            chunks = openai_chunks(behaviour, behaviour.get("served") or body.get("model"),
                                   include_usage)
            if openai_tier(behaviour, body):        # each chunk names it, as the API's do
                chunks = [dict(c, service_tier=openai_tier(behaviour, body)) for c in chunks]
            events = [f"data: {json.dumps(c)}\n\n" for c in chunks]
            events.append("data: [DONE]\n\n")
        else:
            events = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in
                      anthropic_events(behaviour, behaviour.get("served") or body.get("model"))]
        if behaviour.get("body") is not None:
            events = [b"data: %s\n\n" % behaviour["body"]]
        events = [e if isinstance(e, bytes) else e.encode() for e in events]
        if behaviour.get("malformed"):
            events.insert(1, b"data: {\"choices\": [{\"delta\": {\"content\": \"Hel\n\n")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if behaviour.get("gzip") and behaviour.get("body") is not None:
            self.send_header("Content-Encoding", "gzip")
            events = [behaviour["body"]]                # as it is, whatever it claims
        elif behaviour.get("gzip"):
            self.send_header("Content-Encoding", "gzip")
            packer = zlib.compressobj(wbits=31)     # gzip's format, each event flushed out
            events = [packer.compress(e) + packer.flush(zlib.Z_SYNC_FLUSH) for e in events]
            events.append(packer.flush())
        self.end_headers()
        cut_after = behaviour.get("cut_after")
        for number, event in enumerate(events):
            if number == behaviour.get("stall_after"):
                time.sleep(behaviour.get("stall", 0))
            if number == cut_after:
                return self.end_early(behaviour)
            self.write_chunk(event)
        self.write_chunk(b"")

    def end_early(self, behaviour):
        if behaviour.get("error_event"):
            error = {"type": "error", "error": {"type": behaviour["error_event"],
                                                "message": "Overloaded"}}
            self.write_chunk(f"event: error\ndata: {json.dumps(error)}\n\n".encode())
        if behaviour.get("clean") or behaviour.get("error_event"):
            self.write_chunk(b"")
        else:
            self.drop()

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def drop(self):
        """Close the socket in the middle of a response, as a dying proxy would."""
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True


@pytest.fixture
def fakeapi(monkeypatch):
    """A running FakeAPI, with the environment pointing both providers at it. Fails the test
    when a request body broke the rules of its API (see request_problem)."""
    api = FakeAPI()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy", "AGENTCTL_MAX_TOKENS", "AGENTCTL_RETRY_TRIES"):
        monkeypatch.delenv(name, raising=False)
    settings = {"OPENAI_BASE_URL": api.url + "/v1", "ANTHROPIC_BASE_URL": api.url,
                "OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
                "NO_PROXY": "127.0.0.1,localhost", "AGENTCTL_RETRY_BACKOFF": "0.01",
                "AGENTCTL_RETRY_SECONDS": "10", "AGENTCTL_HTTP_TIMEOUT": "30"}
    # (30 s: a loaded machine may take a while to answer; a test of the client's timeout
    # sets a short one itself, and an answer that comes well after it)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    # The first request of a process must not wait for the SDKs beyond the client's timeout.
    Schemas.wait()
    yield api
    api.close()
    assert not api.violations, f"requests the real API would refuse: {api.violations}"
    assert not api.errors, "the fake API failed on a request:\n" + "\n".join(api.errors)


# -- helpers for the test modules -------------------------------------------------------------

MODELS = ("openai:gpt-test", "anthropic:claude-test")
HELLO = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."})


def ask(spec, stream=False, messages=HELLO, tools=()):
    """get_model(spec).complete(...): (reply, the text chunks given to on_text)."""
    from agentctl.models import get_model
    chunks = []
    reply = get_model(spec).complete([dict(m) for m in messages], list(tools),
                                     on_text=chunks.append if stream else None)
    return reply, chunks


def assert_no_secret(exc):
    text = f"{exc} {exc!r}"
    assert OPENAI_KEY not in text and ANTHROPIC_KEY not in text


def slow_turn(fakeapi, monkeypatch, name, prompt="think"):
    """agent-run of a new agent `name` on the fake API, returned once its model call is in
    flight: a call the fake API answers after 60 s, that agent-run waits 120 s for."""
    from .conftest import fork, started, wait_until
    monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "120")
    fakeapi.reply("too late", delay=60)
    fork("-n", name, "-m", "openai:gpt-test", prompt)
    run = started("agent-run", name)
    wait_until(lambda: fakeapi.requests, "the model call")
    return run
