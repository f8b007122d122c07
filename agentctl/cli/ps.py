"""agent-ps: the process table."""

import click

from agentctl import clock, money, settings
from agentctl.clock import age, iso, until
from agentctl.cli.graph import graph
from agentctl.cli.options import complete_agents, complete_words, output_options
from agentctl.cli.output import Table, Whole, each, ids_only, pick, render
from agentctl.cli.program import connect, program, run
from agentctl.errors import UsageError
from agentctl.ids import ROLES, short
from agentctl.ops import proctable
from agentctl.settings import Budget
from agentctl.store import proctable as stored, registry
from agentctl.text import first_line


@program("agent-ps")
@click.option("-a", "--all", "everything", is_flag=True, help="Include dead agents (X).")
@click.option("-f", "--forest", is_flag=True, help="A tree by lifecycle parent.")
@click.option("--parent", metavar="AGENT", shell_complete=complete_agents, help="Only the children of AGENT.")
@click.option("--status", metavar="STATS", help="Only these statuses, e.g. S or S,T or ZX.")
@click.option("--role", metavar="ROLE",
              shell_complete=complete_words(ROLES + ("kernel",)), help="Only agents of this role.")
@output_options(formats=("table", "tsv", "json", "jsonl", "dot"))
def cli(db_path, everything, forest, parent, status, role, fmt, columns, quiet, null,
        no_headers):
    """List agents: all that are not dead, or with -a every agent ever forked.

    --format dot prints the agents listed as a Graphviz graph (fork and mail
    edges), for `agent-ps -a --format dot | dot -Tsvg > tree.svg`.

    Columns: id name parent stat role msgs mail age (default; -f adds wake
    budget, and spent in machine formats; in the table provider when an agent
    waits for its provider); -o picks any of those below. In the table, an H
    after STAT marks an agent held after a failure or in a mail loop (agent-why
    says why), a ! one whose tools run unconfined, a b or an f one whose model
    calls go at the batch or the flex tier (-o tier names it).
    """
    if fmt == "dot" and (columns or quiet or null or no_headers):
        raise UsageError("--format dot takes no -o, -q, -0 or --no-headers")
    statuses = None
    if status:
        statuses = [s for s in status.upper().replace(",", "") if s.strip()]
        known = registry.LIVE + registry.EXITED
        bad = [s for s in statuses if s not in known]
        if bad:
            raise UsageError(f"unknown status: {bad[0]} ({', '.join(known[:-1])} or {known[-1]})")
    conn = connect(db_path, create=False)
    parent_id = registry.resolve(conn, parent)["id"] if parent else None
    now = clock.now()
    made = {"age": each(lambda created: int(now - created), "created_at"),
            "wake": each(proctable.wake, "wake_at", "mail_at"),
            "changes": each(lambda agent_id: _changes(conn, agent_id), "id")}
    # a table shows spent/budget as one column; a machine, two values
    default = LONG + (["spent"] if fmt != "table" else []) if forest else DEFAULT
    chosen = [] if fmt == "dot" else pick(COLUMNS, columns, default)
    keys = [c.key for c in chosen]
    providers = any(k in ("provider", "provider_until") for k in keys) or \
        (forest and fmt == "table")     # (only then: it reads the endpoints)
    trees = "tree_cost" in keys or "tree_unpriced" in keys  # (only then: it reads every agent)
    by_name = fmt == "dot" or forest or providers or trees  # rows as dicts, every field
    read = proctable.FIELDS if by_name else \
        proctable.fields(["id"] if ids_only(fmt, quiet, null) else _reading(chosen, made))
    found = proctable.rows(conn, everything=everything, statuses=statuses,
                           parent=parent_id, role=role, read=read)
    if fmt == "dot":        # a picture of the agents listed: no columns to choose
        return graph(conn, proctable.items(found))
    items = proctable.items(found) if by_name else None
    if forest:
        items = proctable.as_tree(items)
    if providers:
        proctable.mark_providers(conn, items)
    if forest and fmt == "table" and columns is None and any(r["provider"] for r in items):
        chosen.append(BY_KEY["provider"])       # who waits for its provider, when any does
    if "tree_cost" in keys and "tree_unpriced" not in keys and fmt != "table":
        # a machine reads a total as whole only beside the calls it lacks (the table's +?)
        chosen.insert(keys.index("tree_cost") + 1, BY_KEY["tree_unpriced"])
    if trees:
        mark_tree_costs(conn, items)
    if forest and fmt != "table" and not any(c.key == "depth" for c in chosen):
        chosen = chosen + [Whole("depth", "DEPTH")]
    table = Table(found, read, made) if items is None else Table(items, made=made)
    render(table, chosen, fmt=fmt, quiet=quiet, null=null, no_headers=no_headers)


def _reading(chosen, made):
    """The stored fields the columns `chosen` read (each says which), or every one when
    a column can't say."""
    read = set()
    for column in chosen:
        keys = column.reads(made)
        if keys is None:
            return proctable.FIELDS
        read |= keys
    return read


def _changes(conn, agent_id):
    """How many paths it changed in its layer since its fork (None: it has none)."""
    from agentctl.workspace import changed  # (start-up: 2 ms, only for -o changes)
    return changed.count(conn, agent_id)


def _label(name, agent_id, depth):
    name = name or short(agent_id)
    return name if not depth else "    " * (depth - 1) + "\\_ " + name


def _parent(parent_id, parent_name):
    if parent_id is None:
        return "-"
    return parent_name or short(parent_id)


def _budget(budget, unit, spent, budget_id, agent_id, account_name):
    """SPENT/BUDGET of the account it is charged to, in its unit; an account it shares
    with an ancestor (its own use is the tokens and cost columns) is marked with that
    account's owner."""
    if budget is None:
        return "-"
    unit = unit or "tokens"
    shown = f"{Budget(spent, unit)}/{Budget(budget, unit)}"
    if budget_id != agent_id:
        shown += f" ({account_name or short(budget_id)})"
    return shown


def _account(key):
    """An account's number for programs: tokens, or dollars."""
    return each(lambda amount, budget, unit: None if budget is None else settings.get(
        "budget").json(Budget(amount, unit or "tokens")), key, "budget", "budget_unit")


def mark_tree_costs(conn, rows):
    """Each row's tree_cost (and tree_unpriced): its own cost and that of all its
    descendants by lifecycle parent, dead ones included (a lead and its workers)."""
    agents = stored.costs(conn)
    children = {}
    for agent_id, (parent, _, _) in agents.items():
        if parent is not None and parent != agent_id:
            children.setdefault(parent, []).append(agent_id)
    for row in rows:
        cost, unpriced, stack = None, 0, [row["id"]]
        while stack:                # the subtree: no row is ever deleted, no cycle made
            agent_id = stack.pop()
            _, own, calls = agents.get(agent_id, (None, None, 0))
            cost = cost if own is None else (cost or 0) + own
            unpriced += calls
            stack.extend(children.get(agent_id, ()))
        row["tree_cost"], row["tree_unpriced"] = cost, unpriced


def _exit(signal, code):
    if signal:
        return signal
    return None if code is None else str(code)


def _setting(name):
    """The column of a setting (agentctl.settings), shown as declared there."""
    setting = settings.get(name)
    return Whole(name, setting.header, human=each(setting.text, name),
                 machine=each(setting.json, name))


def _provider(wait):
    """Why it waits for its provider, short: throttled (in 12s), paced (in 1s), full 2/2."""
    if wait is None:
        return "-"
    if wait.why == "full":
        return f"full {wait.busy}/{wait.count}"
    return f"{wait.why} ({until(wait.until)})"


_PLACED = ("role", "model", "budget")     # settings shown among the agent's own columns
COLUMNS = [     # each reads the whole table (output.Whole): a listing may be 100,000 long
    Whole("id", "ID", human=each(short, "id")),
    Whole("name", "NAME", human=each(_label, "name", "id", "depth")),
    Whole("parent", "PARENT", human=each(_parent, "parent_id", "parent_name"),
          machine=each(None, "parent_id")),
    Whole("stat", "STAT", machine=each(proctable.stat, "status", "held_at", "unconfined",
                                       "tier"),
          human=each(proctable.stat, "status", "held_at", "unconfined", "tier")),
    _setting("role"),
    Whole("msgs", "MSGS"),
    Whole("mail", "MAIL"),
    Whole("age", "AGE", human=each(age, "age")),
    _setting("model"),
    Whole("created", "CREATED", machine=each(iso, "created_at")),
    Whole("exit_code", "EXIT",
          human=each(lambda signal, code: _exit(signal, code) or "-", "exit_signal", "exit_code")),
    Whole("signal", "SIGNAL", machine=each(None, "exit_signal")),
    Whole("forked_from", "FORKED_FROM",
          human=each(lambda source: short(source) if source else "-", "forked_from")),
    Whole("fork_msg", "FORK_MSG", machine=each(None, "fork_msg_id")),
    Whole("wake", "WAKE", human=each(until, "wake"), machine=each(iso, "wake")),
    Whole("budget", settings.get("budget").header, machine=_account("budget"),
          human=each(_budget, "budget", "budget_unit", "spent", "budget_id", "id",
                     "account_name")),
    Whole("spent", "SPENT", machine=_account("spent")),
    Whole("budget_unit", "UNIT", machine=each(lambda budget, unit: budget is not None and (
        unit or "tokens") or None, "budget", "budget_unit")),
    Whole("tokens", "TOKENS"),
    Whole("cached", "CACHED", machine=each(None, "tokens_cached")),
    Whole("cost", "COST", human=each(money.cost_text, "cost", "unpriced"),
          machine=each(money.dollars, "cost")),
    Whole("unpriced", "UNPRICED"),
    Whole("tree_cost", "TREE_COST", human=each(money.cost_text, "tree_cost", "tree_unpriced"),
          machine=each(money.dollars, "tree_cost")),
    Whole("tree_unpriced", "TREE_UNPRICED"),
    Whole("failures", "FAILURES"),
    Whole("restarts", "RESTARTS"),
    Whole("retry", "RETRY", human=each(lambda at: until(at) if at else "-", "retry_at"),
          machine=each(iso, "retry_at")),
    Whole("held", "HELD", human=each(lambda at: "held" if at is not None else "-", "held_at"),
          machine=each(iso, "held_at")),
    Whole("failure", "FAILURE", machine=each(None, "last_failure"),
          human=each(lambda failure: first_line(failure) or "-", "last_failure")),
    *(_setting(s.name) for s in settings.SETTINGS if s.header and s.name not in _PLACED),
    Whole("changes", "CHANGES", human=each(lambda n: "-" if n is None else str(n), "changes")),
    Whole("endpoint", "ENDPOINT"),
    Whole("provider", "PROVIDER", human=each(_provider, "provider"),
          machine=each(lambda wait: wait and wait.why, "provider")),
    Whole("provider_until", "PROVIDER_UNTIL",
          human=each(lambda wait: until(wait.until) if wait and wait.until else "-", "provider"),
          machine=each(lambda wait: wait and iso(wait.until), "provider")),
]


DEFAULT = ["id", "name", "parent", "stat", "role", "msgs", "mail", "age"]
LONG = DEFAULT + ["wake", "budget"]     # -f
BY_KEY = {c.key: c for c in COLUMNS}
cli.epilog = "Columns (-o): " + " ".join(c.key for c in COLUMNS) + "."


def main(argv=None):
    return run(cli, argv)
