"""Budgets (agentctl(7), BUDGETS), in tokens or in money.

An account is an agent with a budget. Every agent is charged to one account
(agents.budget_id: its own when it has a budget, else its fork parent's) or
to none. A child's budget is carved out of its parent's account; every model
call is charged to the account, in the account's unit (agents.budget_unit):
the tokens the provider processed (cache reads are not counted: the provider
serves them for a tenth of the price, or for nothing), or the call's cost in
millionths of a dollar (ops.prices; a call without a price costs nothing). An
account whose spent reaches its budget is exhausted: no turn starts, a running
turn ends before its next model call, and the owner's lifecycle parent is told
once by mail. When the owner exits, what is left goes back to its parent's
account. One tree's accounts have one unit: no rate turns tokens into dollars.
"""

from agentctl import voice
from agentctl.errors import Refused, UsageError
from agentctl.settings import Budget
from agentctl.ops import mail
from agentctl.store import accounts, events, registry

account = accounts.of


def is_exhausted(acc):
    return acc is not None and acc["budget"] is not None and acc["spent"] >= acc["budget"]


def over(conn, agent_id):
    """Whether the account the agent is charged to is exhausted."""
    return is_exhausted(account(conn, registry.get(conn, agent_id)))


def unit(acc):
    return acc["budget_unit"] or "tokens"


def words(acc):
    return voice.spent(acc["spent"], acc["budget"], unit(acc))


def carve(conn, parent, wanted):
    """Check the budget `wanted` (a settings.Budget, or a number of tokens) and move
    it out of the account `parent` is charged to (if any), which must count in the
    same unit: what the child's own account starts with (a Budget)."""
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        wanted = Budget(wanted, "tokens")
    if not isinstance(wanted, Budget) or isinstance(wanted.amount, bool) \
            or not isinstance(wanted.amount, int) or wanted.amount < 1 \
            or wanted.unit not in ("tokens", "usd"):
        raise UsageError(f"bad budget: {wanted!r} (want a positive number of tokens, "
                         "or of dollars)")
    acc = account(conn, parent)
    if acc is None:
        return wanted
    if unit(acc) != wanted.unit:
        raise UsageError(f"budget {wanted} can't be carved out of the account of "
                         f"{registry.label(acc)}, which counts {voice.UNITS[unit(acc)]} "
                         f"(give a budget in {voice.UNITS[unit(acc)]})")
    left = acc["budget"] - acc["spent"]
    if wanted.amount > left:
        raise Refused(f"budget {wanted} is more than the account of {registry.label(acc)} "
                      f"has left ({Budget(max(left, 0), wanted.unit)}"
                      f"{' tokens' if wanted.unit == 'tokens' else ''})")
    accounts.shrink(conn, acc["id"], wanted.amount)
    return wanted


def source(conn, agent):
    """The account a change of `agent`'s budget takes from or gives back to: the one its
    own was carved out of, or the one it is charged to when it has none; or None."""
    if agent["budget_id"] == agent["id"]:
        return accounts.carved_from(conn, agent["id"])
    return agent["budget_id"]


def pays_for(conn, agent, actor):
    """Whether a raise of `agent`'s budget would come out of `actor`'s account."""
    paying = source(conn, agent)
    return paying is not None and paying == actor["budget_id"]


def resize(conn, agent, wanted):
    """Make `agent`'s own budget `wanted` (a settings.Budget: agent-set budget=N or
    budget='$N'): more comes out of the account it was carved from (refused beyond what
    that one has left), less gives that account back what is no longer the agent's to
    spend; an agent charged to another's account gets one of its own, carved out of
    that one. In the account's unit: no rate turns tokens into dollars."""
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        wanted = Budget(wanted, "tokens")
    if not isinstance(wanted, Budget) or not isinstance(wanted.amount, int) \
            or isinstance(wanted.amount, bool) or wanted.amount < 1:
        raise UsageError(f"bad budget: {wanted!r} (want a positive number of tokens, "
                         "or of dollars)")
    paying = source(conn, agent)
    if agent["budget_id"] != agent["id"]:
        if paying is not None:
            carve(conn, registry.get(conn, paying), wanted)     # in the payer's unit
        accounts.set_budget(conn, agent["id"], wanted.amount, wanted.unit)
        return
    if unit(agent) != wanted.unit:
        raise UsageError(f"budget {wanted}: the account of {registry.label(agent)} counts "
                         f"{voice.UNITS[unit(agent)]} (give a budget in "
                         f"{voice.UNITS[unit(agent)]})")
    spent, old = agent["spent"], agent["budget"]
    more = max(wanted.amount - spent, 0) - max(old - spent, 0)  # what it may spend, from now
    if more > 0 and paying is not None:
        carve(conn, registry.get(conn, paying), Budget(more, wanted.unit))
    elif more < 0 and paying is not None:
        accounts.grow(conn, paying, -more)
    accounts.set_budget(conn, agent["id"], wanted.amount, wanted.unit)


def tokens_charged(usage):
    """The tokens a call is charged in a token account: all it processed but the prompt
    tokens read from the provider's cache."""
    return (usage.get("input_tokens", 0) - usage.get("cache_read_tokens", 0)
            + usage.get("output_tokens", 0))


def charge(conn, agent_id, usage, cost):
    """Charge a model call (its usage, and its cost in micros or None) to the agent's
    account, in the account's unit; tell the owner's parent when this call exhausts
    it. The caller holds the transaction."""
    account_id = accounts.charged_to(conn, agent_id)
    if account_id is None:
        return
    before = registry.get(conn, account_id)
    amount = (cost or 0) if unit(before) == "usd" else tokens_charged(usage)
    if not amount:
        return
    accounts.spend(conn, account_id, amount)
    after = registry.get(conn, account_id)
    if not is_exhausted(before) and is_exhausted(after):
        notify(conn, after, agent_id)


def notify(conn, acc, agent_id):
    """Record the exhaustion (an event that holds the budget it reached) and mail
    the supervisor of the account's owner (mail.supervisor: the owner may have exited)."""
    events.record(conn, acc["id"], "budget", agent_id, spent=acc["spent"], budget=acc["budget"],
                  unit=acc["budget_unit"])
    by = None if agent_id == acc["id"] else agent_id
    by_label = by and registry.label(registry.get(conn, agent_id))
    mail.tell_supervisor(conn, registry.get(conn, acc["id"]),
                         voice.budget_notice(registry.label(acc), acc["id"], acc["spent"],
                                             acc["budget"], by_label, by, unit(acc)), "budget")


def notified(conn, acc):
    """Whether the exhaustion at the account's current budget was told."""
    told = events.latest(conn, acc["id"], "budget")
    return told is not None and told.get("budget") == acc["budget"]


def refusal(conn, agent):
    """The one-line reason a turn of `agent` may not start, or None; tells
    the parent when no one was told of this exhaustion yet."""
    acc = account(conn, agent)
    if not is_exhausted(acc):
        return None
    if not notified(conn, acc):
        notify(conn, acc, agent["id"])
    owner = "" if acc["id"] == agent["id"] else f"account of {registry.label(acc)}: "
    return f"{registry.label(agent)}: over budget ({owner}{words(acc)})"


def _heir(conn, account_id):
    """The account that takes back what `account_id` has left: the one it was carved
    out of (its owner's fork parent's account), or, when no one alive is charged to
    that one any more, the next one up; None at an agent without a budget."""
    while True:
        above = accounts.carved_from(conn, account_id)
        if above is None or accounts.in_use(conn, above):
            return above
        account_id = above


def give_back(conn, agent):
    """After `agent` exited: once no living agent is charged to its account (its
    own, or the one it shares), what the account has left goes back up (_heir).
    A cascade ends the deepest agents first, so each account gives back to the
    one just above it, which gives back in turn as its own owner exits."""
    account_id = agent["budget_id"]
    if account_id is None or accounts.in_use(conn, account_id):
        return
    acc = registry.get(conn, account_id)
    left = acc["budget"] - acc["spent"]
    heir = _heir(conn, account_id) if left > 0 else None
    if heir is None:
        return
    accounts.grow(conn, heir, left)
    accounts.close(conn, account_id)
