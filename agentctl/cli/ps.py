"""agent-ps: the process table."""

import click

from agentctl.cli.common import complete_agents, complete_words, connect, output_options, program, run


@program("agent-ps")
@click.option("-a", "--all", "everything", is_flag=True, help="Include dead agents (X).")
@click.option("-f", "--forest", is_flag=True, help="A tree by lifecycle parent.")
@click.option("--parent", metavar="AGENT", shell_complete=complete_agents, help="Only the children of AGENT.")
@click.option("--status", metavar="STATS", help="Only these statuses, e.g. S or S,T or ZX.")
@click.option("--role", metavar="ROLE",
              shell_complete=complete_words(["agent", "task", "worker", "lead", "architect", "daemon", "kernel"]), help="Only agents of this role.")
@output_options
def cli(db_path, everything, forest, parent, status, role, fmt, columns, quiet, null,
        no_headers):
    """List agents: all that are not dead, or with -a every agent ever forked.

    Columns: id name parent stat role msgs mail age (default; -f adds wake
    budget, and spent in machine formats), and model created exit_code signal
    forked_from fork_msg wake budget spent with -o.
    """
    from agentctl.store import proctable
    from agentctl.errors import UsageError
    from agentctl.cli.output import pick, render
    from agentctl.store.registry import resolve
    statuses = None
    if status:
        statuses = [s for s in status.upper().replace(",", "") if s.strip()]
        bad = [s for s in statuses if s not in "RSTZX"]
        if bad:
            raise UsageError(f"unknown status: {bad[0]} (R, S, T, Z or X)")
    conn = connect(db_path)
    parent_id = resolve(conn, parent)["id"] if parent else None
    rows = proctable.rows(conn, everything=everything, statuses=statuses,
                          parent=parent_id, role=role)
    if forest:
        rows = proctable.as_tree(rows)
    default = proctable.DEFAULT
    if forest:      # a table shows spent/budget as one column; a machine, two values
        default = proctable.LONG + (["spent"] if fmt != "table" else [])
    chosen = pick(proctable.COLUMNS, columns, default)
    if forest and fmt != "table" and not any(c.key == "depth" for c in chosen):
        from agentctl.cli.output import Column
        chosen = chosen + [Column("depth", "DEPTH")]
    render(rows, chosen, fmt=fmt, quiet=quiet, null=null, no_headers=no_headers)


def main(argv=None):
    return run(cli, argv)
