"""agent-kill: signal agents."""

import click

from agentctl.cli import exited
from agentctl.cli.options import Seconds, complete_agents, complete_words
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import stdin_words, warn
from agentctl.errors import AgentctlError, Refused, UsageError
from agentctl.ops import deadlines, lifecycle, signals
from agentctl.store import registry
from agentctl.store.db import transaction


def _hint(word):
    """kill(1)'s -9 or -KILL: agent-kill's -s."""
    try:
        return f"use -s {signals.parse(word.lstrip('-'))}"
    except UsageError:
        return None


@program("agent-kill", hint=_hint)
@click.option("-s", "--signal", "sig", default="TERM", metavar="SIG", show_default=True,
              shell_complete=complete_words(signals.NAMES),
              help="TERM, KILL, STOP, CONT or HUP (also SIGTERM, 15, ...).")
@click.option("--cascade", is_flag=True, help="Signal every descendant too.")
@click.option("--grace", type=Seconds(), metavar="SECONDS",
              help="With TERM: KILL each agent that has not exited SECONDS later.")
@click.option("--wait", "wait", type=Seconds(), metavar="SECONDS",
              help="Wait up to SECONDS until each agent has exited, and say how "
                   "(exit 1 if one has not).")
@click.argument("agents", nargs=-1, metavar="AGENT...", shell_complete=complete_agents)
def cli(db_path, sig, cascade, grace, wait, agents):
    """Signal each AGENT; with no AGENT, read ids from stdin."""
    sig = signals.parse(sig)
    if grace is not None and sig != "TERM":
        raise UsageError(f"--grace goes with TERM (the KILL that follows it), not {sig}")
    targets = stdin_words(agents)
    conn = connect(db_path, create=False)
    me = actor(conn)
    deadlines.carry_out(conn)
    status, signalled = 0, []
    for ref in targets:
        try:
            signalled.append(signal(conn, me, ref, sig, cascade=cascade, grace=grace))
        except AgentctlError as e:
            warn("agent-kill", str(e))
            status = status or e.code
    if wait is not None and signalled:
        ended, pending = lifecycle.wait(conn, signalled, timeout=wait, reap_them=False,
                                        tick=lambda: deadlines.carry_out(conn),
                                        next_due=lambda: deadlines.next_due(conn))
        exited.listed(ended, None, ["id", "name", "status"])
        for agent_id in pending:
            warn("agent-kill", f"{registry.label(registry.get(conn, agent_id))}: "
                               f"still running after {wait:g} s")
        status = status or (1 if pending else 0)
    return status


def signal(conn, me, ref, sig, *, cascade=False, grace=None):
    """Signal the agent `ref` (with `cascade`, its descendants too) as `me` (None: the
    operator) may, in a transaction of its own; its id. Refused when the agent itself
    could not be signalled."""
    target = registry.resolve(conn, ref)
    with transaction(conn):
        refusal = signals.send(conn, me, target["id"], sig, cascade=cascade, grace=grace)
    if refusal:
        raise Refused(refusal)
    return target["id"]


def main(argv=None):
    return run(cli, argv)
