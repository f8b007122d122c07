"""agent-merge: apply a child's changes to its parent's workspace, or the real directory."""

import click

from agentctl.cli.options import complete_agents
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import warn
from agentctl.errors import UsageError
from agentctl.store import registry
from agentctl.workspace import merge as merging


@program("agent-merge")
@click.option("--theirs", is_flag=True,
              help="Where a path changed on both sides, take the child's.")
@click.option("--ours", is_flag=True,
              help="Where a path changed on both sides, keep the target's (merge the rest).")
@click.option("--only", "only", multiple=True, metavar="PATH",
              help="Merge PATH (and what is under it) alone (repeatable).")
@click.option("-n", "--dry-run", is_flag=True,
              help="Print the paths it would change, one a line, and change nothing.")
@click.argument("agent", shell_complete=complete_agents)
def cli(db_path, theirs, ours, only, dry_run, agent):
    """Apply what AGENT changed in its workspace since its fork to its parent's
    layer, or, when its parent has no layer over that directory (a child of init),
    to the real directory; print the paths changed, one a line.

    A path changed on both sides since the fork is a conflict: nothing is
    applied, the paths are printed one a line, and the exit status is 3. The
    merge is atomic: a crash leaves the target as it was or, once any agentctl
    program has run, wholly merged.
    """
    if theirs and ours:
        raise UsageError("--theirs and --ours go one at a time")
    conn = connect(db_path, create=False)
    child = registry.resolve(conn, agent)
    try:
        made = merging.merge(conn, actor(conn), child, only=only, dry_run=dry_run,
                             side="theirs" if theirs else "ours" if ours else None)
    except merging.Conflict as e:
        for path in e.paths:
            click.echo(path)
        raise
    for path, why in made.skipped:
        warn("agent-merge", f"{path}: not merged: {why}")
    for path, _, _ in made.steps:
        click.echo(path)
    return 0


def main(argv=None):
    return run(cli, argv)
