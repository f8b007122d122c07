"""agent-why: every reason an agent is not running a turn now."""

import click

from agentctl import clock
from agentctl.cli.options import complete_agents
from agentctl.cli.program import connect, program, run
from agentctl.ops import proctable, why
from agentctl.store import registry


@program("agent-why")
@click.argument("agent", shell_complete=complete_agents)
def cli(db_path, agent):
    """Print every reason AGENT is not running a turn now, one a line (claimed by
    a run, stopped, paused on a request, budget spent, held after a failure,
    backing off, nothing pending, deferred mail, a timer ...); or, when the
    next agent-run --all would start one, what it would take.

    Exit 0 when agent-run --all would start (or resume) a turn of AGENT now,
    1 when not. It only reads: it changes nothing.
    """
    conn = connect(db_path, create=False)
    row = registry.resolve(conn, agent)
    now = clock.now()
    parent = registry.get(conn, row["parent_id"]) if row["parent_id"] else None
    # as agent-ps sees it: a grace period that has ended is the exit its KILL makes
    seen = proctable.seen(dict(row) | {"parent_status": parent and parent["status"]}, now)
    lines = why.reasons(conn, seen, now)
    ready = not lines and why.ready(conn, row, now)
    for line in lines or [why.pending(conn, row, now)]:
        click.echo(line)
    return 0 if ready else 1


def main(argv=None):
    return run(cli, argv)
