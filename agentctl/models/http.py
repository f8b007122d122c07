"""The HTTP side of the API models: settings, one retry loop, error text, SSE parsing.

One loop retries every fault of a call worth another try, whatever its layer: a refused or dropped
connection (a kept-alive one the server had closed among them), a timeout, a retryable status
(waiting as long as Retry-After asks), a stream cut midway, a body that isn't JSON, an overload
notice inside a stream. urllib3's own retries are off, so the tries and the time are counted in one
place. The connections, the proxy and the certificates are transport.py's.
"""

import json
import random
import time

from urllib3.exceptions import (ConnectTimeoutError, HTTPError, ProtocolError, ReadTimeoutError,
                                SSLError)

from .. import env, jsonin
from ..errors import TempFail
from ..keys import redact
from . import limits, transport
from .base import ModelError, Transient, Unusable, load_json, said
from ..endpoint import where

# The official SDKs retry 408 and 409 too; 529 is Anthropic's "overloaded". Any other non-2xx status
# is taken as the API's final word.
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
CONNECT_TIMEOUT = 10.0
ERROR_BYTES = 64 * 1024     # of an error response's body, for its explanation


class CutOff(Exception):
    """A response's body that stopped before its end: the connection broke while it came."""


class FlexBusy(Exception):
    """OpenAI's flex tier has no capacity now (its 429): not the endpoint's rate limit,
    so the gate is told nothing of it; the caller waits and tries again, or calls at
    the standard tier (models.openai)."""


# -- settings, read from the environment at each call and never kept --------------------------------

FLEX_TIMEOUT = 900.0     # OpenAI's advice for its flex tier, which queues


class Settings:
    def __init__(self, flex=False):
        self.tries = env.number("AGENTCTL_RETRY_TRIES", 4, minimum=1, whole=True)
        self.seconds = env.number("AGENTCTL_RETRY_SECONDS", 60.0)
        self.backoff = env.number("AGENTCTL_RETRY_BACKOFF", 1.0)
        self.timeout = env.number("AGENTCTL_HTTP_TIMEOUT", FLEX_TIMEOUT if flex else 120.0,
                                  minimum=0.001)

    @property
    def timeouts(self):
        return (min(CONNECT_TIMEOUT, self.timeout), self.timeout)


# -- the retry budget ---------------------------------------------------------------------------------

class Budget:
    """The tries and the time one complete() call may spend."""

    def __init__(self, settings):
        self.settings = settings
        self.deadline = time.monotonic() + settings.seconds
        self.tries = 0
        self.note = ""      # why the last retry was refused, when the cause was time

    def backoff(self):
        # Exponential, with jitter so that parallel agent-run processes don't retry in lockstep.
        wait = self.settings.backoff * 2 ** max(0, self.tries - 1)
        return wait * random.uniform(0.75, 1.0)

    def allows(self, wait, asked=False):
        """May we wait `wait` seconds and try again?"""
        if self.tries >= self.settings.tries:
            return False
        if time.monotonic() + wait > self.deadline:
            limit = f"AGENTCTL_RETRY_SECONDS={self.settings.seconds:g}"
            self.note = (f"the server asked to wait {wait:g} s, beyond {limit}" if asked
                         else f"retry time {limit} spent")
            return False
        return True


# -- describing faults in one line, without secrets ------------------------------------------------------

def describe(exc, url, settings):
    """(kind, line) of a fault worth another try: its kind as an error's (errors.KINDS:
    unavailable, a reply the server could not finish; timeout; unreachable), and what
    happened in one line."""
    if isinstance(exc, Transient):
        return "unavailable", str(exc)
    host = where(url)
    if isinstance(exc, ConnectTimeoutError):    # refused and unresolved too
        return "unreachable", f"cannot connect to {host}"
    if isinstance(exc, ReadTimeoutError):
        return "timeout", (f"no answer from {host} within AGENTCTL_HTTP_TIMEOUT="
                           f"{settings.timeout:g} s")
    if isinstance(exc, CutOff):
        return "unreachable", f"response from {host} cut off"
    if isinstance(exc, ProtocolError):
        return "unreachable", f"connection to {host} dropped"
    if isinstance(exc, transport.ProxyUnusable):
        return "unreachable", f"cannot reach {host} ({exc})"
    return "unreachable", f"cannot reach {host} ({type(exc).__name__})"


def status_kind(status):
    """The kind (errors.KINDS) of a status worth another try, or of a refusal for good."""
    if status == 429:
        return "throttled"
    if status == 408:
        return "timeout"
    if status in (401, 403):
        return "auth"
    return "unavailable" if status in RETRY_STATUSES else "rejected"


def api_error(response):
    """(line, text): the API's own explanation of a refusal, its error.message or else the
    body's first line, made fit for a message (said), and the body's text as it came.

    At most ERROR_BYTES of the body are read: an error page has no more to say.
    """
    data = b""
    try:
        for chunk in body_chunks(response):
            data += chunk
            if len(data) >= ERROR_BYTES:
                break
    except (HTTPError, CutOff):
        pass                # what came before the fault is all there is to quote
    text = data[:ERROR_BYTES].decode("utf-8", "replace")
    try:
        body = jsonin.loads(text, what="error body")
        message = body.get("error", body) if isinstance(body, dict) else body
        message = message.get("message") if isinstance(message, dict) else message
    except jsonin.JSONError:
        message = text
    line = said(message if isinstance(message, str) and message.strip() else response.reason)
    return line, text


def plural(count):
    return f"{count} try" if count == 1 else f"{count} tries"


# -- the call --------------------------------------------------------------------------------------------

def post(provider, url, headers, body, read, hint=lambda status, text: "", gate=None,
         method="POST", settings=None, flex=False):
    """POST `body` as JSON (bytes: as they are; None: no body, as `method` GET sends) and
    return read(response); raise TempFail or ModelError on faults. `settings`: the retries
    and timeouts (Settings(): the environment's).

    hint(status, body text) gives what a refusal's message should end with: " (set VARIABLE)".

    read() parses the body and raises Transient for a fault worth retrying. When it streams text
    out (on_text), a retry streams the text again from the start.

    `gate` (models.base.Gate), when given, is asked before each try and told after it, once the
    response is read: it shares what the endpoint said with the other runs. A refusal it takes
    the wait of (a 429's Retry-After, which every run now waits for) is not slept on here:
    the next try's acquire() waits for it. With `flex`, a 429 is FlexBusy at once.
    """
    settings = settings or Settings()
    budget = Budget(settings)
    data = body if body is None or isinstance(body, bytes) else \
        json.dumps(body, allow_nan=False).encode()
    while True:
        budget.tries += 1
        asked = None        # the wait a Retry-After asked for
        words = ""          # what the server said of a retryable status, for the last one
        status = None       # the HTTP status that asked for another try
        own = budget.backoff()
        said_limits, shared = None, False
        if gate is not None:
            gate.acquire()
        try:
            try:
                response = transport.open_post(url, data, headers, settings.timeouts,
                                               method)
            except SSLError as exc:
                raise ModelError(f"model API error: {provider}: TLS failure with "
                                 f"{where(url)}") from exc
            except (HTTPError, OSError, transport.ProxyUnusable) as exc:
                kind, fault = describe(exc, url, settings)
            else:
                try:
                    code = response.status
                    said_limits = limits.read(code, response.headers)
                    if code == 429 and flex:
                        said_limits = None      # the tier's capacity, not the endpoint's
                        raise FlexBusy(api_error(response)[0] or "no capacity")
                    if code in RETRY_STATUSES:
                        # 0 or a date gone by: our own backoff (a server can't make us spin)
                        fault, asked = f"HTTP {code}", said_limits.retry_after or None
                        status, kind, words = code, status_kind(code), api_error(response)[0]
                    elif not 200 <= code < 300:
                        message, text = api_error(response)
                        raise ModelError(f"model API error: {provider}: HTTP {code}: "
                                         f"{message or 'no explanation given'}"
                                         f"{hint(code, text)}", kind=status_kind(code))
                    else:
                        try:
                            return read(response)
                        except (Transient, CutOff, HTTPError) as exc:
                            kind, fault = describe(exc, url, settings)
                        except Unusable as exc:     # too deep, too large, an error event
                            raise ModelError(f"model API error: {provider}: "
                                             f"{redact(str(exc))}") from None
                finally:
                    transport.done(response)
        finally:
            if gate is not None:
                shared = gate.release(said_limits, own)
        wait = own if asked is None else asked
        words = f": {words}" if words else ""
        if not budget.allows(wait, asked=asked is not None):
            note = f" ({budget.note})" if budget.note else ""
            raise TempFail(f"model API unavailable: {provider}: {redact(fault)} after "
                           f"{plural(budget.tries)}{note}{words}", kind=kind)
        if gate is not None:
            gate.retrying(budget.tries, settings.tries, status, redact(fault + words), wait)
        if not shared:
            time.sleep(wait)


# -- server-sent events ------------------------------------------------------------------------------------

def iter_sse(chunks):
    """Yield (event, data) for each server-sent event in an iterable of byte chunks.

    Lines may be split anywhere between chunks, \\r\\n included. An event is dispatched at its blank
    line; one cut off before it is dropped, as the SSE specification says.
    """
    event, data, pending = "", [], bytearray()
    for chunk in chunks:
        pending += chunk
        if b"\n" not in chunk:     # a line still coming: splitting all of it again would make
            continue                # a long line cost the square of its length
        *lines, rest = pending.split(b"\n")
        pending = bytearray(rest)
        for raw in lines:
            line = raw.rstrip(b"\r").decode("utf-8", "replace")
            if not line:
                if data:
                    yield event or "message", "\n".join(data)
                event, data = "", []
                continue
            if line.startswith(":"):        # a comment, as used for keep-alives
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)


def body_chunks(response):
    """A response's body in the chunks it comes in (a gzip or deflate undone); CutOff when
    the connection broke before its end. Each chunk as the server sends it, when chunked,
    so that text reaches on_text at once."""
    try:
        yield from response.stream(None, decode_content=True)
    except ProtocolError as exc:
        raise CutOff(str(exc)) from exc


def bounded(chunks, limit):
    """The chunks of a response body, refused (Unusable) once they add up to more than `limit`."""
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise Unusable(f"response: larger than {jsonin.describe_bytes(limit)}")
        yield chunk


def read_reply(response, on_text, parse_plain, parse_stream):
    """The Reply in a plain JSON body or in an SSE stream, whichever the server sent.

    A server that ignores "stream": true answers in one piece; its text goes to on_text at once.
    Either is read to jsonin.MAX_BYTES at most (counted after any gzip is undone).
    """
    chunks = bounded(body_chunks(response), jsonin.MAX_BYTES)
    content_type = response.headers.get("Content-Type", "")
    if on_text is None or content_type.startswith("application/json"):
        reply = parse_plain(load_json(b"".join(chunks)))
        if on_text and reply.text:
            on_text(reply.text)
        return reply
    return parse_stream(iter_sse(chunks))
