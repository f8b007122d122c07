"""A model API on 127.0.0.1 that enforces limits as a provider does, for the tests and the
bench of shared endpoint limits (agent-run(1), Providers):

- at most `concurrency` requests in flight: one more is answered 429;
- at most `rate` requests a second, with a burst of `burst` (a token bucket): one more
  is answered 429;

each 429 with Retry-After (whole seconds, as RFC 9110 has it) and retry-after-ms (as
the official SDKs read first), and every response with the rate-limit headers of the
API it speaks (OpenAI's x-ratelimit-*-requests: a Go duration until the bucket is full;
Anthropic's anthropic-ratelimit-requests-*: the RFC 3339 time it is). A request that
passes is answered after `latency` seconds with a short reply in the API's plain JSON
form (a stream asked for is answered plain: a client must take that too).

It counts what a test checks: requests answered, refused for concurrency and for rate,
the most in flight at once, and when each answer was sent.

    server = LimitedAPI(concurrency=2, rate=4, burst=2, latency=0.2)
    ... OPENAI_BASE_URL=server.url + "/v1" ...
    server.counts()  ->  {"answered": 20, "over_concurrency": 0, "over_rate": 1, ...}
"""

import datetime
import json
import math
import socket
import threading
import time

from . import localhttp


class LimitedAPI(localhttp.LocalServer):
    def __init__(self, concurrency=2, rate=4.0, burst=None, latency=0.2, headers=True):
        self.concurrency, self.rate, self.latency = concurrency, float(rate), latency
        self.burst = float(burst if burst is not None else max(1.0, rate))
        self.headers = headers          # send the rate-limit headers
        self.lock = threading.Lock()
        self.tokens, self.filled = self.burst, time.monotonic()
        self.in_flight = self.most_in_flight = 0
        self.answered, self.over_concurrency, self.over_rate = 0, 0, 0
        self.answers = []               # time.time() of each answer sent (200)
        self.arrivals = []              # (time.time(), status) of each request
        super().__init__(_Handler, _Server)

    # -- the limits ----------------------------------------------------------------------

    def _refill(self, now):
        self.tokens = min(self.burst, self.tokens + (now - self.filled) * self.rate)
        self.filled = now

    def admit(self):
        """(status, retry after in seconds or None, bucket state for the headers)."""
        with self.lock:
            now = time.monotonic()
            self._refill(now)
            if self.in_flight >= self.concurrency:
                self.over_concurrency += 1
                status, wait = 429, self.latency
            elif self.tokens < 1.0:
                self.over_rate += 1
                status, wait = 429, (1.0 - self.tokens) / self.rate
            else:
                self.tokens -= 1.0
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                status, wait = 200, None
            self.arrivals.append((time.time(), status))
            return status, wait, self.tokens

    def done(self):
        with self.lock:
            self.in_flight -= 1
            self.answered += 1
            self.answers.append(time.time())

    def counts(self):
        with self.lock:
            return {"answered": self.answered, "over_concurrency": self.over_concurrency,
                    "over_rate": self.over_rate, "most_in_flight": self.most_in_flight,
                    "refused": self.over_concurrency + self.over_rate}

    def limit_per_second(self):
        """The most requests a second it can answer for long: its rate, or its concurrency
        over its latency when that is less."""
        return min(self.rate, self.concurrency / self.latency if self.latency else self.rate)


def go_duration(seconds):
    """A Go duration as OpenAI writes its resets: 1s, 6m0s, 12ms, 2m59.56s."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


class _Server(localhttp.Server):
    def handle_error(self, request, client_address):
        pass            # a client gone away (a killed run) is no fault of the server's


class _Handler(localhttp.Handler):
    timeout = 30

    def post(self, api, raw):
        body = json.loads(raw or b"{}")
        flavour = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}.get(self.path)
        if flavour is None:
            return self.send(404, {"error": {"message": f"no route {self.path}"}}, [])
        status, wait, tokens = api.admit()
        headers = self.limit_headers(api, flavour, tokens)
        if status != 200:
            headers += [("Retry-After", str(max(1, math.ceil(wait)))),
                        ("retry-after-ms", str(max(1, round(wait * 1000))))]
            error = {"message": "rate limited (fake)", "type": "rate_limit_error"}
            return self.send(429, {"error": error} if flavour == "openai"
                             else {"type": "error", "error": error}, headers)
        try:
            time.sleep(api.latency)     # the provider's time to answer
        finally:
            # Done before the answer leaves: once the client has it, the slot it held is
            # free and another run may be let through at once (counted after the send, a
            # server thread descheduled between the two counted it as over the limit)
            api.done()
        self.send(200, reply(flavour, body.get("model")), headers)

    def limit_headers(self, api, flavour, tokens):
        if not api.headers:
            return []
        full_in = (api.burst - tokens) / api.rate
        if flavour == "openai":
            return [("x-ratelimit-limit-requests", str(int(api.burst))),
                    ("x-ratelimit-remaining-requests", str(int(tokens))),
                    ("x-ratelimit-reset-requests", go_duration(full_in))]
        at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=full_in)
        return [("anthropic-ratelimit-requests-limit", str(int(api.burst))),
                ("anthropic-ratelimit-requests-remaining", str(int(tokens))),
                ("anthropic-ratelimit-requests-reset",
                 at.isoformat(timespec="milliseconds").replace("+00:00", "Z"))]

    def send(self, status, obj, headers):
        try:
            self.answer(status, json.dumps(obj).encode(), "application/json", headers)
        except OSError:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def reply(flavour, model):
    if flavour == "openai":
        return {"id": "chatcmpl-limited", "object": "chat.completion", "created": 1700000000,
                "model": model, "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                             "message": {"role": "assistant", "content": "done",
                                                         "refusal": None}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}
    return {"id": "msg_limited", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
