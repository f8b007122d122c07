"""agent-kill: signal agents."""

import click

from agentctl.cli.options import complete_agents, complete_words
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import stdin_words, warn
from agentctl.errors import AgentctlError
from agentctl.ops import signals
from agentctl.store import registry


@program("agent-kill")
@click.option("-s", "--signal", "sig", default="TERM", metavar="SIG", show_default=True,
              shell_complete=complete_words(signals.NAMES),
              help="TERM, KILL, STOP, CONT or HUP (also SIGTERM, 15, ...).")
@click.option("--cascade", is_flag=True, help="Signal every descendant too.")
@click.argument("agents", nargs=-1, metavar="AGENT...", shell_complete=complete_agents)
def cli(db_path, sig, cascade, agents):
    """Signal each AGENT; with no AGENT, read ids from stdin."""
    sig = signals.parse(sig)
    targets = stdin_words(agents)
    conn = connect(db_path)
    me = actor(conn)
    status = 0
    for ref in targets:
        try:
            signals.send(conn, registry.resolve(conn, ref), sig, cascade=cascade,
                         actor=me["id"] if me else None)
        except AgentctlError as e:
            warn("agent-kill", str(e))
            status = status or e.code
    return status


def main(argv=None):
    return run(cli, argv)
