"""agent-log: the event log, listed or followed."""

import sys

import click

from agentctl import clock
from agentctl.cli.eventlog import COLUMNS, DEFAULT, MACHINE, Names, decoder, fields, item, \
    text_lines
from agentctl.cli.options import Count, complete_agents, complete_words, output_options
from agentctl.cli.output import pick, render
from agentctl.cli.program import connect, program, run
from agentctl.cli.stdio import PipeClosed, for_terminal, reader_gone
from agentctl.errors import UsageError
from agentctl.eventkinds import KINDS
from agentctl.store import events, registry
from agentctl.store.db import snapshot, transaction
from agentctl.store.waits import commits

FORMATS = ("text", "tsv", "json", "jsonl")
FOLLOW_LAST = 10        # what -f shows first, as tail -f does
POLL_SECONDS = 0.1      # how often a follower looks for commits: PRAGMA data_version


@program("agent-log")
@click.option("--tree", is_flag=True, help="Include the AGENTs' descendants.")
@click.option("--kind", "kinds", metavar="KINDS", multiple=True,
              shell_complete=complete_words(KINDS),
              help="Only events of these kinds (comma-separated, or repeated).")
@click.option("--since", metavar="TIME",
              help="Only events from TIME on (as agent-send --at takes it, or a duration "
                   "ago: 10m, 2h).")
@click.option("--after", type=Count(0), metavar="SEQ",
              help="Only events numbered above SEQ (resume where a script stopped).")
@click.option("-n", "--lines", "last", type=Count(0), metavar="N",
              help="Only the last N events (with -f: the N shown first, default 10).")
@click.option("-f", "--follow", is_flag=True,
              help="Then print new events as they are committed, until interrupted.")
@click.option("--prune-before", metavar="TIME",
              help="Delete the events from before TIME, and print how many (the "
                   "newest and each account's latest budget event stay).")
@output_options(formats=FORMATS, default="text")
@click.argument("refs", nargs=-1, metavar="[AGENT...]", shell_complete=complete_agents)
def cli(db_path, tree, kinds, since, after, last, follow, prune_before, fmt, columns, quiet,
        null, no_headers, refs):
    """Print the event log, oldest first: every agent's, or each AGENT's (with
    --tree, and its descendants'). One line per event in text: local time,
    agent, kind, a summary.

    Columns: seq time agent name kind summary (default), and actor detail data
    with -o; -q prints sequence numbers.
    """
    if prune_before is not None:
        if refs or tree or kinds or since or after is not None or last is not None or follow:
            raise UsageError("--prune-before goes with no other option")
        return prune(db_path, prune_before)
    if follow and fmt == "json":
        raise UsageError("-f prints events as they come: use --format jsonl, not json")
    kinds = [k.strip() for spec in kinds for k in spec.split(",") if k.strip()] or None
    unknown = [k for k in kinds or () if k not in KINDS]
    if unknown:         # a typo would list nothing, silently
        raise UsageError(f"unknown kind: {unknown[0]} (one of {', '.join(KINDS)})")
    conn = connect(db_path, create=False)
    agents = None
    if refs:
        chosen = [registry.resolve(conn, ref) for ref in refs]
        agents = {a["id"] for a in chosen}
        if tree:
            for a in chosen:
                agents |= {d["id"] for d in registry.descendants(conn, a["id"])}
    elif tree:
        raise UsageError("--tree goes with an AGENT")
    shown = pick(COLUMNS, columns, DEFAULT if fmt == "text" else MACHINE)
    names = Names(conn)
    options = dict(fmt=fmt, quiet=quiet, null=null)
    since_at = starting(since) if since is not None else None
    if last is None and follow:
        last = FOLLOW_LAST
    with snapshot(conn):        # what is printed first, and where following starts
        rows = events.select(conn, agents=sorted(agents) if agents is not None else None,
                             kinds=kinds, since=since_at, after=after, last=last)
        newest = events.newest(conn)
    print_events(rows, shown, names, header=not no_headers, **options)
    if not follow:
        return 0
    seen = max(newest, after or 0)
    grows = agents is not None and tree
    decode = decoder()
    try:    # at once (a commit may have come since the snapshot), then at each commit
        for _ in commits(conn, pause=reader_gone, most=POLL_SECONDS):
            batch = events.select(conn, kinds=kinds, since=since_at, after=seen)
            if not batch:
                continue
            seen = batch[-1][0]
            if grows:           # a descendant forked while we follow is followed too
                agents |= {r[1] for r in batch if r[2] == "fork"   # (agent, kind, detail, data)
                           and fields(r, decode).get("parent") in agents}
            print_events([r for r in batch if agents is None or r[1] in agents],
                         shown, names, header=False, **options)
    except KeyboardInterrupt:
        return 0        # ^C ends a follower, as it ends tail -f: nothing to say
    raise PipeClosed()


def starting(text):
    """--since: a time as agent-send --at takes it (a clock time is the latest one
    past), or a duration ago."""
    now = clock.now()
    try:
        return now - clock.parse_duration(text)
    except UsageError:
        pass
    when = clock.parse_time(text, now)
    return when - 86400 if when > now else when


def prune(db_path, before):
    starting(before)                    # a bad time is a usage error before the database
    conn = connect(db_path, create=False)
    cut = starting(before)              # by the database's clock, known once connected
    with transaction(conn):
        count = events.prune(conn, cut)
    click.echo(count)
    return 0


def print_events(rows, shown, names, *, header, fmt, quiet, null):
    """Render rows as they come."""
    if not rows:
        return
    if fmt == "text" and (quiet or null):       # -0 implies -q, as for the others' table
        end = "\0" if null else "\n"
        sys.stdout.write("".join(f"{row[0]}{end}" for row in rows))
    elif fmt == "text" and [c.key for c in shown] == DEFAULT:
        sys.stdout.write(for_terminal(text_lines(rows, names)))
    elif fmt == "text":
        sys.stdout.write(for_terminal("".join(line(item(row, names), shown) + "\n"
                                              for row in rows)))
    else:
        render([item(row, names) for row in rows], shown, fmt=fmt, quiet=quiet, null=null,
               no_headers=not header)
    sys.stdout.flush()


WIDTHS = {"name": 12, "kind": 10, "agent": 8}     # so that the summaries line up


def line(event, shown):
    return "  ".join(c.text(event).ljust(WIDTHS.get(c.key, 0)) for c in shown).rstrip()


def main(argv=None):
    return run(cli, argv)
