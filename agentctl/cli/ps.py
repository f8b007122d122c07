"""agent-ps: the process table."""

import click

from agentctl import settings
from agentctl.clock import age, iso, until
from agentctl.cli.options import complete_agents, complete_words, output_options
from agentctl.cli.output import Column, pick, render
from agentctl.cli.program import connect, program, run
from agentctl.errors import UsageError
from agentctl.ids import ROLES, short
from agentctl.ops import proctable
from agentctl.store import registry


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
    budget, spent in machine formats, and in the table provider when an agent
    waits for its provider), and model created exit_code signal forked_from
    fork_msg wake budget spent tokens failures restarts retry failure allow ask
    cwd unconfined endpoint provider provider_until with -o.
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
    conn = connect(db_path)
    parent_id = registry.resolve(conn, parent)["id"] if parent else None
    rows = proctable.rows(conn, everything=everything, statuses=statuses,
                          parent=parent_id, role=role)
    if fmt == "dot":        # a picture of the agents listed: no columns to choose
        from agentctl.cli.graph import graph    # (start-up: only for a picture)
        return graph(conn, rows)
    if forest:
        rows = as_tree(rows)
    default = DEFAULT
    if forest:      # a table shows spent/budget as one column; a machine, two values
        default = LONG + (["spent"] if fmt != "table" else [])
        if fmt == "table" and any(r["provider"] for r in rows):
            default = default + ["provider"]    # who waits for its provider, when any does
    chosen = pick(COLUMNS, columns, default)
    if any(c.key == "unconfined" for c in chosen):      # (only then: it reads the tool path)
        mark_unconfined(conn, rows)
    if forest and fmt != "table" and not any(c.key == "depth" for c in chosen):
        chosen = chosen + [Column("depth", "DEPTH")]
    render(rows, chosen, fmt=fmt, quiet=quiet, null=null, no_headers=no_headers)


def as_tree(items):
    """Rows in depth-first order by lifecycle parent, each with a depth; a row
    whose parent is not listed is a root."""
    present = {item["id"] for item in items}
    children = {}
    roots = []
    for item in items:
        if item["parent_id"] in present and item["parent_id"] != item["id"]:
            children.setdefault(item["parent_id"], []).append(item)
        else:
            roots.append(item)
    ordered = []
    stack = [(root, 0) for root in reversed(roots)]
    while stack:
        item, depth = stack.pop()
        item["depth"] = depth
        ordered.append(item)
        stack.extend((child, depth + 1) for child in reversed(children.get(item["id"], [])))
    return ordered


def _label(item):
    name = item["name"] or short(item["id"])
    depth = item.get("depth")
    return name if not depth else "    " * (depth - 1) + "\\_ " + name


def _parent(item):
    if item["parent_id"] is None:
        return "-"
    return item["parent_name"] or short(item["parent_id"])


def _budget(item):
    """SPENT/BUDGET of the account it is charged to; an account it shares with an
    ancestor (its own use is the tokens column) is marked with that account's owner."""
    if item["budget"] is None:
        return "-"
    shown = f"{item['spent']}/{item['budget']}"
    if item["budget_id"] != item["id"]:
        shown += f" ({item['account_name'] or short(item['budget_id'])})"
    return shown


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


COLUMNS = [
    Column("id", "ID", human=lambda r: short(r["id"])),
    Column("name", "NAME", human=_label),
    Column("parent", "PARENT", human=_parent, machine=lambda r: r["parent_id"]),
    Column("stat", "STAT", machine=lambda r: r["status"]),
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
    _setting("budget", human=_budget),
    Column("spent", "SPENT", machine=lambda r: None if r["budget"] is None else r["spent"]),
    Column("tokens", "TOKENS"),
    Column("failures", "FAILURES"),
    Column("restarts", "RESTARTS"),
    Column("retry", "RETRY", human=lambda r: until(r["retry_at"]) if r["retry_at"] else "-",
           machine=lambda r: iso(r["retry_at"])),
    Column("failure", "FAILURE", machine=lambda r: r["last_failure"],
           human=lambda r: (r["last_failure"] or "-").split("\n", 1)[0][:60]),
    _setting("allow"),
    _setting("ask"),
    _setting("cwd"),
    Column("unconfined", "UNCONFINED", human=lambda r: "YES" if r["unconfined"] else "-"),
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


def mark_unconfined(conn, rows):
    """Whether each agent may use a tool that can do whatever the operator's user can
    (tools.catalog, imported only for -o unconfined)."""
    from agentctl.tools.catalog import Catalog  # (start-up: only for -o unconfined)
    catalog = Catalog(strict=True)
    for row in rows:
        row["unconfined"] = bool(row["allow"]) and catalog.usable(conn, row["id"]).unconfined()


DEFAULT = ["id", "name", "parent", "stat", "role", "msgs", "mail", "age"]
LONG = DEFAULT + ["wake", "budget"]     # -f


def main(argv=None):
    return run(cli, argv)
