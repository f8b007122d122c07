"""What the fake model API (tests/fakeapi.py) answers, in each provider's wire format: a reply
made from a queued behaviour (fakeapi.reply's), as one JSON body or as the events of a stream,
and an error's body. The batch APIs (tests/fakebatch.py) put the same bodies in their results."""

import json

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 429: "rate_limit_error", 500: "api_error",
               503: "api_error", 529: "overloaded_error"}


def error_body(flavour, status, message, code=None):
    """An error in the provider's JSON form; `code` is OpenAI's machine-readable one."""
    if flavour == "openai":
        return {"error": {"message": message, "type": ERROR_TYPES.get(status, "error"),
                          "param": None, "code": code}}
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"),
                                       "message": message}}


def split(text, pieces):
    """text in `pieces` roughly equal parts (fewer if text is short), none empty."""
    if not text:
        return []
    size = max(1, -(-len(text) // pieces))
    return [text[i:i + size] for i in range(0, len(text), size)]


# -- OpenAI wire format -----------------------------------------------------------------------

def openai_finish(b):
    return b.get("stop") or ("tool_calls" if b["calls"] else "stop")


def openai_usage(usage, cached=(0, 0)):
    obj = {"prompt_tokens": usage[0], "completion_tokens": usage[1],
           "total_tokens": usage[0] + usage[1]}
    if cached[0]:
        obj["prompt_tokens_details"] = {"cached_tokens": cached[0]}
    return obj


def anthropic_usage(usage, cached=(0, 0)):
    """The Messages API's counts: its input_tokens are those after the last breakpoint."""
    obj = {"input_tokens": usage[0] - cached[0] - cached[1]}
    if any(cached):
        obj.update(cache_read_input_tokens=cached[0], cache_creation_input_tokens=cached[1])
    return obj


def openai_tier(b, body):
    """The service_tier an OpenAI reply names: the behaviour's (service_tier="default" to say
    a flex request was served at the standard tier), else "flex" when the request asked for
    flex, else none (as the fake has always answered)."""
    return b.get("service_tier") or ("flex" if body.get("service_tier") == "flex" else None)


def openai_plain(b, model):
    message = {"role": "assistant", "content": b["text"] or None, "refusal": None}
    if b["calls"]:
        message["tool_calls"] = [{"id": c["id"] or f"call_fake{c['index']}", "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}}
                                 for c in b["calls"]]
    obj = {"id": b.get("reply_id", "chatcmpl-fake"), "object": "chat.completion",
           "created": 1700000000, "model": model,
           "choices": [{"index": 0, "message": message, "logprobs": None,
                        "finish_reason": openai_finish(b)}]}
    if b["usage"]:
        obj["usage"] = openai_usage(b["usage"], b["cached"])
    if b["timings"] is not None:
        obj["timings"] = b["timings"]
    return obj


def openai_chunks(b, model, include_usage):
    def chunk(delta, finish=None):
        obj = {"id": b.get("reply_id", "chatcmpl-fake"), "object": "chat.completion.chunk",
               "created": 1700000000, "model": model,
               "choices": [{"index": 0, "delta": delta, "logprobs": None,
                            "finish_reason": finish}]}
        if include_usage:
            obj["usage"] = None
        return obj

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in split(b["text"], b["pieces"])]
    for c in b["calls"]:
        head = {"index": c["index"], "id": c["id"] or f"call_fake{c['index']}", "type": "function",
                "function": {"name": c["name"], "arguments": ""}}
        chunks.append(chunk({"tool_calls": [head]}))
        chunks += [chunk({"tool_calls": [{"index": c["index"], "function": {"arguments": piece}}]})
                   for piece in split(c["arguments"], b["pieces"])]
    chunks.append(chunk({}, openai_finish(b)))
    if include_usage and b["usage"]:
        chunks.append({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                       "created": 1700000000, "model": model, "choices": [],
                       "usage": openai_usage(b["usage"], b["cached"])})
    if b["timings"] is not None:
        chunks[-1]["timings"] = b["timings"]
    return chunks


# -- Anthropic wire format --------------------------------------------------------------------

def anthropic_stop(b):
    if b.get("stop"):
        return {"length": "max_tokens"}.get(b["stop"], b["stop"])
    return "tool_use" if b["calls"] else "end_turn"


def anthropic_plain(b, model):
    content = [{"type": "text", "text": b["text"]}] if b["text"] else []
    content += [{"type": "tool_use", "id": c["id"] or f"toolu_fake{c['index']}",
                 "name": c["name"], "input": json.loads(c["arguments"] or "{}")}
                for c in b["calls"]]
    obj = {"id": b.get("reply_id", "msg_fake"), "type": "message", "role": "assistant",
           "model": model, "content": content, "stop_reason": anthropic_stop(b),
           "stop_sequence": None}
    if b["usage"]:
        obj["usage"] = dict(anthropic_usage(b["usage"], b["cached"]), output_tokens=b["usage"][1])
    return obj


def anthropic_events(b, model):
    usage = b["usage"]
    start_usage = dict(anthropic_usage(usage, b["cached"]), output_tokens=1) if usage else {}
    events = [{"type": "message_start", "message": {
        "id": b.get("reply_id", "msg_fake"), "type": "message", "role": "assistant",
        "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": start_usage}}]
    index = 0
    if b["text"]:
        events.append({"type": "content_block_start", "index": 0,
                       "content_block": {"type": "text", "text": ""}})
        events.append({"type": "ping"})
        events += [{"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": piece}}
                   for piece in split(b["text"], b["pieces"])]
        events.append({"type": "content_block_stop", "index": 0})
        index = 1
    for c in b["calls"]:
        events.append({"type": "content_block_start", "index": index, "content_block": {
            "type": "tool_use", "id": c["id"] or f"toolu_fake{c['index']}", "name": c["name"],
            "input": {}}})
        events += [{"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}
                   for piece in split(c["arguments"], b["pieces"])]
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    delta = {"type": "message_delta", "delta": {
        "stop_reason": anthropic_stop(b), "stop_sequence": None}}
    if usage:
        delta["usage"] = {"output_tokens": usage[1]}
    events += [delta, {"type": "message_stop"}]
    return events
