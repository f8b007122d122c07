"""agent-ps: the process table."""

import click

from agentctl import money, settings
from agentctl.clock import age, iso, until
from agentctl.cli.graph import graph
from agentctl.cli.options import complete_agents, complete_words, output_options
from agentctl.cli.output import Column, pick, render
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
    says why), a ! one whose tools run unconfined.
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
    rows = proctable.rows(conn, everything=everything, statuses=statuses,
                          parent=parent_id, role=role)
    if fmt == "dot":        # a picture of the agents listed: no columns to choose
        return graph(conn, rows)
    if forest:
        rows = proctable.as_tree(rows)
    default = DEFAULT
    if forest:      # a table shows spent/budget as one column; a machine, two values
        default = LONG + (["spent"] if fmt != "table" else [])
        if fmt == "table":
            proctable.mark_providers(conn, rows)
            if any(r["provider"] for r in rows):
                default = default + ["provider"]    # who waits for its provider, when any does
    chosen = pick(COLUMNS, columns, default)
    if any(c.key in ("provider", "provider_until") for c in chosen) and \
            not (forest and fmt == "table"):    # (only then: it reads the endpoints)
        proctable.mark_providers(conn, rows)
    keys = [c.key for c in chosen]
    if "tree_cost" in keys and "tree_unpriced" not in keys and fmt != "table":
        # a machine reads a total as whole only beside the calls it lacks (the table's +?)
        chosen.insert(keys.index("tree_cost") + 1, BY_KEY["tree_unpriced"])
    if "tree_cost" in keys or "tree_unpriced" in keys:  # (only then: it reads every agent)
        mark_tree_costs(conn, rows)
    if forest and fmt != "table" and not any(c.key == "depth" for c in chosen):
        chosen = chosen + [Column("depth", "DEPTH")]
    render(rows, chosen, fmt=fmt, quiet=quiet, null=null, no_headers=no_headers)


def _label(item):
    name = item["name"] or short(item["id"])
    depth = item.get("depth")
    return name if not depth else "    " * (depth - 1) + "\\_ " + name


def _parent(item):
    if item["parent_id"] is None:
        return "-"
    return item["parent_name"] or short(item["parent_id"])


def _budget(item):
    """SPENT/BUDGET of the account it is charged to, in its unit; an account it shares
    with an ancestor (its own use is the tokens and cost columns) is marked with that
    account's owner."""
    if item["budget"] is None:
        return "-"
    unit = item["budget_unit"] or "tokens"
    shown = f"{Budget(item['spent'], unit)}/{Budget(item['budget'], unit)}"
    if item["budget_id"] != item["id"]:
        shown += f" ({item['account_name'] or short(item['budget_id'])})"
    return shown


def _account(item, key):
    """An account's number for programs: tokens, or dollars."""
    if item["budget"] is None:
        return None
    return settings.get("budget").json(Budget(item[key], item["budget_unit"] or "tokens"))


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


def _exit(item):
    if item["exit_signal"]:
        return item["exit_signal"]
    return None if item["exit_code"] is None else str(item["exit_code"])


def _setting(name, human=None):
    """The column of a setting (agentctl.settings), shown as declared there unless
    `human` (row -> str) says otherwise."""
    setting = settings.get(name)
    return Column(name, setting.header, human=human or (lambda r: setting.text(r[name])),
                  machine=lambda r: setting.json(r[name]))


_PLACED = ("role", "model", "budget")     # settings shown among the agent's own columns
COLUMNS = [
    Column("id", "ID", human=lambda r: short(r["id"])),
    Column("name", "NAME", human=_label),
    Column("parent", "PARENT", human=_parent, machine=lambda r: r["parent_id"]),
    Column("stat", "STAT", machine=proctable.stat_text, human=proctable.stat_text),
    _setting("role"),
    Column("msgs", "MSGS"),
    Column("mail", "MAIL"),
    Column("age", "AGE", human=lambda r: age(r["age"])),
    _setting("model"),
    Column("created", "CREATED", machine=lambda r: iso(r["created_at"])),
    Column("exit_code", "EXIT", human=lambda r: _exit(r) or "-"),
    Column("signal", "SIGNAL", machine=lambda r: r["exit_signal"]),
    Column("forked_from", "FORKED_FROM",
           human=lambda r: short(r["forked_from"]) if r["forked_from"] else "-"),
    Column("fork_msg", "FORK_MSG", machine=lambda r: r["fork_msg_id"]),
    Column("wake", "WAKE", human=lambda r: until(r["wake"]), machine=lambda r: iso(r["wake"])),
    Column("budget", settings.get("budget").header, human=_budget,
           machine=lambda r: _account(r, "budget")),
    Column("spent", "SPENT", machine=lambda r: _account(r, "spent")),
    Column("budget_unit", "UNIT", machine=lambda r: r["budget"] is not None and (
        r["budget_unit"] or "tokens") or None),
    Column("tokens", "TOKENS"),
    Column("cached", "CACHED", machine=lambda r: r["tokens_cached"]),
    Column("cost", "COST", human=lambda r: money.cost_text(r["cost"], r["unpriced"]),
           machine=lambda r: money.dollars(r["cost"])),
    Column("unpriced", "UNPRICED"),
    Column("tree_cost", "TREE_COST",
           human=lambda r: money.cost_text(r["tree_cost"], r["tree_unpriced"]),
           machine=lambda r: money.dollars(r["tree_cost"])),
    Column("tree_unpriced", "TREE_UNPRICED"),
    Column("failures", "FAILURES"),
    Column("restarts", "RESTARTS"),
    Column("retry", "RETRY", human=lambda r: until(r["retry_at"]) if r["retry_at"] else "-",
           machine=lambda r: iso(r["retry_at"])),
    Column("held", "HELD", human=lambda r: "held" if r["held_at"] is not None else "-",
           machine=lambda r: iso(r["held_at"])),
    Column("failure", "FAILURE", machine=lambda r: r["last_failure"],
           human=lambda r: first_line(r["last_failure"]) or "-"),
    *(_setting(s.name) for s in settings.SETTINGS if s.header and s.name not in _PLACED),
    Column("endpoint", "ENDPOINT"),
    Column("provider", "PROVIDER", human=lambda r: _provider(r["provider"]),
           machine=lambda r: r["provider"] and r["provider"].why),
    Column("provider_until", "PROVIDER_UNTIL",
           human=lambda r: until(r["provider"].until) if r["provider"] and r["provider"].until
           else "-", machine=lambda r: r["provider"] and iso(r["provider"].until)),
]


def _provider(wait):
    """Why it waits for its provider, short: throttled (in 12s), paced (in 1s), full 2/2."""
    if wait is None:
        return "-"
    if wait.why == "full":
        return f"full {wait.busy}/{wait.count}"
    return f"{wait.why} ({until(wait.until)})"


DEFAULT = ["id", "name", "parent", "stat", "role", "msgs", "mail", "age"]
LONG = DEFAULT + ["wake", "budget"]     # -f
BY_KEY = {c.key: c for c in COLUMNS}
cli.epilog = "Columns (-o): " + " ".join(c.key for c in COLUMNS) + "."


def main(argv=None):
    return run(cli, argv)
