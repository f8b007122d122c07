"""The context a turn sends: system prompt + replay, in the forms agent-replay
prints and agent-run sends (one code path, so they never disagree)."""

import re

from agentctl import jsonin, voice
from agentctl.store import history, registry
from agentctl.ids import INIT_ID, short
from agentctl.text import quoted

HIDDEN = ("clear", "event")     # recorded, never sent to a model


def build(conn, agent):
    """(system_prompt, [message rows]) for `agent`."""
    rows = [m for m in history.replay(conn, agent) if m["kind"] not in HIDDEN]
    return agent["system_prompt"], rows


def _answer(out, waiting):
    """The APIs reject a tool call without its result. A child forked in a
    step with several calls, or at a call, inherits calls that were answered
    only in its parent: give each an explicit placeholder result."""
    out.extend({"role": "tool", "tool_call_id": call_id, "content": voice.UNANSWERED}
               for call_id in waiting)
    waiting.clear()


def sendable(arguments):
    """A tool call's arguments as a model may be sent them again: the text it wrote
    when that is a JSON object within bounds, else {} (the call was answered with
    the error the model saw; the record keeps the raw text). Servers that template
    the history (llama-server) refuse a conversation with broken JSON in it."""
    try:
        if isinstance(jsonin.loads(arguments or "{}", max_bytes=jsonin.ARGUMENTS_BYTES), dict):
            return arguments or "{}"
    except ValueError:
        pass
    return "{}"


def request(conn, agent, system_prompt, rows):
    """(messages, cache hints) of a model call of `agent` on its context: the messages
    as_openai makes, and where their prefix is stable (models.base.Cache), for the
    provider's prompt cache to follow the fork tree:
    - the fork point: the end of the part of the context inherited from ancestors (what
      siblings forked there send too);
    - the end of the previous request: just before the newest assistant message (what
      the agent's previous call sent, and wrote to the cache);
    - the end of this request (what the next call will read).
    Its key is the lineage's root: a family of forks shares prefixes."""
    from agentctl.models.base import Cache  # (start-up: 1.4 ms, only for a model's request)
    ends = []
    messages = as_openai(system_prompt, rows, ends)
    marks = set()
    inherited = 0
    while inherited < len(rows) and rows[inherited]["agent_id"] != agent["id"]:
        inherited += 1
    if inherited:
        marks.add(ends[inherited - 1])
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if replies and replies[-1] > 0:
        marks.add(replies[-1] - 1)
    if messages:
        marks.add(len(messages) - 1)
    line = registry.lineage(conn, agent["id"])
    root = [a["id"] for a in line if a["id"] != INIT_ID][-1:] or [agent["id"]]
    return messages, Cache(tuple(sorted(m for m in marks if m >= 0)), f"agentctl-{root[0]}")


def _show(out, media):
    """What tools returned that is not text (images), as a user message after the results
    of their calls (no API takes another message between a call and its result; OpenAI
    takes an image in no tool result)."""
    if media:
        parts = [{"type": "text", "text": voice.media_from([name for name, _ in media])}]
        for _, image in media:
            parts.append({"type": "image_url", "image_url": {
                "url": f"data:{image['mime']};base64,{image['data']}"}})
        out.append({"role": "user", "content": parts})
        media.clear()


def as_openai(system_prompt, rows, ends=None):
    """The messages array of the OpenAI Chat Completions API. Every call has a result and
    every result its call: the APIs reject either alone. With `ends` (a list), the index
    of the last message written for each row is appended to it."""
    out = []
    waiting = {}        # the calls of the latest assistant message still without a result
    answered = set()    # ... and those with one: their images follow the results
    media = []          # (tool, image) to show after the results
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    for m in rows:
        kind = m["kind"]
        more_calls = kind == "tool_call" and out and out[-1]["role"] == "assistant"
        if media and kind not in ("tool_result", "media") and not more_calls:
            _answer(out, waiting)       # the results first, then what the tools showed
            _show(out, media)
        if kind == "tool_call":
            if not out or out[-1]["role"] != "assistant":
                _answer(out, waiting)
                answered.clear()
                out.append({"role": "assistant", "content": None})
            out[-1].setdefault("tool_calls", []).append({
                "id": m["tool_call_id"], "type": "function",
                "function": {"name": m["tool_name"], "arguments": sendable(m["content"])}})
            waiting[m["tool_call_id"]] = True
        elif kind == "tool_result":
            # Without its call in this context (a child's answer to the fork call of its
            # parent's turn that was voided afterwards), a result is left out.
            if waiting.pop(m["tool_call_id"], None):
                answered.add(m["tool_call_id"])
                out.append({"role": "tool", "tool_call_id": m["tool_call_id"],
                            "content": m["content"]})
        elif kind == "media":
            if m["tool_call_id"] in answered:
                media += [(m["tool_name"], p) for p in _parts(m["content"])]
        elif kind == "compaction":
            _answer(out, waiting)
            # A user message, never a system one: the summary was written from text that
            # includes mail, and mail must never gain a system message's authority.
            out.append({"role": "user", "content": voice.SUMMARY_HEAD + m["content"]})
        elif kind in ("system", "user", "assistant"):
            _answer(out, waiting)
            out.append({"role": kind, "content": m["content"]})
        if ends is not None:
            ends.append(len(out) - 1)
    _answer(out, waiting)
    _show(out, media)
    return out


def _parts(content):
    """The images of a media message (what a tool returned that is not text)."""
    try:
        found = jsonin.loads(content, max_bytes=len(content) + 1).get("parts")
    except (ValueError, AttributeError):
        return []
    return [p for p in found or () if isinstance(p, dict) and p.get("type") == "image"
            and isinstance(p.get("mime"), str) and isinstance(p.get("data"), str)]


def as_records(system_prompt, rows):
    """One dict per message, for jsonl, each with the same keys; the system prompt first,
    with id null."""
    out = []
    if system_prompt:
        out.append({"id": None, "agent_id": None, "kind": "system",
                    "content": system_prompt, "tool_name": None,
                    "tool_call_id": None, "turn_id": None, "created_at": None,
                    "keep_from": None, "tokens": None, "void": 0})
    out.extend(dict(m) for m in rows)
    return out


def owner_names(conn, rows):
    """{agent id: name} for the owners of `rows`, for as_text."""
    return registry.names(conn, [m["agent_id"] for m in rows])


def as_text(system_prompt, rows, names):
    """For people, and the transcript a compaction summarises: a header line per
    message, then its content indented, so that no content (a mail, a document, a
    model's reply) can start a line that poses as a header."""
    parts = []
    if system_prompt:
        parts.append(f"# system prompt\n{indented(system_prompt)}")
    for m in rows:
        owner = names.get(m["agent_id"]) or short(m["agent_id"])
        head = f"#{m['id']} {m['kind']} @{owner}"
        if m["tool_name"]:
            head += f" {field(m['tool_name'])}"
        if m["tool_call_id"]:
            head += f" [{field(m['tool_call_id'])}]"
        if m["kind"] == "compaction" and m["keep_from"]:
            head += f" (keeps #{m['keep_from']} on)"
        if m["void"]:
            head += " (void)"
        content = m["content"]
        if m["kind"] == "media":        # not the base64: what it is
            content = "\n".join(voice.media_note("image", p["mime"], p["data"])
                                for p in _parts(content))
        parts.append(f"{head}\n{indented(content)}")
    return "\n".join(parts)


def indented(content):
    """Every line of `content` indented by two spaces: every line break Python
    knows (\\r, U+2028 ...) starts a line, so each is counted."""
    return "".join(f"  {line}\n" if line else "\n" for line in content.splitlines())


def field(value):
    """A tool name or call id (the model's choice) for a header: as it is when it
    is a plain word, else quoted on one line."""
    if re.fullmatch(r"[A-Za-z0-9_.:-]+", value):
        return value
    return quoted(value)
