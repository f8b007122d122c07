"""agent-why: every reason an agent is not running a turn now."""

import click

from agentctl import clock
from agentctl.cli.options import complete_agents
from agentctl.cli.program import connect, program, run
from agentctl.ops import why
from agentctl.store import registry


@program("agent-why")
@click.argument("agent", shell_complete=complete_agents)
def cli(db_path, agent):
    """Print every reason AGENT is not running a turn now, one a line (claimed by
    a run, stopped, paused on a request, budget spent, held after a failure or
    in a mail loop, backing off, nothing pending, deferred mail, a timer ...); or,
    when the next agent-run --all would start one, what it would take.

    Exit 0 when agent-run --all would start (or resume) a turn of AGENT now,
    1 when not. It only reads: it changes nothing.
    """
    conn = connect(db_path, create=False)
    lines, ready = why.verdict(conn, registry.resolve(conn, agent), clock.now())
    for line in lines:
        click.echo(line)
    return 0 if ready else 1


def main(argv=None):
    return run(cli, argv)
