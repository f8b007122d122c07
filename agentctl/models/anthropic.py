"""anthropic:MODEL — the Messages API at ANTHROPIC_BASE_URL.

The conversation arrives in OpenAI form and is converted here: system messages become the top-level
system string, tool calls become tool_use blocks, tool results become tool_result blocks in a user
message, and neighbouring messages of one role are merged, since the API wants roles to alternate.
"""

import json
import re

from .. import env, jsonin
from ..errors import AgentctlError
from .api import HTTPModel
from .base import (Reply, ToolCall, Transient, Unusable, index, is_count, load_json,
                   make_usage, mapping, mappings, said, stop_reason, string, with_tool_ids)

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
                "max_tokens": "length", "refusal": "content_filter"}
# What the API takes as a tool_use id (and, here, as a tool name in the conversation).
ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
# Error types that a stream may report after a 200 and that are worth another try.
TRANSIENT_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}


class AnthropicModel(HTTPModel):
    provider = "anthropic"
    url_variable, default_url = "ANTHROPIC_BASE_URL", DEFAULT_BASE_URL
    key_variable = "ANTHROPIC_API_KEY"
    path = "/v1/messages"

    def options(self, url):
        return {"max_tokens": env.number("AGENTCTL_MAX_TOKENS", 4096, minimum=1, whole=True)}

    def headers(self, endpoint):
        headers = {"anthropic-version": API_VERSION}
        if endpoint.key:
            headers["x-api-key"] = endpoint.key
        return headers

    def request_body(self, messages, tools, stream, endpoint):
        body = request_body(self.model, messages, tools,
                            self.model_options.get("max_tokens", endpoint.options["max_tokens"]), stream)
        return {**body, **options_body(self.model_options, self.schema)}

    def parse_plain(self, body, messages):
        return parse_message(body, messages)

    def parse_stream(self, events, messages, on_text):
        return read_stream(events, messages, on_text)


# -- the request ---------------------------------------------------------------------------------

def request_body(model, messages, tools, max_tokens, stream):
    system, turns = convert_messages(messages)
    body = {"model": model, "max_tokens": max_tokens, "messages": turns}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = [convert_tool(t) for t in tools]
    if stream:
        body["stream"] = True
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
    system, turns = [], []
    for message in with_tool_ids(messages, keeps=lambda call_id, used: (
            ID.fullmatch(call_id) is not None and call_id not in used), stem=id_stem):
        role = message.get("role")
        content = message.get("content") or ""
        if role in ("system", "developer"):
            if content.strip():
                system.append(content)
            continue
        role, blocks = convert_message(role, message, content)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        # tool_result blocks must open the user message that answers the tool_use blocks.
        turn["content"].sort(key=lambda block: block["type"] != "tool_result")
    return "\n\n".join(system), turns


def id_stem(call_id):
    return UNSAFE.sub("_", call_id)[:40] or "call"


def convert_message(role, message, content):
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
    if not ID.fullmatch(name):
        name = UNSAFE.sub("_", name)[:64] or "unnamed"
    return {"type": "tool_use", "id": call.get("id") or "", "name": name, "input": arguments}


# -- the reply -----------------------------------------------------------------------------------

def input_tokens(usage):
    # Cached prompt tokens are counted apart by the API; the model read them all the same.
    if not is_count(usage.get("input_tokens")):
        return None
    keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    return sum(usage[k] for k in keys if is_count(usage.get(k)))


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
    usage = mapping(body.get("usage"))
    usage = make_usage(messages, text, calls, input_tokens(usage), usage.get("output_tokens"))
    return Reply(text, calls, usage, stop_reason(body.get("stop_reason"), calls, STOP_REASONS))


class StreamState:
    """Accumulates Messages API stream events into a Reply."""

    def __init__(self, on_text):
        self.on_text = on_text
        self.blocks = {}        # index -> content block, its tool_use input gathered as JSON text
        self.usage = {}
        self.stop = None
        self.done = False

    def feed(self, event):
        kind = event.get("type") if isinstance(event, dict) else None
        handler = getattr(self, f"_on_{kind}", None)
        if handler:             # unknown events are skipped: the API may add new ones
            handler(event)

    def _on_message_start(self, event):
        self.usage.update(mapping(mapping(event.get("message")).get("usage")))

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
        usage = make_usage(messages, text, calls, input_tokens(self.usage),
                           self.usage.get("output_tokens"))
        return Reply(text, calls, usage, stop_reason(self.stop, calls, STOP_REASONS))


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
