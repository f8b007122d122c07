"""agent-log: the event log, listed or followed."""

import sys
import time

import click

from agentctl import clock, money
from agentctl.cli.options import Count, complete_agents, complete_words, output_options
from agentctl.cli.output import Column, pick, render
from agentctl.cli.program import connect, program, run
from agentctl.cli.stdio import PipeClosed, for_terminal, reader_gone
from agentctl.errors import UsageError
from agentctl.ids import short
from agentctl.settings import Budget
from agentctl.store import events, registry
from agentctl.store.db import data_version, snapshot, transaction

FORMATS = ("text", "tsv", "json", "jsonl")
FOLLOW_LAST = 10        # what -f shows first, as tail -f does
POLL_SECONDS = 0.1      # how often a follower looks for commits: PRAGMA data_version


@program("agent-log")
@click.option("--tree", is_flag=True, help="Include the AGENTs' descendants.")
@click.option("--kind", "kinds", metavar="KINDS", multiple=True,
              shell_complete=complete_words(events.KINDS),
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
    unknown = [k for k in kinds or () if k not in events.KINDS]
    if unknown:         # a typo would list nothing, silently
        raise UsageError(f"unknown kind: {unknown[0]} (one of {', '.join(events.KINDS)})")
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
    decode = _decoder()
    version = None      # (a commit may have come since the snapshot)
    try:
        while not reader_gone(POLL_SECONDS):
            current = data_version(conn)
            if current == version:
                continue
            version = current
            batch = events.select(conn, kinds=kinds, since=since_at, after=seen)
            if not batch:
                continue
            seen = batch[-1][0]
            if grows:           # a descendant forked while we follow is followed too
                agents |= {r[1] for r in batch if r[2] == "fork"   # (agent, kind, detail, data)
                           and _fields(r, decode).get("parent") in agents}
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


class Names:
    """Agent names by id, each read once (a summary names other agents: a parent, a
    recipient, an actor)."""

    def __init__(self, conn):
        self.conn, self.known = conn, {}

    def __call__(self, agent_id):
        if agent_id is None:
            return None
        if agent_id not in self.known:
            self.known.update(registry.names(self.conn, [agent_id]))
            self.known.setdefault(agent_id, None)
        return self.known[agent_id] or short(agent_id)


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


def text_lines(rows, names):
    """The default text lines, without a dict per event: 100,000 events are listed in
    well under a second."""
    decode, stamps, out = _decoder(), {}, []
    for seq, agent_id, kind, detail, actor, created, data, name in rows:
        second = int(created)
        stamp = stamps.get(second)
        if stamp is None:
            stamp = stamps[second] = local(second)
        event = {"kind": kind, "detail": detail, "actor": actor}
        text = summary(event, events.fields(kind, detail, decode(data) if data else None),
                       names)
        out.append(f"{stamp}  {name or short(agent_id):<12}  {kind:<10}  {text}".rstrip()
                   + "\n")
    return "".join(out)


def _fields(row, decode):
    """An event's fields by name (store.events.fields) from its row."""
    return events.fields(row[2], row[3], decode(row[6]) if row[6] else None)


def _decoder():
    """The C scanner itself: json.loads' checks of whitespace around the object cost
    more than the scan, and agentctl writes the payloads (one object, no space)."""
    import json
    scan = json.JSONDecoder().scan_once
    return lambda text: scan(text, 0)[0]


WIDTHS = {"name": 12, "kind": 10, "agent": 8}     # so that the summaries line up


def line(event, shown):
    return "  ".join(c.text(event).ljust(WIDTHS.get(c.key, 0)) for c in shown).rstrip()


def item(row, names):
    seq, agent_id, kind, detail, actor, created, data, name = row
    data = _decoder()(data) if data else None
    event = {"id": seq, "seq": seq, "time": created, "agent": agent_id, "name": name,
             "kind": kind, "actor": actor, "detail": detail, "data": data}
    event["summary"] = summary(event, events.fields(kind, detail, data), names)
    return event


def summary(e, d, names):
    """The line of the text format: event `e` (its kind and actor) with `d`, its fields
    by name (store.events.fields)."""
    kind = e["kind"]
    turn = f" (turn {d['turn']})" if d.get("turn") else ""
    if kind == "fork":
        parent = d.get("parent")
        about = ", ".join(x for x in (d.get("role"), d.get("model") and f"model {d['model']}")
                          if x)
        return f"forked from {names(parent)}" + (f" ({about})" if about else "")
    if kind == "turn-start":
        return f"turn {d.get('turn')} started" + (f", model {d['model']}" if d.get("model") else "")
    if kind == "turn-end":
        text = (f"turn {d.get('turn')} {d.get('outcome')}: {plural(d.get('steps', 0), 'step')}, "
                f"{tokens(d)}{cost(d.get('cost'), d.get('unpriced'), d.get('steps'))}, "
                f"{d.get('seconds', 0):.1f}s")
        if d.get("mail_read"):
            text += f", {d['mail_read']} mail read"
        return text + (f": {d['error']}" if d.get("error") else "")
    if kind == "call":
        model = f" {d['model']}" if d.get("model") else ""
        estimated = " (estimated)" if d.get("estimated") else ""
        return (f"model call{model}: {tokens(d)}{estimated}"
                f"{cost(d.get('cost'), d.get('cost') is None, 1)}{turn}")
    if kind == "tool":
        return f"{d.get('tool')} {d.get('outcome')} in {d.get('seconds', 0):.2f}s{turn}"
    if kind == "mail":
        if "count" in d:
            return f"sent {d['count']} mails, ids {d['first']}-{d['last']}"
        what = {"exit": "an exit notice", "budget": "a budget notice",
                "failure": "a failure notice"}.get(d.get("type"), "mail")
        text = f"sent {what} {d.get('mail')} to {names(d.get('to'))}"
        return text + (f", due {clock.iso(d['at'])}" if d.get("at") else "")
    if kind == "read":
        ids = f"{d['first']}" if d.get("first") == d.get("last") else \
            f"{d.get('first')}-{d.get('last')}"
        return f"read {d.get('count')} mail (id{'s' if d.get('count') != 1 else ''} {ids}){turn}"
    if kind == "signal":
        by = f" from {names(e['actor'])}" if e["actor"] else ""
        return f"{d.get('signal')}{by}"
    if kind == "status":
        return f"{d.get('old')} -> {d.get('new')}{turn}"
    if kind == "exit":
        how = f"killed by {d['signal']}" if d.get("signal") else f"exited {d.get('code')}"
        return how + (f" (became {d['status']})" if d.get("status") else "")
    if kind == "reparent":
        old, new = d.get("old"), d.get("new")
        return f"parent {names(old)} exited: now a child of {names(new)}"
    if kind == "reap":
        return "collected by a waiter" if d.get("by", "wait") == "wait" else \
            "collected: nobody waited within --reap-after"
    if kind == "compaction":
        return f"context compacted{turn}"
    if kind == "timer":
        return f"timer set for {clock.iso(d['at'])}" if d.get("at") else "timer set"
    if kind == "wake":
        return f"woken by its timer{turn}"
    if kind == "budget":
        if "budget" not in d:
            return "budget exhausted"
        unit = d.get("unit") or "tokens"
        return f"budget exhausted: {Budget(d['spent'], unit)} of {Budget(d['budget'], unit)}"
    if kind == "ask":
        what = f"for approval to run {d['tool']}" if d.get("tool") else "a question"
        return f"asked {what}: request {d.get('request')}"
    if kind == "answer":
        by = f" by {names(e['actor'])}" if e["actor"] else ""
        return f"request {d.get('request')} {d.get('decision')}{by}"
    if kind == "restart":
        text = f"restart {d.get('count')} of {d.get('limit')}, next try in {d.get('delay', 0):g}s"
        return text + (f": {d['error']}" if d.get("error") else "")
    if kind == "throttle":
        until = f" until {clock.iso(d['until'])}" if d.get("until") else ""
        return f"endpoint {d.get('endpoint')} throttled{until}: {d.get('reason')}"
    if kind == "recover":
        return f"endpoint {d.get('endpoint')} recovered after {d.get('seconds', 0):.1f}s"
    return e["detail"] or ""


def tokens(d):
    """A call's or a turn's tokens: input+output, and the input's part read from the
    provider's cache and written to it."""
    text = f"{d.get('input_tokens', 0)}+{d.get('output_tokens', 0)} tokens"
    parts = [f"{d[k]} {w}" for k, w in (("cache_read_tokens", "cached"),
                                         ("cache_write_tokens", "written")) if d.get(k)]
    return text + (f" ({', '.join(parts)})" if parts else "")


def cost(dollars, unpriced, calls):
    """', $0.0123' (+? when some calls had no price), ', unpriced' when none had one;
    nothing for no call (a turn written before costs were)."""
    if dollars is None:
        return ", unpriced" if unpriced and calls else ""
    return f", {money.shown(money.of_dollars(dollars))}" + ("+?" if unpriced else "")


def plural(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def local(t):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


COLUMNS = [
    Column("seq", "SEQ"),
    Column("time", "TIME", human=lambda r: local(r["time"])),
    Column("agent", "AGENT", human=lambda r: short(r["agent"])),
    Column("name", "NAME", human=lambda r: r["name"] or short(r["agent"]),
           machine=lambda r: r["name"]),
    Column("kind", "KIND"),
    Column("summary", "SUMMARY"),
    Column("actor", "ACTOR"),
    Column("detail", "DETAIL"),
    Column("data", "DATA", human=lambda r: "-" if r["data"] is None else json_text(r["data"])),
]


def json_text(value):
    import json
    return json.dumps(value, ensure_ascii=False)
DEFAULT = ["time", "name", "kind", "summary"]
MACHINE = ["seq", "time", "agent", "name", "kind", "actor", "data", "summary"]


def main(argv=None):
    return run(cli, argv)
