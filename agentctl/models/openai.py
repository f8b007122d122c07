"""openai:MODEL — the Chat Completions API, spoken by OpenAI and by most local servers
(vLLM, llama.cpp's llama-server, Ollama, LM Studio) at OPENAI_BASE_URL.
"""

import json
import random
import secrets
import time
from urllib.parse import urlsplit

from .. import env
from .api import HTTPModel
from .base import (ModelError, Reply, ToolCall, Transient, index, is_count, load_json,
                   make_usage, mapping, mappings, said, stop_reason, string, with_tool_ids)

OPENAI_HOST = "api.openai.com"     # OpenAI's own API (its default URL: agentctl.modelspec)
# What a request message may carry; anything else the caller keeps for itself stays home.
MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
STOP_REASONS = {"function_call": "tool_calls"}   # the legacy name for the same thing
FLEX_WAIT = 600.0       # seconds a flex call waits for the tier's capacity, at most
FLEX_FIRST = 5.0        # its first wait, in $AGENTCTL_RETRY_BACKOFF's units (1 s)
TIERS = ("flex", "batch")   # a response's service_tier priced as such (ops.prices)


class OpenAIModel(HTTPModel):
    provider = "openai"
    path = "/chat/completions"

    def options(self, url):
        limit = env.number("AGENTCTL_MAX_TOKENS", None, minimum=1, whole=True)
        # Unset, nothing is sent: the server's own limit holds.
        return {"token_limit": {max_tokens_field(url): limit} if limit else {},
                "cache_key": urlsplit(url).hostname == OPENAI_HOST}

    def headers(self, endpoint):
        return {"Authorization": f"Bearer {endpoint.key}"} if endpoint.key else {}

    def request_body(self, messages, tools, stream, endpoint, cache=None):
        body = {**request_body(self.model, messages, tools, stream),
                **endpoint.options["token_limit"]}
        # OpenAI caches prefixes by itself and routes by this key, so that a family's
        # requests meet the cache their prefix is in. Other servers are sent nothing:
        # llama.cpp's server reuses its slot's cache by itself (cache_prompt is on by
        # default), and a strict server refuses a key it does not know.
        if cache is not None and cache.key and endpoint.options["cache_key"]:
            body["prompt_cache_key"] = cache.key
        return {**body, **options_body(self.model_options, endpoint.url, self.schema)}

    def complete(self, messages, tools, on_text=None, cache=None, flex=False):
        """A call at the agent's tier: flex asks OpenAI's flex tier, and while it has
        no capacity (its 429) tries again, 5 s apart ($AGENTCTL_RETRY_BACKOFF times 5)
        and doubling up to a minute, until
        $AGENTCTL_FLEX_WAIT (10m) has passed: then, or when the server refuses the
        tier (a 400 that names service_tier: a model without flex), at the standard
        tier. The watchers are told of each wait (models.base.Gate.retrying)."""
        if self.tier != "flex":
            return super().complete(messages, tools, on_text, cache)
        from . import http  # (start-up: 55 ms of urllib3, only for a call)
        deadline = time.monotonic() + env.duration("AGENTCTL_FLEX_WAIT", FLEX_WAIT)
        tries = 0
        while True:
            try:
                return super().complete(messages, tools, on_text, cache, flex=True)
            except http.FlexBusy as e:
                tries += 1
                wait = min(60.0, FLEX_FIRST * env.number("AGENTCTL_RETRY_BACKOFF", 1.0)
                           * 2 ** (tries - 1)) * random.uniform(0.75, 1.0)
                if time.monotonic() + wait > deadline:
                    break
                if self.gate is not None:
                    self.gate.retrying(tries, tries + 1, 429, f"flex tier busy: {e}", wait)
                time.sleep(wait)
            except ModelError as e:
                if "service_tier" not in str(e):
                    raise
                break
        return super().complete(messages, tools, on_text, cache)

    def parse_plain(self, body, messages):
        return parse_completion(body, messages)

    def parse_stream(self, events, messages, on_text):
        return read_stream(events, messages, on_text)


def options_body(options, url, schema=None):
    """The agent's model options and schema in Chat Completions' form: max_tokens under
    the name the server reads, a schema as response_format json_schema."""
    body = {}
    for name, value in options.items():
        if name == "max_tokens":
            body[max_tokens_field(url)] = value
        else:       # temperature, top_p, seed, stop ...: Chat Completions' own names
            body[name] = value
    if schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "result", "schema": schema}}
    return body


def max_tokens_field(url):
    """The name a server reads a reply's token limit under. OpenAI's own API has renamed it, and
    refuses the old name for its reasoning models; the compatible servers (llama.cpp's, vLLM,
    Ollama, LM Studio) read the old one."""
    return "max_completion_tokens" if urlsplit(url).hostname == OPENAI_HOST else "max_tokens"


def request_body(model, messages, tools, stream):
    # Ids are sent as they are (OpenAI takes one repeated in a later turn), but for none at all.
    messages = with_tool_ids(messages, keeps=lambda call_id, used: bool(call_id))
    body = {"model": model, "messages": [clean_message(m) for m in messages]}
    if tools:       # some compatible servers reject an empty list
        body["tools"] = tools
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def clean_message(message):
    return {k: message[k] for k in MESSAGE_KEYS if k in message}


def content_text(content):
    """A message's text: a string, or (from a few compatible servers) a list of parts."""
    if isinstance(content, list):
        return "".join(string(p.get("text")) for p in mappings(content) if p.get("type") == "text")
    return string(content)


def arguments_text(arguments):
    # The standard says a string; a few compatible servers send the object itself.
    if isinstance(arguments, str):
        return arguments
    return "" if arguments is None else json.dumps(arguments, ensure_ascii=False)


def fresh_call_id():
    # For servers that omit ids: the caller needs one to answer the call, unique in the history.
    return "call_" + secrets.token_hex(12)


def usage_counts(usage, timings=None):
    """(prompt, completion, cached) tokens: cached as OpenAI reports it
    (prompt_tokens_details.cached_tokens), else as llama.cpp's server does, in the
    timings it adds (cache_n: the prompt tokens its slot's cache held; prompt_n: those
    it evaluated)."""
    usage, timings = mapping(usage), mapping(timings)
    prompt = usage.get("prompt_tokens")
    cached = mapping(usage.get("prompt_tokens_details")).get("cached_tokens")
    if cached is None and is_count(timings.get("cache_n")):
        cached = timings["cache_n"]
    elif cached is None and is_count(timings.get("prompt_n")) and is_count(prompt):
        cached = max(prompt - timings["prompt_n"], 0)
    return prompt, usage.get("completion_tokens"), cached


def parse_completion(body, messages):
    """The Reply in a plain (non-streamed) chat.completion object."""
    choices = mapping(body).get("choices")
    choice = mapping(choices[0] if isinstance(choices, list) and choices else None)
    message = choice.get("message")
    if not isinstance(message, dict):
        raise Transient("malformed response (no choices[0].message)")
    text = content_text(message.get("content"))
    calls = []
    for call in mappings(message.get("tool_calls")):
        function = mapping(call.get("function"))
        calls.append(ToolCall(string(call.get("id")) or fresh_call_id(),
                              string(function.get("name")),
                              arguments_text(function.get("arguments"))))
    usage = make_usage(messages, text, calls, *usage_counts(body.get("usage"), body.get("timings")))
    _tier(usage, body.get("service_tier"))
    return Reply(text, calls, usage, stop_reason(choice.get("finish_reason"), calls, STOP_REASONS),
                 response_id=string(body.get("id")), response_model=string(body.get("model")))


def _tier(usage, said_tier):
    """The tier the response says it was served at, for its price: a call that asked
    flex and was served at the standard tier is priced as standard."""
    if said_tier in TIERS:
        usage["tier"] = said_tier


class StreamState:
    """Accumulates chat.completion.chunk objects into a Reply."""

    def __init__(self, on_text):
        self.on_text = on_text
        self.text = []
        self.calls = {}         # index -> {"id", "name", "arguments"}
        self.usage = None
        self.timings = None
        self.finish = None
        self.done = False
        self.named = {"id": "", "model": "", "service_tier": ""}   # as its chunks give them

    def feed(self, chunk):
        if not isinstance(chunk, dict):
            raise Transient("malformed stream (a chunk is not an object)")
        if chunk.get("error"):
            # Errors inside a 200 stream come from the server's side of the generation.
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise Transient(f"error in stream: {said(message) or 'no message'}")
        for key, given in self.named.items():
            if not given:
                self.named[key] = string(chunk.get(key))
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):     # llama.cpp's server, in its last chunk
            self.timings = chunk["timings"]
        for choice in mappings(chunk.get("choices")):
            if index(choice.get("index"), 0) == 0:
                self._feed_choice(choice)

    def _feed_choice(self, choice):
        delta = mapping(choice.get("delta"))
        text = content_text(delta.get("content"))
        if text:
            self.text.append(text)
            self.on_text(text)
        for position, piece in enumerate(mappings(delta.get("tool_calls"))):
            self._feed_call(piece, position)
        if string(choice.get("finish_reason")):
            self.finish = choice["finish_reason"]

    def _feed_call(self, piece, position):
        call = self.calls.setdefault(index(piece.get("index"), position),
                                     {"id": "", "name": "", "arguments": ""})
        if string(piece.get("id")):
            call["id"] = piece["id"]
        function = mapping(piece.get("function"))
        name = string(function.get("name"))
        # The name normally comes whole in the first piece; some servers repeat it in every one.
        if name and name != call["name"]:
            call["name"] += name
        call["arguments"] += arguments_text(function.get("arguments"))

    def reply(self, messages):
        text = "".join(self.text)
        calls = [ToolCall(c["id"] or fresh_call_id(), c["name"], c["arguments"])
                 for _, c in sorted(self.calls.items())]
        usage = make_usage(messages, text, calls, *usage_counts(self.usage, self.timings))
        _tier(usage, self.named["service_tier"])
        return Reply(text, calls, usage, stop_reason(self.finish, calls, STOP_REASONS),
                     response_id=self.named["id"], response_model=self.named["model"])


def read_stream(events, messages, on_text):
    state = StreamState(on_text)
    for _event, data in events:
        if data.strip() == "[DONE]":
            state.done = True
        elif not state.done:    # read on to the end, so the connection can be reused
            state.feed(load_json(data))
    # [DONE] is the end mark, but a stream that ends cleanly after its finish_reason has lost
    # nothing, and a lenient reader copes with compatible servers that skip the mark.
    # Anything less is a cut stream, to be retried.
    if not (state.done or state.finish):
        raise Transient("stream cut off before [DONE]")
    return state.reply(messages)
