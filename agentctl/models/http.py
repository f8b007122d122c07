"""The HTTP side shared by the API providers: settings, bounded retries, error text, SSE parsing.

One retry policy covers two layers. urllib3's Retry (inside requests) retries what happens before a
response arrives: refused connections, timeouts waiting for headers, and retryable statuses, honouring
Retry-After. Our own loop retries what happens after: a stream cut midway, a body that isn't JSON, a
read timeout in the middle of a body, an overload notice inside a stream. Both draw on one Budget, so
the tries and the time spent are counted once whichever layer retried.
"""

import ipaddress
import os
import random
import threading
import time
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import (
    ConnectTimeoutError, MaxRetryError, ProtocolError, ReadTimeoutError, ResponseError,
)
from urllib3.util.retry import Retry

from ..errors import TempFail, UsageError
from .base import ModelError, Transient, load_json

# The official SDKs retry 408 and 409 too; 529 is Anthropic's "overloaded". Any other non-2xx status
# is taken as the API's final word.
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
CONNECT_TIMEOUT = 10.0


# -- settings, read from the environment at each call and never kept --------------------------------

def env_number(name, default, minimum=0.0, kind=float):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or value != value or value < minimum:     # value != value: NaN
        what = "a whole number" if kind is int else "a number"
        raise UsageError(f"{name} must be {what} >= {minimum:g}, not {raw!r}")
    return value


class Settings:
    def __init__(self):
        self.tries = env_number("AGENTCTL_RETRY_TRIES", 4, minimum=1, kind=int)
        self.seconds = env_number("AGENTCTL_RETRY_SECONDS", 60.0)
        self.backoff = env_number("AGENTCTL_RETRY_BACKOFF", 1.0)
        self.timeout = env_number("AGENTCTL_HTTP_TIMEOUT", 120.0, minimum=0.001)

    @property
    def timeouts(self):
        return (min(CONNECT_TIMEOUT, self.timeout), self.timeout)


def base_url(variable, default):
    """The API's base URL from `variable`, checked, without a trailing slash."""
    url = os.environ.get(variable, "").strip() or default
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        # The value itself is not shown: a URL may carry credentials.
        raise UsageError(f"{variable} must be an http:// or https:// URL")
    return url.rstrip("/")


def is_loopback(url):
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_key(variable, url, spec):
    """The key from `variable`; a local server (llama-server, Ollama) may need none."""
    key = os.environ.get(variable, "").strip()
    if not key and not is_loopback(url):
        raise UsageError(f"{variable} is not set (needed by model {spec})")
    return key


def where(url):
    """host:port of url, for messages: never the userinfo, path or query, which may hold secrets."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname


# -- the retry budget ---------------------------------------------------------------------------------

class Budget:
    """The tries and the time one complete() call may spend, shared by urllib3's retries and ours."""

    def __init__(self, settings):
        self.settings = settings
        self.deadline = time.monotonic() + settings.seconds
        self.tries = 0
        self.note = ""      # why the last retry was refused, when the cause was time

    def backoff(self, retries_done, jitter=True):
        # Exponential, with jitter so that parallel agent-run processes don't retry in lockstep.
        wait = self.settings.backoff * 2 ** max(0, retries_done - 1)
        return wait * random.uniform(0.75, 1.0) if jitter else wait

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

    def retry(self):
        """The urllib3 Retry for the next request: what is left of the tries, bound to this budget."""
        left = self.settings.tries - self.tries
        return BudgetRetry(
            total=left, connect=left, read=left, status=left,
            status_forcelist=RETRY_STATUSES, allowed_methods=None,   # None: POST is retried too
            respect_retry_after_header=True, backoff_factor=self.settings.backoff,
            raise_on_status=False, raise_on_redirect=False, redirect=False, budget=self,
        )


class BudgetRetry(Retry):
    """urllib3's Retry, made to stop when the budget's time would run out, and to count its tries."""

    def __init__(self, *args, budget=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.budget = budget

    def new(self, **kwargs):
        kwargs.setdefault("budget", self.budget)
        return super().new(**kwargs)

    def get_backoff_time(self):
        return self.budget.backoff(len(self.history))

    def sleep_for_retry(self, response):
        # urllib3's own would raise on an unparsable Retry-After and end the retries there.
        wait = retry_after(self, response)
        if wait:
            time.sleep(wait)
        return bool(wait)

    def increment(self, method=None, url=None, response=None, error=None, _pool=None,
                  _stacktrace=None):
        retry = super().increment(method, url, response, error, _pool, _stacktrace)
        asked = retry_after(retry, response)
        # urllib3 draws its own jittered wait after this: check against the longest it can be.
        wait = asked or self.budget.backoff(len(retry.history), jitter=False)
        if not self.budget.allows(wait, asked=bool(asked)):
            # A MaxRetryError makes urllib3 hand back the last response (raise_on_status=False),
            # or raise the last error: either way the caller sees why we stopped.
            reason = error or ResponseError(f"HTTP {getattr(response, 'status', '?')}")
            raise MaxRetryError(_pool, url, reason)
        self.budget.tries += 1
        return retry


def retry_after(retry, response):
    if response is None:
        return None
    try:
        return Retry.get_retry_after(retry, response)
    except Exception:       # an unparsable Retry-After: fall back to our own backoff
        return None


# -- describing faults in one line, without secrets ------------------------------------------------------

def root_cause(exc):
    reason = exc.args[0] if getattr(exc, "args", None) else None
    if isinstance(reason, MaxRetryError):
        return reason.reason
    return reason if isinstance(reason, BaseException) else exc


def describe(exc, url, settings):
    if isinstance(exc, Transient):
        return str(exc)
    cause = root_cause(exc)
    host = where(url)
    if isinstance(exc, requests.ConnectTimeout) or isinstance(cause, ConnectTimeoutError):
        return f"cannot connect to {host}"
    if isinstance(exc, requests.ReadTimeout) or isinstance(cause, ReadTimeoutError):
        return f"no answer from {host} within AGENTCTL_HTTP_TIMEOUT={settings.timeout:g} s"
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return f"response from {host} cut off"
    if isinstance(cause, ProtocolError):
        return f"connection to {host} dropped"
    return f"cannot reach {host} ({type(cause).__name__})"


def redact(text, secret):
    return text.replace(secret, "***") if secret else text


def api_error_message(response, secret):
    """The API's own explanation of a refusal: first line, at most 200 characters."""
    try:
        body = response.json()
        message = body.get("error", body)
        message = message.get("message") if isinstance(message, dict) else message
    except Exception:
        try:
            message = response.text
        except Exception:
            message = ""
    lines = redact(str(message or response.reason or ""), secret).strip().splitlines()
    line = lines[0] if lines else "no explanation given"
    return line if len(line) <= 200 else line[:199] + "…"


def plural(count):
    return f"{count} try" if count == 1 else f"{count} tries"


# -- the client ------------------------------------------------------------------------------------------

class Client:
    """POSTs to one provider's API, retrying transient faults within a Budget.

    Keeps one session per thread: a turn makes several calls, and keep-alive spares a TLS handshake
    each time, but requests.Session isn't meant to be shared between threads (agent-run -j).
    """

    def __init__(self, provider):
        self.provider = provider
        self._local = threading.local()

    def _session(self):
        if not hasattr(self._local, "session"):
            session, adapter = requests.Session(), HTTPAdapter()
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            self._local.session, self._local.adapter = session, adapter
        return self._local.session, self._local.adapter

    def post(self, url, headers, body, read, secret=""):
        """POST `body` as JSON and return read(response); raise TempFail or ModelError on faults.

        read() parses the body and raises Transient for a fault worth retrying. When it streams
        text out (on_text), a retry streams the text again from the start.
        """
        settings = Settings()
        budget = Budget(settings)
        session, adapter = self._session()
        while True:
            budget.tries += 1
            adapter.max_retries = budget.retry()    # per thread, so no other call sees it
            try:
                response = session.post(url, json=body, headers=headers, stream=True,
                                        timeout=settings.timeouts, allow_redirects=False)
            except requests.exceptions.SSLError as exc:
                raise ModelError(f"model API error: {self.provider}: TLS failure with "
                                 f"{where(url)}") from exc
            except requests.RequestException as exc:
                raise self._give_up(describe(exc, url, settings), budget) from exc
            with response:
                self._check_status(response, budget, secret)
                try:
                    return read(response)
                except (Transient, requests.RequestException) as exc:
                    fault = redact(describe(exc, url, settings), secret)
                except ModelError as exc:   # an error event in a stream quotes the server
                    raise ModelError(redact(str(exc), secret)) from None
            wait = budget.backoff(budget.tries)
            if not budget.allows(wait):
                raise self._give_up(fault, budget)
            time.sleep(wait)

    def _check_status(self, response, budget, secret):
        status = response.status_code
        if 200 <= status < 300:
            return
        if status in RETRY_STATUSES:        # urllib3 has already retried it as far as allowed
            raise self._give_up(f"HTTP {status}", budget)
        message = api_error_message(response, secret)
        raise ModelError(f"model API error: {self.provider}: HTTP {status}: {message}")

    def _give_up(self, fault, budget):
        note = f" ({budget.note})" if budget.note else ""
        return TempFail(f"model API unavailable: {self.provider}: {fault} after "
                        f"{plural(budget.tries)}{note}")


# -- server-sent events ------------------------------------------------------------------------------------

def iter_sse(chunks):
    """Yield (event, data) for each server-sent event in an iterable of byte chunks.

    Lines may be split anywhere between chunks, \\r\\n included. An event is dispatched at its blank
    line; one cut off before it is dropped, as the SSE specification says.
    """
    event, data, pending = "", [], b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
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


def read_reply(response, on_text, parse_plain, parse_stream):
    """The Reply in a plain JSON body or in an SSE stream, whichever the server sent.

    A server that ignores "stream": true answers in one piece; its text goes to on_text at once.
    """
    content_type = response.headers.get("Content-Type", "")
    if on_text is None or content_type.startswith("application/json"):
        reply = parse_plain(load_json(response.content))
        if on_text and reply.text:
            on_text(reply.text)
        return reply
    # chunk_size=None yields each chunk as the server sends it, so text reaches on_text at once.
    return parse_stream(iter_sse(response.iter_content(chunk_size=None)))
