"""HTTPModel: what the API providers share, the provider modules filling in what differs.

A provider's row (modelspec.PROVIDERS) names its base URL's variable and default and its key's
variable; its class names the path and gives four pieces: the request headers, the request body,
the parser of a plain JSON reply and the parser of an event stream. The rest, reading and checking
the environment, the retries and the error text, is here and in http.py; the connections are
transport.py's.

Kept free of urllib3: naming an API model (get_model) must stay cheap; http.py, which needs it,
is imported when a call is made.
"""

import re

from ..modelspec import BY_NAME
from .. import endpoint as where
from .base import Model, Value

# What the APIs (OpenAI, Anthropic, vLLM, llama.cpp's server) say of a conversation too long for
# the model, in a 400's message or error code. A pattern as text: re compiles it at its first use.
CONTEXT_TOO_LONG = (r"(?i)context.length|maximum context|too long|exceeds the (available )?"
                    r"context|context size")
CONTEXT_HINT = "a smaller context window may help: agent-fork -w TOKENS or AGENTCTL_CONTEXT_WINDOW"


class Endpoint(Value):
    """What one call reads from the environment, checked: read again at every call, never kept."""
    __slots__ = ("url", "key", "options")

    def __init__(self, url, key, options=None):
        self.url = url              # the base URL, without a trailing slash
        self.key = key              # "" for a loopback server without one
        self.options = {} if options is None else options   # the provider's own settings


class HTTPModel(Model):
    provider = ""           # "openai": the row of a model made without one (get_model gives it)
    path = ""               # appended to the base URL: "/chat/completions"

    def __init__(self, model, provider=None):
        self.model = model
        # The row get_model found: another provider may speak this class's API.
        self.row = provider or BY_NAME[self.provider]
        self.provider = self.row.name       # the name before the colon, and in messages
        self.name = f"{self.provider}:{model}"

    # -- what a provider fills in ----------------------------------------------------------------

    def options(self, url):
        """The provider's own settings from the environment, checked (UsageError)."""
        return {}

    def headers(self, endpoint):
        """The request's headers beyond Content-Type: the key, the API version."""
        raise NotImplementedError

    def request_body(self, messages, tools, stream, endpoint, cache=None):
        """The request, with the cache hints (base.Cache) the provider takes."""
        raise NotImplementedError

    def parse_plain(self, body, messages):
        """The Reply in a parsed JSON body; Transient when the body is not what it should be."""
        raise NotImplementedError

    def parse_stream(self, events, messages, on_text):
        """The Reply in an iterable of (event, data) server-sent events, text given to on_text."""
        raise NotImplementedError

    # -- the rest ----------------------------------------------------------------------------------

    def hint(self, status, text, endpoint):
        """What the message of a refusal (HTTP `status`, body `text`) should end with."""
        if status == 401 and not endpoint.key:
            return f" (set {self.row.key})"
        if status == 400 and re.search(CONTEXT_TOO_LONG, text):
            return f" ({CONTEXT_HINT})"
        return ""

    def check(self):
        self.endpoint()

    def endpoint(self):
        url = where.base_url(self.row.url_variable, self.row.url)
        return Endpoint(url, where.api_key(self.row.key, url, self.name), self.options(url))

    def identity(self):
        """The endpoint its calls go to, as the database names it (agentctl.endpoint.Identity),
        read from the environment as a call reads it; UsageError as check() raises."""
        url = where.base_url(self.row.url_variable, self.row.url)
        return where.Identity(self.provider, url, where.api_key(self.row.key, url, self.name))

    def complete(self, messages, tools, on_text=None, cache=None, flex=False):
        """(base.Model.complete) With `flex`, the call asks OpenAI's flex tier
        (models.openai), waits longer, and a 429 is http.FlexBusy."""
        from . import http  # (start-up: 55 ms of urllib3, only for a call)
        endpoint = self.endpoint()
        headers = {"Content-Type": "application/json", **self.headers(endpoint)}
        body = self.request_body(messages, tools, on_text is not None, endpoint, cache)
        if flex:
            body["service_tier"] = "flex"

        def read(response):
            return http.read_reply(response, on_text,
                                   lambda obj: self.parse_plain(obj, messages),
                                   lambda events: self.parse_stream(events, messages, on_text))

        reply = http.post(self.provider, endpoint.url + self.path, headers, body, read,
                          lambda status, text: self.hint(status, text, endpoint), gate=self.gate,
                          settings=http.Settings(flex), flex=flex)
        reply.api_url = endpoint.url
        return reply
