"""Budget accounts' rows (agentctl(5): agents.budget, budget_id, spent). The rules
of carving, charging and giving back are ops/budget.py's."""

from agentctl.store.registry import LIVE, get, statuses


def of(conn, agent):
    """The account row `agent` is charged to, or None."""
    return None if agent["budget_id"] is None else get(conn, agent["budget_id"])


def charged_to(conn, agent_id):
    """The id of the account the agent is charged to, or None."""
    row = conn.execute("SELECT budget_id FROM agents WHERE id = ?", (agent_id,)).fetchone()
    return row and row[0]


def shrink(conn, account_id, tokens):
    conn.execute("UPDATE agents SET budget = budget - ? WHERE id = ?", (tokens, account_id))


def grow(conn, account_id, tokens):
    conn.execute("UPDATE agents SET budget = budget + ? WHERE id = ?", (tokens, account_id))


def set_budget(conn, agent_id, amount, unit="tokens"):
    """The agent's own account, with a budget of `amount` in `unit` (tokens, or usd:
    millionths of a dollar): it is charged to it from now."""
    conn.execute("UPDATE agents SET budget = ?, budget_unit = ?, budget_id = id WHERE id = ?",
                 (amount, None if unit == "tokens" else unit, agent_id))


def spend(conn, account_id, tokens):
    conn.execute("UPDATE agents SET spent = spent + ? WHERE id = ?", (tokens, account_id))


def close(conn, account_id):
    """Nothing left to spend: the budget becomes what was spent."""
    conn.execute("UPDATE agents SET budget = spent WHERE id = ?", (account_id,))


def in_use(conn, account_id):
    """Whether an agent that lives is charged to the account."""
    return conn.execute(f"SELECT 1 FROM agents WHERE budget_id = ? AND status IN "
                        f"{statuses(LIVE)} LIMIT 1", (account_id,)).fetchone() is not None


def carved_from(conn, account_id):
    """The account the owner's fork parent is charged to: the one `account_id`
    was carved out of, or None."""
    row = conn.execute("SELECT p.budget_id FROM agents a JOIN agents p "
                       "ON p.id = a.forked_from WHERE a.id = ?", (account_id,)).fetchone()
    return row and row[0]


def exhausted_ids(conn):
    """The ids of the accounts whose spent has reached their budget."""
    return {r[0] for r in conn.execute(
        "SELECT id FROM agents WHERE budget IS NOT NULL AND spent >= budget")}
