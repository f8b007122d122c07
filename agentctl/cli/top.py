"""agent-top: a live view of the tree of agents, with keys to signal and answer them
(the screen is cli/screen.py); a snapshot of the same view when not on a terminal."""

import sys

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

    def header(self, now, pattern=None):
        """The lines above the table: the agents by status, the calls in flight, the
        tokens and cost of the last minute and in total."""
        t = self.view.totals(now)
        counts = t["counts"]
        live = sum(counts.get(s, 0) for s in registry.LIVE)
        parts = [f"{counts.get(s, 0)} {w}" for s, w in (
            ("R", "running"), ("P", "paused"), ("S", "sleeping"), ("T", "stopped"),
            ("Z", "zombie"))]
        if counts.get("X"):
            parts.append(f"{counts['X']} dead")
        first = (f"agents: {live} live: {', '.join(parts)}; "
                 f"in flight: {t['in_flight']} model call{'s' if t['in_flight'] != 1 else ''}")
        second = (f"last minute: {tokens(t['minute_tokens'])} tokens, "
                  f"{cost_text(t['minute_cost'], t['minute_unpriced'])}; "
                  f"in total: {tokens(t['tokens'])} tokens, {cost_text(t['cost'], t['unpriced'])}")
        extra = [f"filter: {pattern}"] if pattern else []
        extra += ["recent exits shown"] if self.view.exits else []
        return [first, second + ("; " + ", ".join(extra) if extra else "")]

    def titles(self, name_width):
        return _line("ID", "NAME", name_width, "STAT", "ROLE", "MAIL", "AGE",
                     "TOKENS", "COST", "DOING")

    def row(self, row, now, name_width):
        """One agent's line (its last column, what it is doing, as long as it is)."""
        name = row["name"] or short(row["id"])
        if row.get("depth"):
            name = "  " * (row["depth"] - 1) + "\\_ " + name
        turn = row["turn"] is not None
        used = (f"{tokens(row['turn_tokens']) if turn else '-'}/"
                f"{tokens(row['tokens_in'] + row['tokens_out'])}")
        spent = (f"{cost_text(row['turn_cost'], row['turn_unpriced']) if turn else '-'}/"
                 f"{cost_text(row['cost'], row['unpriced'])}")
        doing = self.view.doing(row, now).split("\n", 1)[0].translate(CARET)
        return _line(short(row["id"]), name, name_width, stat_text(row), row["role"],
                     str(row["mail"]), age(now - row["created_at"]), used, spent, doing)

    @staticmethod
    def name_width(rows, most=40):
        """The NAME column's width: its longest name (indented), from 8 to `most`."""
        longest = max((len(r["name"] or "") + 2 * r.get("depth", 0) + 1 for r in rows),
                      default=8)
        return max(8, min(most or longest, longest))

    def snapshot(self):
        """The whole view as lines, for a pipe or a file: every agent, nothing cut."""
        now = clock.now()
        rows = self.view.ordered()
        width = self.name_width(rows, most=None)
        return self.header(now) + ["", self.titles(width).rstrip()] + \
            [self.row(r, now, width).rstrip() for r in rows]

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


def _line(ident, name, name_width, stat, role, mail, when, used, spent, doing):
    return (f"{ident:<8} {cut(name, name_width):<{name_width}} {stat:<4} {cut(role, 7):<7} "
            f"{mail:>4} {when:>4} {used:>11} {spent:>17} {doing}")


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
