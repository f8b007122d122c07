"""Compaction (agentctl(7), COMPACTION): a bounded context for agents that live for weeks.

Before each model call of a turn, the context it would send is measured. When it is larger than
the agent's window, the older part is summarised by the agent's own model into a compaction
record; replay then starts from that summary and keeps the recent messages verbatim. Nothing is
deleted: the summarised messages stay in the table, and `agent-replay --full` shows them.
"""

from agentctl import env, voice
from agentctl.turn import context
from agentctl.store import events, history
from agentctl.ops import lease, turns
from agentctl.models.base import IMAGE_CHARS, estimate_tokens

DEFAULT_WINDOW = 64000
KEEP = 0.25             # of the window: how much of the recent context stays verbatim
OVERHEAD = 4            # tokens a message costs besides its text (role, separators)
CUTS = ("user", "assistant")    # a cut before one of these never splits a call from its result

def window(agent):
    """The agent's context window in tokens: its own, else $AGENTCTL_CONTEXT_WINDOW, else
    the default."""
    if agent["context_window"]:
        return agent["context_window"]
    return env.number("AGENTCTL_CONTEXT_WINDOW", DEFAULT_WINDOW, minimum=1, whole=True)


def message_tokens(m):
    if m["kind"] == "media":        # images, not their base64 text
        return OVERHEAD + estimate_tokens(IMAGE_CHARS * max(1, m["content"].count('"image"')))
    return OVERHEAD + estimate_tokens(len(m["content"] or "") + len(m["tool_name"] or ""))


def size(system, rows):
    """The tokens of a context: what the API reported for the call that wrote its newest
    measured reply (input and output), plus an estimate of what came after; an estimate
    throughout when no reply since the latest compaction was measured."""
    # Replay puts the newest summary first: a reply measured before it measured another context.
    floor = rows[0]["id"] if rows and rows[0]["kind"] == "compaction" else 0
    total = estimate_tokens(len(system or ""))
    start = 0
    for index in range(len(rows) - 1, -1, -1):
        m = rows[index]
        if m["id"] is not None and m["id"] <= floor:
            break
        if m["kind"] == "assistant" and m["tokens"] is not None:
            total, start = m["tokens"], index + 1
            while start < len(rows) and rows[start]["kind"] == "tool_call":
                start += 1      # written by that same call: counted in its output
            break
    return total + sum(message_tokens(m) for m in rows[start:])


def cut(rows, limit):
    """The index of the first message to keep verbatim, or None when nothing can be
    summarised: the earliest safe cut whose suffix fits in `limit` tokens, else the latest
    safe cut. Only messages after the previous summary are candidates, and something other
    than that summary must be left to summarise: so the new keep_from is above the previous
    one, and the previous summary is always in the part summarised."""
    first = 1 if rows and rows[0]["kind"] == "compaction" else 0
    kept, best = 0, None
    for index in range(len(rows) - 1, first, -1):
        kept += message_tokens(rows[index])
        if kept > limit and best is not None:
            break
        if rows[index]["kind"] in CUTS:
            best = index
    return best


def summary_request(conn, system, rows):
    """The messages of the summarising call: the part to summarise as a transcript in one
    user message, so it holds no tool calls (an API may refuse those without tools)."""
    names = context.owner_names(conn, rows)
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user",
                        "content": voice.COMPACT_INSTRUCTION + context.as_text(None, rows, names)}]


def prepare(conn, agent, turn_id, client):
    """The context for the next model call, compacted first if it is over the window;
    the summarising call is charged to the turn."""
    system, rows = context.build(conn, agent)
    limit = window(agent)
    if size(system, rows) <= limit:
        return system, rows
    index = cut(rows, int(limit * KEEP))
    if index is None:
        return system, rows
    reply = client.complete(summary_request(conn, system, rows[:index]), [])
    summary = (reply.text or "").strip()
    with lease.holding(conn, agent["id"]):
        turns.charge(conn, turn_id, agent["id"], reply.usage, reply.api_url)
        if summary:
            history.append(conn, agent["id"], "compaction", summary, turn_id=turn_id,
                           keep_from=rows[index]["id"])
            events.record(conn, agent["id"], "compaction", turn=turn_id,
                          summarised=index, keep_from=rows[index]["id"])
    return context.build(conn, agent) if summary else (system, rows)
