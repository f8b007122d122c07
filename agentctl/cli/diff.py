"""agent-diff: what an agent changed in its workspace."""

import json
import sys

import click

from agentctl.cli.options import complete_agents, complete_words
from agentctl.cli.program import actor, connect, program, run
from agentctl.errors import UsageError
from agentctl.ops import authority
from agentctl.store import registry, turnlog
from agentctl.workspace import changed, patch


@program("agent-diff")
@click.option("--base", is_flag=True,
              help="Against the real directory, not its parent's view at the fork.")
@click.option("--turn", is_flag=True,
              help="Only the paths its last turn changed (each against the fork).")
@click.option("--stat", "stat_", is_flag=True, help="A line a file: lines added and deleted.")
@click.option("--name-only", is_flag=True, help="The paths alone, one a line.")
@click.option("--format", "format_", type=click.Choice(("patch", "json")), default="patch",
              show_default=True, shell_complete=complete_words(("patch", "json")),
              help="json: one object a path (path, change, binary, mode, old_mode).")
@click.option("--binary", is_flag=True,
              help="Binary files as git's binary patches (for git apply), not named.")
@click.option("--discard", is_flag=True,
              help="Throw away what AGENT changed since its fork (print nothing).")
@click.argument("agent", shell_complete=complete_agents)
def cli(db_path, base, turn, stat_, name_only, format_, binary, discard, agent):
    """Print what AGENT changed in its workspace as a unified diff in git's format
    (for `git apply`, or `patch -p1`): against what its parent saw when it was
    forked (for a child of init: the real directory when its layer was made), or
    with --base against the real directory as it is now.

    Exit 0 whether or not there is a change, 1 when AGENT has no layer (no
    working directory, or --shared). It only reads, but with --discard, which
    throws AGENT's changes away (what it kept after it was reaped, or what it
    did and should not have).
    """
    if sum((stat_, name_only, format_ == "json", discard)) > 1:
        raise UsageError("--stat, --name-only, --format json and --discard go one at a time")
    conn = connect(db_path, create=False)
    target = registry.resolve(conn, agent)
    authority.check(conn, actor(conn), target, "read the workspace of")
    views = changed.views(conn, target, "base" if base else "fork")
    if discard:
        from agentctl.workspace import lifetime  # (start-up: 1 ms, only for --discard)
        lifetime.discard(conn, target["id"])
        return 0
    files = changed.files(views)
    if turn:
        last = turnlog.latest(conn, target["id"])
        files = changed.in_turn(views, files, last["started_at"]) if last else []
    out = sys.stdout.buffer
    if name_only:
        out.write("".join(f"{path}\n" for path, _, _ in files).encode("utf-8",
                                                                        "surrogateescape"))
    elif stat_:
        out.write(patch.stat(files).encode("utf-8", "surrogateescape"))
    elif format_ == "json":
        out.write("".join(json.dumps(patch.record(*f)) + "\n" for f in files).encode())
    else:
        out.write(patch.diff(files, full=binary))
    out.flush()
    return 0


def main(argv=None):
    return run(cli, argv)
