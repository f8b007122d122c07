"""anthropic:MODEL — the Messages API at ANTHROPIC_BASE_URL.

The conversation arrives in OpenAI form and is converted here: system messages become the top-level
system string, tool calls become tool_use blocks, tool results become tool_result blocks in a user
message, and neighbouring messages of one role are merged, since the API wants roles to alternate.
"""

import json
import os
import re

from .. import env, jsonin
from ..ids import TOOL_NAME, TOOL_NAME_CHARACTERS, TOOL_NAME_LONGEST, is_tool_name
from ..errors import AgentctlError, UsageError
from .api import HTTPModel
from .base import (Reply, ToolCall, Transient, Unusable, index, is_count, load_json,
                   make_usage, mapping, mappings, said, stop_reason, string, with_tool_ids)

API_VERSION = "2023-06-01"
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
                "max_tokens": "length", "refusal": "content_filter"}
# What the API takes as a tool_use id: here, what it takes as a tool name (its own rule
# for an id is the same characters, of any length).
ID = TOOL_NAME
UNSAFE = re.compile(f"[^{TOOL_NAME_CHARACTERS}]")
# Error types that a stream may report after a 200 and that are worth another try.
TRANSIENT_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
# Prompt caching: at most 4 breakpoints a request; $AGENTCTL_CACHE_TTL, how long what
# they write lives (a write costs 1.25 times the input price for 5 minutes, twice for an
# hour; a read a tenth), or off; and the shortest prefix each model caches, in tokens
# (a shorter one is not cached, silently), by the start of its name.
CACHE_TTLS = ("5m", "1h", "off")
MAX_BREAKPOINTS = 4
MINIMUM_CACHED = (("claude-opus-4-5", 4096), ("claude-opus-4-6", 4096),
                  ("claude-haiku-4-5", 4096), ("claude-3-5-haiku", 2048),
                  ("claude-3-haiku", 2048), ("claude-haiku-3", 2048))
DEFAULT_MINIMUM_CACHED = 1024
CHARS_PER_TOKEN = 3     # fewer than the usual 4: a prefix surely below the minimum


class AnthropicModel(HTTPModel):
    provider = "anthropic"
    path = "/v1/messages"

    def options(self, url):
        ttl = os.environ.get("AGENTCTL_CACHE_TTL", "").strip() or "5m"
        if ttl not in CACHE_TTLS:
            raise UsageError(f"AGENTCTL_CACHE_TTL must be 5m, 1h or off, not {env.shown(ttl)}")
        return {"max_tokens": env.number("AGENTCTL_MAX_TOKENS", 4096, minimum=1, whole=True),
                "cache_ttl": ttl}

    def headers(self, endpoint):
        headers = {"anthropic-version": API_VERSION}
        if endpoint.key:
            headers["x-api-key"] = endpoint.key
        return headers

    def request_body(self, messages, tools, stream, endpoint, cache=None):
        body = request_body(self.model, messages, tools,
                            self.model_options.get("max_tokens", endpoint.options["max_tokens"]),
                            stream, cache, endpoint.options["cache_ttl"])
        return {**body, **options_body(self.model_options, self.schema)}

    def parse_plain(self, body, messages):
        return parse_message(body, messages)

    def parse_stream(self, events, messages, on_text):
        return read_stream(events, messages, on_text)


# -- the request ---------------------------------------------------------------------------------

def request_body(model, messages, tools, max_tokens, stream, cache=None, ttl="5m"):
    hinted = cache is not None and ttl != "off"
    system, turns, marked = _convert(messages, cache.marks if hinted else ())
    body = {"model": model, "max_tokens": max_tokens, "messages": turns}
    if system:
        body["system"] = [{"type": "text", "text": system}] if hinted else system
    if tools:
        body["tools"] = [convert_tool(t) for t in tools]
    if stream:
        body["stream"] = True
    if hinted:
        place_breakpoints(body, marked, model, ttl)
    return body


def options_body(options, schema=None):
    """The agent's model options (but max_tokens, which every request has) and schema in
    the Messages API's form: stop as stop_sequences, effort and the schema (structured
    outputs) in output_config."""
    body, config = {}, {}
    if "stop" in options:
        body["stop_sequences"] = [options["stop"]]
    if "effort" in options:
        config["effort"] = options["effort"]
    if schema is not None:
        config["format"] = {"type": "json_schema", "schema": schema}
    if config:
        body["output_config"] = config
    return body
def minimum_cached(model):
    for start, tokens in MINIMUM_CACHED:
        if model.startswith(start):
            return tokens
    return DEFAULT_MINIMUM_CACHED


def place_breakpoints(body, marked, model, ttl):
    """cache_control on the blocks that end a stable prefix, in the prompt's order (tools,
    system, messages): the system prompt's (else the last tool's: the tools come first),
    then each of `marked`. A prefix surely shorter than the model's minimum gets none
    (it would not be cached); beyond 4, the first and the last 3 are kept."""
    stable = body["system"][-1:] if body.get("system") else body.get("tools", [])[-1:]
    chars, total = {}, 0
    blocks = body.get("tools", []) + body.get("system", []) + \
        [b for turn in body["messages"] for b in turn["content"]]
    for block in blocks:
        total += len(json.dumps(block, ensure_ascii=False))
        chars[id(block)] = total
    chosen, seen = [], set()
    for block in stable + sorted(marked, key=lambda b: chars[id(b)]):
        if id(block) not in seen and chars[id(block)] // CHARS_PER_TOKEN >= minimum_cached(model):
            seen.add(id(block))
            chosen.append(block)
    if len(chosen) > MAX_BREAKPOINTS:
        chosen = chosen[:1] + chosen[-(MAX_BREAKPOINTS - 1):]
    control = {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}
    for block in chosen:
        block["cache_control"] = dict(control)


def convert_tool(tool):
    function = tool.get("function", tool)
    return {"name": function["name"], "description": function.get("description") or "",
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}}}


def convert_messages(messages):
    """(system, messages) in Messages API form from OpenAI chat messages.

    What the API refuses is mended: text that is empty or only whitespace is left out (a message
    left with nothing is left out whole), and tool call ids are made unique in the conversation
    and of the characters the API takes (with_tool_ids: the same conversation, the same ids).
    """
    system, turns, _ = _convert(messages, ())
    return system, turns


def _convert(messages, marks):
    """convert_messages, and the blocks that end the messages at the indexes `marks` (the
    last block written when that message was read): where a cache breakpoint goes."""
    system, turns, marked = [], [], []
    wanted = set(marks)
    for index, message in enumerate(with_tool_ids(messages, keeps=lambda call_id, used: (
            re.fullmatch(ID, call_id) is not None and call_id not in used), stem=id_stem)):
        role = message.get("role")
        content = message.get("content") or ""
        if role in ("system", "developer"):
            if content.strip():
                system.append(content)
        else:
            role, blocks = convert_message(role, message, content)
            if blocks and turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)
            elif blocks:
                turns.append({"role": role, "content": blocks})
        if index in wanted and turns:
            marked.append(turns[-1]["content"][-1])
    for turn in turns:
        # tool_result blocks must open the user message that answers the tool_use blocks.
        turn["content"].sort(key=lambda block: block["type"] != "tool_result")
    return "\n\n".join(system), turns, marked


def id_stem(call_id):
    return UNSAFE.sub("_", call_id)[:40] or "call"


def convert_message(role, message, content):
    if isinstance(content, list):       # a user message of parts: text and images
        return "user", [_block(part) for part in content if _block(part)]
    text = [{"type": "text", "text": content}] if content.strip() else []
    if role == "user":
        return "user", text
    if role == "assistant":
        return "assistant", text + [tool_use_block(c) for c in message.get("tool_calls") or ()]
    if role == "tool":
        block = {"type": "tool_result", "tool_use_id": message.get("tool_call_id") or ""}
        if content.strip():
            block["content"] = content
        return "user", [block]
    raise AgentctlError(f"anthropic: message with unknown role {role!r}")


def _block(part):
    """A content part of the Chat Completions form as a Messages API block: text, or an
    image given as a data: URL (base64)."""
    if part.get("type") == "text" and part.get("text"):
        return {"type": "text", "text": part["text"]}
    url = (part.get("image_url") or {}).get("url") or ""
    head, _, data = url.partition(";base64,")
    if part.get("type") == "image_url" and head.startswith("data:") and data:
        return {"type": "image", "source": {"type": "base64", "media_type": head[5:],
                                            "data": data}}
    return None


def tool_use_block(call):
    function = call.get("function") or {}
    try:
        arguments = jsonin.loads(function.get("arguments") or "{}", what="tool call arguments")
    except jsonin.JSONError:
        arguments = None
    # The API wants an object; a call the model botched (the caller has answered it with an
    # error), or nested beyond jsonin's bounds, is replayed with empty input rather than
    # failing the whole request.
    if not isinstance(arguments, dict):
        arguments = {}
    # So is a name the API refuses (a model may call a tool that isn't, by any name).
    name = function.get("name") or ""
    if not is_tool_name(name):
        name = UNSAFE.sub("_", name)[:TOOL_NAME_LONGEST] or "unnamed"
    return {"type": "tool_use", "id": call.get("id") or "", "name": name, "input": arguments}


# -- the reply -----------------------------------------------------------------------------------

def usage_of(messages, text, calls, usage):
    """make_usage from the API's usage object. Its input_tokens are those after the last
    cache breakpoint: the prompt's are those plus what was read from the cache and written
    to it (cache_creation: the part written for an hour)."""
    read = usage.get("cache_read_input_tokens")
    written = usage.get("cache_creation_input_tokens")
    read, written = (v if is_count(v) else 0 for v in (read, written))
    fresh = usage.get("input_tokens")
    total = fresh + read + written if is_count(fresh) else None
    hour = mapping(usage.get("cache_creation")).get("ephemeral_1h_input_tokens")
    return make_usage(messages, text, calls, total, usage.get("output_tokens"), read, written,
                      hour)


def parse_message(body, messages):
    """The Reply in a plain (non-streamed) message object."""
    content = body.get("content") if isinstance(body, dict) else None
    if not isinstance(content, list):
        raise Transient("malformed response (no content list)")
    blocks = mappings(content)
    text = "".join(string(b.get("text")) for b in blocks if b.get("type") == "text")
    calls = [ToolCall(string(b.get("id")), string(b.get("name")),
                      json.dumps(b.get("input") or {}, ensure_ascii=False))
             for b in blocks if b.get("type") == "tool_use"]
    usage = usage_of(messages, text, calls, mapping(body.get("usage")))
    return Reply(text, calls, usage, stop_reason(body.get("stop_reason"), calls, STOP_REASONS),
                 response_id=string(body.get("id")), response_model=string(body.get("model")))


class StreamState:
    """Accumulates Messages API stream events into a Reply."""

    def __init__(self, on_text):
        self.on_text = on_text
        self.blocks = {}        # index -> content block, its tool_use input gathered as JSON text
        self.usage = {}
        self.stop = None
        self.done = False
        self.message = {}       # message_start's message: its id and model

    def feed(self, event):
        kind = event.get("type") if isinstance(event, dict) else None
        handler = getattr(self, f"_on_{kind}", None)
        if handler:             # unknown events are skipped: the API may add new ones
            handler(event)

    def _on_message_start(self, event):
        self.message = mapping(event.get("message"))
        self.usage.update(mapping(self.message.get("usage")))

    def _on_content_block_start(self, event):
        given = mapping(event.get("content_block"))
        block = new_block(string(given.get("type")), string(given.get("text")))
        block.update(id=string(given.get("id")), name=string(given.get("name")),
                     input=given.get("input"))
        self.blocks[index(event.get("index"), len(self.blocks))] = block
        if block["type"] == "text" and block["text"]:
            self.on_text(block["text"])

    def _on_content_block_delta(self, event):
        block = self.blocks.setdefault(index(event.get("index"), 0), new_block("text"))
        delta = mapping(event.get("delta"))
        text = string(delta.get("text"))
        if delta.get("type") == "text_delta" and text:
            block["text"] += text
            self.on_text(text)
        elif delta.get("type") == "input_json_delta":
            block["json"].append(string(delta.get("partial_json")))

    def _on_message_delta(self, event):
        self.stop = string(mapping(event.get("delta")).get("stop_reason")) or self.stop
        # Counts here are cumulative, so they replace those of message_start.
        self.usage.update(mapping(event.get("usage")))

    def _on_message_stop(self, event):
        self.done = True

    def _on_error(self, event):
        error = mapping(event.get("error"))
        kind = said(error.get("type") or "error", 60)
        line = f"{kind}: {said(error.get('message')) or 'no message'}"
        raise (Transient if kind in TRANSIENT_ERRORS else Unusable)(line)

    def reply(self, messages):
        blocks = [b for _, b in sorted(self.blocks.items())]
        text = "".join(b["text"] for b in blocks if b["type"] == "text")
        calls = [ToolCall(b["id"], b["name"], tool_arguments(b))
                 for b in blocks if b["type"] == "tool_use"]
        usage = usage_of(messages, text, calls, self.usage)
        return Reply(text, calls, usage, stop_reason(self.stop, calls, STOP_REASONS),
                     response_id=string(self.message.get("id")),
                     response_model=string(self.message.get("model")))


def new_block(kind, text=""):
    return {"type": kind, "text": text, "id": "", "name": "", "input": None, "json": []}


def tool_arguments(block):
    # A tool without parameters may get no input_json_delta at all: its input is the start's {}.
    text = "".join(block["json"])
    return text if text else json.dumps(block["input"] or {})


def read_stream(events, messages, on_text):
    state = StreamState(on_text)
    for _event, data in events:
        if not state.done:      # read on to the end, so the connection can be reused
            state.feed(load_json(data))
    # message_stop is the end mark; a clean end after message_delta's stop_reason lost nothing.
    if not (state.done or state.stop):
        raise Transient("stream cut off before message_stop")
    return state.reply(messages)
