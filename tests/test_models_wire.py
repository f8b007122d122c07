"""Properties of the wire-level pieces, without a server: SSE parsing survives any chunking,
streamed tool arguments reassemble exactly, and converted conversations alternate roles."""

import json

from hypothesis import example, given, settings, strategies as st

from agentctl.models.anthropic import convert_messages
from agentctl.models.http import iter_sse
from agentctl.models.openai import read_stream

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


def chunked(data, cuts):
    """data split at the given offsets: the pieces a network might deliver."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0] + points, points + [len(data)])]


def encode(events, newline):
    out = []
    for name, data in events:
        lines = ([f"event: {name}"] if name else []) + [f"data: {line}" for line in data.split("\n")]
        out.append(newline.join(lines) + newline * 2)
    return "".join(out).encode()


events_strategy = st.lists(st.tuples(st.sampled_from(["", "message_start", "ping"]),
                                     texts.filter(lambda t: "\r" not in t)), max_size=6)


@given(events_strategy, st.sampled_from(["\n", "\r\n"]), st.lists(st.integers(0, 10_000)))
def test_sse_events_survive_any_chunking(events, newline, cuts):
    data = encode(events, newline)
    parsed = list(iter_sse(chunked(data, cuts)))
    assert parsed == [(name or "message", text) for name, text in events]


def test_sse_comments_fields_and_unterminated_event():
    data = (b": keep-alive\n\nid: 7\nretry: 100\nevent: x\ndata:no space\ndata:  two spaces\n\n"
            b"data: cut before its blank line")
    assert list(iter_sse([data])) == [("x", "no space\n two spaces")]


def openai_sse(text, calls, cuts):
    chunks = [{"choices": [{"index": 0, "delta": {"content": piece}}]}
              for piece in chunked(text, cuts) if piece]
    for index, (name, arguments) in enumerate(calls):
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, "id": f"id{index}", "type": "function",
             "function": {"name": name, "arguments": ""}}]}}]})
        chunks += [{"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, "function": {"arguments": piece}}]}}]}
            for piece in chunked(arguments, cuts) if piece]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return body.encode()


@settings(max_examples=60)
@given(texts, st.lists(st.tuples(st.from_regex(r"[a-z_]{1,12}", fullmatch=True), texts),
                       max_size=3),
       st.lists(st.integers(0, 200), max_size=8), st.lists(st.integers(0, 10_000), max_size=8))
def test_openai_stream_reassembles_text_and_arguments_exactly(text, calls, cuts, net_cuts):
    seen = []
    body = openai_sse(text, calls, cuts)
    reply = read_stream(iter_sse(chunked(body, net_cuts)), [], seen.append)
    assert reply.text == text == "".join(seen)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == calls
    assert [c.id for c in reply.tool_calls] == [f"id{i}" for i in range(len(calls))]


roles = st.sampled_from(["system", "user", "assistant", "tool"])


@st.composite
def messages(draw):
    out = []
    for role in draw(st.lists(roles, max_size=12)):
        message = {"role": role, "content": draw(st.sampled_from(["", "text", None]))}
        if role == "assistant" and draw(st.booleans()):
            message["tool_calls"] = [{"id": "t", "type": "function",
                                      "function": {"name": "f", "arguments": '{"a": 1}'}}]
        if role == "tool":
            message["tool_call_id"] = "t"
        out.append(message)
    return out


@given(messages())
def test_converted_conversation_alternates_without_empty_parts(conversation):
    system, turns = convert_messages(conversation)
    assert all(a["role"] != b["role"] for a, b in zip(turns, turns[1:]))
    for turn in turns:
        assert turn["content"], "no empty messages"
        assert all(b.get("text", "x") for b in turn["content"]), "no empty text blocks"
        kinds = [b["type"] for b in turn["content"]]
        assert kinds == sorted(kinds, key=lambda k: k != "tool_result")
    assert "\n\n\n" not in system


raw_ids = st.sampled_from(["t", "call_0_0", "functions.f:0", "", "x y", "toolu_ok"])
contents = st.sampled_from(["", " \n", "text", None, "\t"])


@st.composite
def paired_conversations(draw):
    """Conversations whose every tool call is answered at once, ids drawn from a few, repeated."""
    out = []
    for kind in draw(st.lists(st.sampled_from(["user", "assistant", "calls"]), max_size=10)):
        if kind == "calls":
            ids = draw(st.lists(raw_ids, min_size=1, max_size=3))
            out.append({"role": "assistant", "content": draw(contents), "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                for i in ids]})
            out += [{"role": "tool", "tool_call_id": i, "content": draw(contents)} for i in ids]
        else:
            out.append({"role": kind, "content": draw(contents)})
    return out


@given(paired_conversations())
def test_converted_tool_ids_are_valid_unique_and_answer_the_calls_before(conversation):
    import re
    _, turns = convert_messages(conversation)
    uses = [b["id"] for t in turns for b in t["content"] if b["type"] == "tool_use"]
    assert len(set(uses)) == len(uses)
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", i) for i in uses)
    for before, turn in zip(turns, turns[1:]):
        results = [b["tool_use_id"] for b in turn["content"] if b["type"] == "tool_result"]
        if results:
            assert results == [b["id"] for b in before["content"] if b["type"] == "tool_use"]
    for turn in turns:
        assert all(b["text"].strip() for b in turn["content"] if b["type"] == "text")


def test_sse_reading_stays_linear_in_a_line_that_never_ends():
    """A hostile server's stream of one endless line: 20 MB in 1 KB pieces (the whole body
    bound, jsonin.MAX_BYTES, allows 64 MiB) is read in a moment, not re-split at every piece."""
    import time
    piece = b"data: " + b"x" * 1018
    start = time.monotonic()
    events = list(iter_sse([piece] * 20_000 + [b"\n\n"]))
    # (a fraction of a second on a quiet machine; re-split at every piece, hours)
    assert time.monotonic() - start < 20
    assert len(events) == 1 and len(events[0][1]) == 20_000 * 1024 - 6


# -- replies of any shape: a Reply, or a fault of the reply, never a crash ------------------------

from agentctl.models import anthropic, openai  # noqa: E402
from agentctl.models.base import Reply, Transient, Unusable  # noqa: E402

WORDS = ["", "x", "text", "tool_use", "text_delta", "input_json_delta", "message_start",
         "content_block_start", "content_block_delta", "message_delta", "message_stop", "error",
         "length", "stop", "tool_calls", "overloaded_error"]
FIELDS = ["choices", "message", "content", "tool_calls", "function", "name", "arguments", "id",
          "index", "delta", "finish_reason", "usage", "prompt_tokens", "completion_tokens", "type",
          "text", "input", "content_block", "partial_json", "stop_reason", "error",
          "input_tokens", "output_tokens", "json"]
shapes = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) |
    st.sampled_from(WORDS),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(FIELDS), inner,
                                                                max_size=4),
    max_leaves=25)


def reply_or_fault(parse):
    try:
        reply = parse()
    except (Transient, Unusable):
        return
    assert isinstance(reply, Reply) and isinstance(reply.text, str)
    assert all(isinstance(v, str) for c in reply.tool_calls for v in (c.id, c.name, c.arguments))
    assert isinstance(reply.stop_reason, str)


@settings(max_examples=400)
@given(shapes)
@example({"content": [None]})
@example({"stop_reason": [None], "content": []})
@example({"choices": [{"message": {"content": 5, "tool_calls": [{"function": 1}]}}]})
def test_a_plain_reply_of_any_shape_is_a_reply_or_a_fault(body):
    reply_or_fault(lambda: openai.parse_completion(body, []))
    reply_or_fault(lambda: anthropic.parse_message(body, []))


@settings(max_examples=400)
@given(st.lists(shapes, max_size=6))
@example([{"type": "content_block_start", "content_block": 5}])
@example([{"type": "content_block_start", "index": "0"}, {"type": "content_block_start"}])
@example([{"choices": [5]}, {"choices": [{"delta": {"content": 5}}]}])
@example([{"choices": [{"delta": {"tool_calls": [{"index": [], "function": {"name": 1}}]}}]}])
def test_a_stream_of_any_shapes_is_a_reply_or_a_fault(events):
    for module in (openai, anthropic):
        def parse():
            state = module.StreamState(on_text=lambda text: None)
            for event in events:
                state.feed(event)
            return state.reply([])
        reply_or_fault(parse)
