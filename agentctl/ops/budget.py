"""Token budgets (agentctl(7), BUDGETS).

An account is an agent with a budget. Every agent is charged to one account
(agents.budget_id: its own when it has a budget, else its fork parent's) or
to none. A child's budget is carved out of its parent's account; every model
call's tokens are charged to the account; an account whose spent reaches its
budget is exhausted: no turn starts, a running turn ends before its next
model call, and the owner's lifecycle parent is told once by mail. When the
owner exits, what is left goes back to its parent's account.
"""

from agentctl.errors import Refused, UsageError
from agentctl.ids import INIT_ID


def account(conn, agent):
    """The account row `agent` is charged to, or None."""
    return None if agent["budget_id"] is None else _row(conn, agent["budget_id"])


def _row(conn, account_id):
    return conn.execute("SELECT id, name, parent_id, budget, spent FROM agents WHERE id = ?",
                        (account_id,)).fetchone()


def is_exhausted(acc):
    return acc is not None and acc["budget"] is not None and acc["spent"] >= acc["budget"]


def words(acc):
    return f"spent {acc['spent']} of {acc['budget']} tokens"


def carve(conn, parent, tokens):
    """Check `tokens` and move them out of the account `parent` is charged
    to (if any): what the child's own account starts with."""
    from agentctl.store.registry import label
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise UsageError(f"bad budget: {tokens!r} (want a positive number of tokens)")
    acc = account(conn, parent)
    if acc is None:
        return
    left = acc["budget"] - acc["spent"]
    if tokens > left:
        raise Refused(f"budget {tokens} is more than the account of {label(acc)} has left "
                      f"({max(left, 0)} tokens)")
    conn.execute("UPDATE agents SET budget = budget - ? WHERE id = ?", (tokens, acc["id"]))


def charge(conn, agent_id, tokens):
    """Charge a model call's tokens to the agent's account; tell the owner's
    parent when this call exhausts it. The caller holds the transaction."""
    row = conn.execute("SELECT budget_id FROM agents WHERE id = ?", (agent_id,)).fetchone()
    if row is None or row[0] is None or not tokens:
        return
    before = _row(conn, row[0])
    conn.execute("UPDATE agents SET spent = spent + ? WHERE id = ?", (tokens, row[0]))
    after = _row(conn, row[0])
    if not is_exhausted(before) and is_exhausted(after):
        notify(conn, after, agent_id)


def notify(conn, acc, agent_id):
    """Record the exhaustion (an event whose detail holds the budget it
    reached) and mail the owner's lifecycle parent, unless that is init."""
    from agentctl.ops.mail import deliver
    from agentctl.store.registry import get, label, nearest_live_ancestor, record
    record(conn, acc["id"], "budget", f"exhausted {acc['spent']} {acc['budget']}", agent_id)
    parent = nearest_live_ancestor(conn, get(conn, acc["id"]))    # the owner may have exited
    if parent["id"] == INIT_ID:
        return
    who = "" if agent_id == acc["id"] else f" (by {label(get(conn, agent_id))}, {agent_id})"
    deliver(conn, acc["id"], parent,
            f"{label(acc)} ({acc['id']}) is over budget{who}: {words(acc)}; "
            "its turns are refused until its budget grows", kind="budget")


def notified(conn, acc):
    """Whether the exhaustion at the account's current budget was told."""
    row = conn.execute("SELECT detail FROM events WHERE agent_id = ? AND kind = 'budget' "
                       "ORDER BY id DESC LIMIT 1", (acc["id"],)).fetchone()
    return row is not None and row[0].split()[-1] == str(acc["budget"])


def refusal(conn, agent):
    """The one-line reason a turn of `agent` may not start, or None; tells
    the parent when no one was told of this exhaustion yet."""
    from agentctl.store.registry import label
    acc = account(conn, agent)
    if not is_exhausted(acc):
        return None
    if not notified(conn, acc):
        notify(conn, acc, agent["id"])
    owner = "" if acc["id"] == agent["id"] else f"account of {label(acc)}: "
    return f"{label(agent)}: over budget ({owner}{words(acc)})"


def _in_use(conn, account_id):
    """Whether an agent that lives is charged to the account."""
    return conn.execute("SELECT 1 FROM agents WHERE budget_id = ? AND status IN ('R', 'S', 'T') "
                        "LIMIT 1", (account_id,)).fetchone() is not None


def _heir(conn, account_id):
    """The account that takes back what `account_id` has left: the one it was carved
    out of (its owner's fork parent's account), or, when no one alive is charged to
    that one any more, the next one up; None at an agent without a budget."""
    while True:
        row = conn.execute("SELECT p.budget_id FROM agents a JOIN agents p "
                           "ON p.id = a.forked_from WHERE a.id = ?", (account_id,)).fetchone()
        if row is None or row[0] is None:
            return None
        if _in_use(conn, row[0]):
            return row[0]
        account_id = row[0]


def give_back(conn, agent):
    """After `agent` exited: once no living agent is charged to its account (its
    own, or the one it shares), what the account has left goes back up (_heir).
    A cascade ends the deepest agents first, so each account gives back to the
    one just above it, which gives back in turn as its own owner exits."""
    account_id = agent["budget_id"]
    if account_id is None or _in_use(conn, account_id):
        return
    acc = _row(conn, account_id)
    left = acc["budget"] - acc["spent"]
    heir = _heir(conn, account_id) if left > 0 else None
    if heir is None:
        return
    conn.execute("UPDATE agents SET budget = budget + ? WHERE id = ?", (left, heir))
    conn.execute("UPDATE agents SET budget = spent WHERE id = ?", (account_id,))
