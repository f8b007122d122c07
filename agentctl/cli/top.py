"""agent-top: a live view of the tree of agents, with keys to signal and answer them
(the screen is cli/screen.py); a snapshot of the same view when not on a terminal."""

import sys
from typing import NamedTuple

import click

from agentctl import clock, voice
from agentctl.clock import age
from agentctl.cli import eventlog
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import CARET
from agentctl.errors import Refused
from agentctl.ids import short
from agentctl.money import cost_text
from agentctl.ops import asks, authority, deadlines, signals, top, why
from agentctl.ops.proctable import stat_text
from agentctl.store import asks as asks_store, events, registry
from agentctl.store.db import transaction
from agentctl.text import cut
from agentctl.turn import context

LOG_LAST = 500          # the events the log key shows, newest last


@program("agent-top")
@click.option("-a", "--all", "exits", is_flag=True,
              help=f"Show the agents that died in the last {top.RECENT / 3600:g} h too "
                   "(the x key toggles it).")
def cli(db_path, exits):
    """A live full-screen view of the tree of agents, as top is of processes: each
    agent's STAT, role, unread mail, age, tokens and cost (of its open turn/in
    total) and what it is doing now (a model call, which tool, paused on which
    request, backing off until when ...); the totals on top. It follows the
    database as agent-log -f does, and redraws when it changes.

    Keys: arrows, PgUp/PgDn, Home/End select; T K S C send TERM, KILL, STOP, CONT to
    the selected agent or its subtree (each asks first); a answers or approves its
    request; l shows its log, r its replayed context, w why it runs no turn; / filters,
    x shows recent exits, ? helps, q quits.

    When standard input or output is not a terminal, it prints one snapshot of the
    view (as top -b -n 1) and exits.
    """
    conn = connect(db_path, create=False)
    me = actor(conn)
    shown = Top(conn, top.View(conn, exits=exits), me)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        sys.stdout.write("".join(line + "\n" for line in shown.snapshot()))
        return 0
    from agentctl.cli import screen  # (start-up: 1.2 ms of curses, only on a terminal)
    return screen.run(shown)


class Top:
    """What the screen shows and what its keys do: the view's text, and the actions."""

    def __init__(self, conn, view, me):
        self.conn, self.view, self.me = conn, view, me

    # -- text --------------------------------------------------------------------------

    def header(self, now, pattern=None, width=None):
        """The lines above the table: the agents by state (ops.proctable.state: a held
        agent is counted held, not sleeping), the calls in flight, the tokens and cost
        of the last minute and in total. On a screen `width` columns wide the counts
        that are 0 are left out when the first line would not fit."""
        t = self.view.totals(now)
        counts = t["counts"]
        live = sum(counts.get(s, 0) for s in registry.LIVE + ("H",))
        parts = [f"{counts.get(s, 0)} {w}" for s, w in (
            ("R", "running"), ("P", "paused"), ("S", "sleeping"), ("H", "held"),
            ("T", "stopped"), ("Z", "zombie"), ("X", "dead")) if counts.get(s) or s not in "HX"]
        flight = f"in flight: {t['in_flight']} model call{'s' if t['in_flight'] != 1 else ''}"
        first = f"agents: {live} live: {', '.join(parts)}; {flight}"
        if width is not None and len(first) > width:
            parts = [p for p in parts if not p.startswith("0 ")]
            first = f"agents: {live} live: {', '.join(parts) or 'none'}; {flight}"
        net = (f", {t['minute_connections']} connection"
               f"{'s' if t['minute_connections'] != 1 else ''}"
               + (f" ({t['minute_refused']} refused)" if t["minute_refused"] else "")
               if t["minute_connections"] else "")
        second = (f"last minute: {tokens(t['minute_tokens'])} tokens, "
                  f"{cost_text(t['minute_cost'], t['minute_unpriced'])}{net}; "
                  f"in total: {tokens(t['tokens'])} tokens, {cost_text(t['cost'], t['unpriced'])}")
        extra = [f"filter: {pattern}"] if pattern else []
        extra += ["recent exits shown"] if self.view.exits else []
        return [first, second + ("; " + ", ".join(extra) if extra else "")]

    def cells(self, row, now):
        """One agent's cells, COLUMNS' and DOING last (its first line, as long as it is)."""
        name = row["name"] or short(row["id"])
        if row.get("depth"):
            name = "  " * (row["depth"] - 1) + "\\_ " + name
        turn = row["turn"] is not None
        used = (f"{tokens(row['turn_tokens']) if turn else '-'}/"
                f"{tokens(row['tokens_in'] + row['tokens_out'])}")
        spent = (f"{cost_text(row['turn_cost'], row['turn_unpriced']) if turn else '-'}/"
                 f"{cost_text(row['cost'], row['unpriced'])}")
        doing = self.view.doing(row, now).split("\n", 1)[0].translate(CARET)
        return (short(row["id"]), name, stat_text(row), row["role"], str(row["mail"]),
                age(now - row["created_at"]), used, spent, doing)

    @staticmethod
    def layout(cells, width=None):
        return layout(cells, width)

    def snapshot(self):
        """The whole view as lines, for a pipe or a file: every agent, nothing cut."""
        now = clock.now()
        cells = [self.cells(r, now) for r in self.view.ordered()]
        shape = layout(cells)
        return self.header(now) + ["", shape.titles().rstrip()] + \
            [shape.line(c).rstrip() for c in cells]

    # -- actions: the programs' own operations, each in a transaction of its own --------

    def signal(self, row, sig, cascade):
        """TERM, KILL, STOP or CONT to an agent (and its subtree), as agent-kill sends it."""
        deadlines.carry_out(self.conn)      # (every writing program's first step)
        with transaction(self.conn):
            refusal = signals.send(self.conn, self.me, row["id"], sig, cascade=cascade)
        if refusal:
            raise Refused(refusal)
        self.view.update()
        return f"{sig} sent to {registry.label(row)}" + (" and its subtree" if cascade else "")

    def request(self, row):
        """The agent's first request that waits for a decision, or None."""
        waiting = asks_store.pending(self.conn, row["id"])
        return waiting[0] if waiting else None

    def asked(self, request):
        """What a request asks, as agent-answer shows it."""
        if request["kind"] == "question":
            return request["question"]
        return voice.shown_call(request["tool"], request["arguments"])

    def decide(self, request, how, text=None):
        """Answer, approve or deny a request, as agent-answer does."""
        with transaction(self.conn):
            decided = asks.decide(self.conn, request["id"], self.me and self.me["id"], how,
                                  text)
        self.view.update()
        return f"request {decided['id']} {decided['decision']}"

    def log(self, row):
        """The agent's last LOG_LAST events, as agent-log prints them."""
        rows = events.select(self.conn, agents=[row["id"]], last=LOG_LAST)
        return eventlog.text_lines(rows, eventlog.Names(self.conn)).splitlines() or \
            ["(no events)"]

    def replay(self, row):
        """The context its next turn would send, as agent-replay prints it."""
        target = registry.get(self.conn, row["id"])
        authority.check(self.conn, self.me, target, "replay")
        system, rows = context.build(self.conn, target)
        return context.as_text(system, rows, context.owner_names(self.conn, rows)).splitlines()

    def why(self, row):
        """Every reason it runs no turn, as agent-why prints them."""
        now = clock.now()
        lines = why.reasons(self.conn, row, now)
        return lines or [why.pending(self.conn, row, now)]


# The columns before DOING, in order: (title, width, right-aligned); NAME's width is its
# widest cell's, from 8 up to NAME_MOST on a screen. DOING, the last, has the rest.
COLUMNS = (("ID", 8, False), ("NAME", None, False), ("STAT", 4, False), ("ROLE", 7, False),
           ("MAIL", 4, True), ("AGE", 4, True), ("TOKENS", 11, True), ("COST", 17, True))
NAME_LEAST, NAME_MOST = 8, 40
CUT = ("NAME", "ROLE")  # the texts cut to their column's width (a number never is)
# On a screen too narrow for them all, the others give way to DOING until it has
# DOING_ROOM columns (or its longest text's, if shorter): TOKENS and COST narrow to
# their widest cell, then these are left out one by one, then NAME narrows.
DOING_ROOM = 30
LEFT_OUT = ("COST", "TOKENS", "ID", "AGE", "ROLE", "MAIL")


class Layout(NamedTuple):
    """The columns a table shows ({title: width}, in order) and DOING's width (None: as
    long as each text is)."""
    widths: dict
    doing: int | None

    def titles(self):
        return self.line(TITLES)

    def line(self, cells):
        """An agent's line of its cells (Top.cells), or the titles'."""
        by = dict(zip(TITLES, cells))
        texts = {t: cut(by[t], w) if t in CUT else by[t] for t, w in self.widths.items()}
        parts = [f"{texts[t]:>{w}}" if RIGHT[t] else f"{texts[t]:<{w}}"
                 for t, w in self.widths.items()]
        return " ".join(parts + [by["DOING"] if self.doing is None
                                 else cut(by["DOING"], self.doing)])


TITLES = [c[0] for c in COLUMNS] + ["DOING"]
RIGHT = {title: right for title, _, right in COLUMNS}


def layout(cells, width=None):
    """The Layout of the agents' `cells` on a screen `width` columns wide (None: a
    snapshot, nothing left out or cut)."""
    names = max((len(c[1]) for c in cells), default=NAME_LEAST)
    widths = {t: w or max(NAME_LEAST, min(names, NAME_MOST if width else names))
              for t, w, _ in COLUMNS}
    if width is None:
        return Layout(widths, None)
    want = min(DOING_ROOM, max((len(c[-1]) for c in cells), default=0))

    def lacking():      # how many columns DOING lacks
        return want - (width - sum(w + 1 for w in widths.values()))
    for title in ("TOKENS", "COST"):
        if lacking() > 0:
            column = TITLES.index(title)
            widths[title] = max([len(title)] + [len(c[column]) for c in cells])
    for title in LEFT_OUT:
        if lacking() > 0:
            del widths[title]
    if lacking() > 0:
        widths["NAME"] = max(NAME_LEAST, widths["NAME"] - lacking())
    return Layout(widths, max(len("DOING"), width - sum(w + 1 for w in widths.values())))


def tokens(n):
    """A count of tokens, short: 950, 12k, 1.2M."""
    if n is None:
        return "-"
    for size, unit in ((1_000_000, "M"), (1_000, "k")):
        if n >= size:
            value = n / size
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
    return str(n)


def main(argv=None):
    return run(cli, argv)
