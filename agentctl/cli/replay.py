"""agent-replay: the context an agent's next turn will see."""

import json
import sys

import click

from agentctl.cli.options import complete_agents
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import for_terminal
from agentctl.errors import UsageError
from agentctl.ops import authority
from agentctl.store import history, registry
from agentctl.turn import context


@program("agent-replay")
@click.option("--format", "fmt", metavar="FORMAT",
              type=click.Choice(["text", "jsonl", "openai"]),
              help="text (default), jsonl, or openai (the Chat Completions messages array).")
@click.option("--ranges", is_flag=True,
              help="Print the computed ranges (agent, after, through) instead.")
@click.option("--full", is_flag=True,
              help="Every message ever recorded in AGENT's line, past clears and compactions.")
@click.argument("agent", shell_complete=complete_agents)
def cli(db_path, fmt, ranges, full, agent):
    """Reconstruct AGENT's context: walk back to the latest clear or
    compaction, then play the ranges forwards."""
    if ranges and (full or fmt):
        raise UsageError(f"--ranges and {'--full' if full else '--format'} don't go together "
                         "(the ranges are of the context, one tab-separated line each)")
    if full and fmt == "openai":
        raise UsageError("--full is the record, not a context: use it with text or jsonl")
    fmt = fmt or "text"
    conn = connect(db_path, create=False)
    target = registry.resolve(conn, agent)
    authority.check(conn, actor(conn), target, "replay")
    if ranges:
        for owner, after, through in history.ranges(conn, target):
            click.echo(f"{owner}\t{after}\t{'-' if through is None else through}")
        return
    if full:
        system, rows = target["system_prompt"], history.full(conn, target)
    else:
        system, rows = context.build(conn, target)
    if fmt == "openai":
        sys.stdout.write(json.dumps(context.as_openai(system, rows), indent=2,
                                    ensure_ascii=False) + "\n")
    elif fmt == "jsonl":
        sys.stdout.write("".join(json.dumps(r, ensure_ascii=False) + "\n"
                                 for r in context.as_records(system, rows)))
    else:
        sys.stdout.write(for_terminal(context.as_text(system, rows,
                                                      context.owner_names(conn, rows))))


def main(argv=None):
    return run(cli, argv)
