"""agent-wait: wait for children to exit and collect their results."""

import click

from agentctl.cli import exited
from agentctl.cli.options import Seconds, complete_agents, output_options
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import read_words, stdin_is_data
from agentctl.errors import UsageError
from agentctl.ids import INIT_ID
from agentctl.ops import authority, deadlines, lifecycle
from agentctl.store import registry


@program("agent-wait")
@click.option("--timeout", type=Seconds(), metavar="SECONDS",
              help="Give up after SECONDS (exit 1).")
@click.option("--any", "any_one", is_flag=True, help="Return when the first one exits.")
@click.option("--parent", metavar="AGENT", shell_complete=complete_agents,
              help="Wait for the children of AGENT (instead of self's).")
@output_options
@click.argument("agents", nargs=-1, metavar="[AGENT...]", shell_complete=complete_agents)
def cli(db_path, timeout, any_one, parent, fmt, columns, quiet, null, no_headers, agents):
    """Wait for each AGENT (default: every child of self; ids from stdin when
    piped) to exit; print id, status and result; reap them (Z -> X).

    Exit 0 when all exited normally, 1 on timeout, 3 when one failed or was killed.
    """
    refs = list(agents)
    if parent is not None and refs:
        raise UsageError("--parent waits for its children: give no AGENT with it")
    if not refs and parent is None and stdin_is_data():
        refs = read_words()
        if not refs:
            return 0        # an empty pipe: nothing to wait for (as xargs -r)
    conn = connect(db_path, create=False)
    me = actor(conn)
    if refs:
        targets = [registry.resolve(conn, ref) for ref in refs]
        for target in targets:
            authority.check(conn, me, target, "wait for")
        ids = [t["id"] for t in targets]
        if INIT_ID in ids:
            raise UsageError("init never exits: it can't be waited for")
        if me and me["id"] in ids:
            raise UsageError(f"{refs[ids.index(me['id'])]}: can't wait for itself ($AGENT_ID)")
    else:
        owner = registry.resolve(conn, parent) if parent else (me or registry.get(conn, INIT_ID))
        authority.check(conn, me, owner, "wait for the children of")
        owner = owner["id"]
        ids = registry.children(conn, owner)
    collected, pending = lifecycle.wait(conn, ids, timeout=timeout, any_one=any_one,
                                       actor=me["id"] if me else None,
                                       tick=lambda: deadlines.carry_out(conn),
                                       next_due=lambda: deadlines.next_due(conn))
    default = ["id", "name", "status", "result"] + (["value"] if fmt in ("json", "jsonl") else [])
    exited.listed(collected, columns, default, fmt=fmt, quiet=quiet, null=null,
                  no_headers=no_headers)
    if pending and not (any_one and collected):
        return 1
    return 3 if any(lifecycle.how(r) != "exited" for r in collected) else 0


def main(argv=None):
    return run(cli, argv)
