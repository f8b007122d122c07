"""A call's requests (agent-answer(1)): a question (the ask tool), an approval (a tool
under --ask) or an MCP server's question (elicitation), opened for the call, asked at
agent-run's terminal where it may be (an agent of the operator's), and, for a call
that asks again, the decisions its server is told."""

from agentctl.errors import Refused, UsageError
from agentctl.ids import INIT_ID
from agentctl.ops import asks, elicitation, lease
from agentctl.store import asks as asks_store, registry


class Paused(Exception):
    """The turn waits for the decision of a request (its id)."""


def opened(conn, agent_id, turn_id, call, kind, prompt, warn, **fields):
    """The call's request of `kind` opened (`fields`: its question, form), asked at the
    terminal where agent-run may (`prompt`); the request's row, read again."""
    with lease.holding(conn, agent_id):
        lease.check_not_killed(conn, agent_id)
        agent = registry.get(conn, agent_id)
        row = asks.open_request(conn, agent, turn_id, call, kind, **fields)
    return asked_here(conn, agent, row, prompt, warn)


def asked_here(conn, agent, row, prompt, warn):
    """The request, asked at the terminal when agent-run may (`prompt`, for an agent of
    the operator's), decided there unless the operator leaves it (asked again after an
    answer that doesn't fit); read again."""
    while prompt is not None and agent["parent_id"] == INIT_ID:
        decided = prompt(row)
        if decided is None:
            break
        with lease.holding(conn, agent["id"]):
            try:
                asks.decide(conn, row["id"], None, *decided)
            except Refused:
                pass        # decided meanwhile, from another shell: that one wins
            except UsageError as e:
                warn(str(e))
                continue
        break
    return asks_store.get(conn, row["id"])


def answers(conn, turn_id, call):
    """What the MCP server is told when the call asks its questions again: the
    decisions of the requests it made (Paused while one waits)."""
    rows = asks_store.all_of_call(conn, turn_id, call["tool_call_id"], elicitation.KIND)
    if rows and rows[-1]["decision"] is None:
        raise Paused(rows[-1]["id"])
    return elicitation.answers(rows)
