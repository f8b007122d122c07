"""agent-top's full screen (agent-top(1)), with the standard library's curses: the
table that follows the database, the keys, their confirmations and prompts, and a
pager for an agent's log, context and reasons. The terminal is given back as it was
on every way out: q, ^C, an error, SIGTERM, SIGHUP."""

import curses
import os
import signal
import textwrap
import time

from agentctl import clock
from agentctl.cli.stdio import CARET
from agentctl.errors import AgentctlError, UsageError
from agentctl.ops import proctable
from agentctl.store import db, waits

LOOK = 100              # ms a key is waited for at a time (a signal is seen between two)
GAP = 0.25              # seconds at most between two looks for a commit (store.waits.commits)
REDRAW = 1.0            # seconds between redraws when nothing changes (ages, times)
SIGNALS = {"T": "TERM", "K": "KILL", "S": "STOP", "C": "CONT"}
ESC = 27
HELP = """agent-top keys

  Up Down j k, PgUp PgDn, Home End    select an agent
  T K S C     send TERM, KILL, STOP or CONT to it: y for the agent alone, s for its
              subtree (as agent-kill --cascade), anything else cancels
  a           answer its question, or approve (y) or deny (d) its tool call
  l           its log (agent-log), r its replayed context (agent-replay),
  w or Enter  why it runs no turn (agent-why)
  /           filter: agents whose name, id, role or model holds the text (empty: all)
  x           show or hide the agents that died in the last hour
  ^L          redraw          q, ^C    quit

In the log, context and reasons: Up Down PgUp PgDn Home End scroll, q or Esc back."""


class Terminated(Exception):
    """SIGTERM or SIGHUP came: the terminal is restored, then the signal is obeyed."""


def run(top):
    """Show the view until q or ^C (exit 0). A TERM or HUP ends it as that signal
    ends any process, once the terminal is restored."""
    def on_signal(number, frame):
        raise Terminated(number)
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    os.environ.setdefault("ESCDELAY", "25")     # Esc alone, not the start of a key
    try:
        window = curses.initscr()
    except curses.error as e:
        raise UsageError(f"can't drive this terminal (TERM={os.environ.get('TERM', '')}: "
                         f"{e}); pipe the output for a snapshot") from None
    got = None
    try:
        curses.noecho()
        curses.cbreak()
        window.keypad(True)
        try:
            curses.curs_set(0)
        except curses.error:        # a terminal that can't hide its cursor
            pass
        Screen(window, top, _colours()).loop()
    except KeyboardInterrupt:
        pass                        # ^C quits, as q does
    except Terminated as e:
        got = e.args[0]
    finally:
        window.keypad(False)
        curses.nocbreak()
        curses.echo()
        curses.endwin()
        for number, handler in old.items():
            signal.signal(number, handler)
    if got is not None:
        os.kill(os.getpid(), got)       # (its default action, now that it is restored)
    return 0


def _colours():
    """{state: attribute} (ops.proctable.COLOURS): colours unless $NO_COLOR is set or the
    terminal has none."""
    if os.environ.get("NO_COLOR") or not curses.has_colors():
        return {}
    curses.start_color()
    try:
        curses.use_default_colors()
        background = -1
    except curses.error:
        background = curses.COLOR_BLACK
    found = {}
    for n, (state, colour) in enumerate(proctable.COLOURS.items(), 1):
        curses.init_pair(n, getattr(curses, f"COLOR_{colour.upper()}"), background)
        found[state] = curses.color_pair(n)
    return found


class Screen:
    def __init__(self, window, top, colours):
        self.window, self.top, self.view, self.colours = window, top, top.view, colours
        self.selected = None        # the selected agent's id: it stays selected as rows move
        self.first = 0              # the first row shown
        self.pattern = ""
        self.message = ""

    # -- the main loop ------------------------------------------------------------------

    def loop(self):
        self.window.timeout(LOOK)
        self.drawn, self.changed = 0.0, True
        for _ in waits.commits(self.top.conn, pause=self.between, most=GAP):
            self.changed = self.view.update() or self.changed

    def between(self, seconds):
        """Between two looks at the database, `seconds` at least: the screen drawn when
        it changed or REDRAW seconds passed, the keys pressed handled; True on q."""
        until = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            if self.changed or now - self.drawn >= REDRAW:
                self.view.tick()
                self.draw()
                self.drawn, self.changed = now, False
            key = self.window.getch()
            if key != -1:
                if self.key(key) == "quit":
                    return True
                self.changed = True
            if time.monotonic() >= until:
                return False

    def rows(self):
        return self.view.ordered(self.pattern)

    def key(self, key):
        rows = self.rows()
        index = self._index(rows)
        page = max(1, self._height() - 1)
        moves = {curses.KEY_UP: -1, ord("k"): -1, curses.KEY_DOWN: 1, ord("j"): 1,
                 curses.KEY_PPAGE: -page, curses.KEY_NPAGE: page,
                 curses.KEY_HOME: -len(rows), curses.KEY_END: len(rows)}
        self.message = ""
        if key in (ord("q"), ord("Q")):
            return "quit"
        if key in moves and rows:
            index = min(max(index + moves[key], 0), len(rows) - 1)
            self.selected = rows[index]["id"]
        elif key == curses.KEY_RESIZE or key == 12:         # ^L
            self.window.clear()
        elif key == ord("/"):
            pattern = self.prompt("filter: ", self.pattern)
            if pattern is not None:
                self.pattern, self.first = pattern.strip(), 0
        elif key == ord("x"):
            self.view.show_exits(not self.view.exits)
        elif key == ord("?") or key == ord("h"):
            self.pager("help", HELP.splitlines())
        elif not rows:
            return None
        elif 0 < key < 256 and chr(key) in SIGNALS:
            self.signal(rows[index], SIGNALS[chr(key)])
        elif key == ord("a"):
            self.answer(rows[index])
        elif key in (ord("l"), ord("r"), ord("w"), 10, 13, curses.KEY_ENTER):
            row = rows[index]
            show = {ord("l"): ("log", self.top.log), ord("r"): ("context", self.top.replay)}
            title, lines = show.get(key, ("why", self.top.why))
            self.act(lambda: self.pager(f"{title} of {row['name'] or row['id']}", lines(row)))
        return None

    def act(self, action):
        """Do an action of a key; its error is the message line (the program goes on)."""
        try:
            self.message = action() or ""
        except AgentctlError as e:
            self.message = f"agent-top: {e}"
        except db.Error as e:          # a database locked for too long, ...
            self.message = f"agent-top: {db.fault(e)}"

    # -- the keys that change something ---------------------------------------------------

    def signal(self, row, sig):
        name = row["name"] or row["id"]
        below = self.view.subtree(row["id"])
        question = f"{sig} {name}? y: {name} alone"
        question += f", s: {name} and its subtree ({below} more)" if below else ""
        answer = self.ask(question + ", other: no ")
        if answer in ("y", "s"):
            self.act(lambda: self.top.signal(row, sig, cascade=answer == "s"))
        else:
            self.message = "nothing sent"

    def answer(self, row):
        request = self.top.request(row)
        if request is None:
            self.message = f"{row['name'] or row['id']} has no request waiting"
            return
        asked = " ".join(self.top.asked(request).split())
        if request["kind"] == "question":
            text = self.prompt(f"answer {request['id'][:8]} ({asked}): ")
            if text and text.strip():
                self.act(lambda: self.top.decide(request, "answer", text))
            else:
                self.message = "not answered"
            return
        choice = self.ask(f"{request['id'][:8]} asks to run {asked}: y approve, d deny, "
                          "other: later ")
        if choice == "y":
            self.act(lambda: self.top.decide(request, "approve"))
        elif choice == "d":
            reason = self.prompt("deny, saying why (Enter: no reason): ")
            if reason is not None:
                self.act(lambda: self.top.decide(request, "deny", reason.strip() or None))
        else:
            self.message = "not decided"

    # -- drawing ------------------------------------------------------------------------------

    def _height(self):
        return max(1, self.window.getmaxyx()[0] - 4)     # two header lines, titles, status

    def _index(self, rows):
        for i, row in enumerate(rows):
            if row["id"] == self.selected:
                return i
        self.selected = rows[0]["id"] if rows else None
        return 0

    def draw(self):
        height, width = self.window.getmaxyx()
        now = clock.now()
        rows = self.rows()
        index = self._index(rows)
        shown = self._height()
        self.first = min(max(self.first, index - shown + 1), index, max(0, len(rows) - shown))
        self.first = max(0, self.first)
        page = rows[self.first:self.first + shown]
        cells = [self.top.cells(row, now) for row in page]
        shape = self.top.layout(cells, width - 1)
        self.window.erase()
        for y, text in enumerate(self.top.header(now, self.pattern, width - 1)[:2]):
            self._put(y, text, width, curses.A_BOLD)
        self._put(2, shape.titles(), width, curses.A_REVERSE)
        for y, (row, line) in enumerate(zip(page, cells), 3):
            attr = self.colours.get(proctable.state(row), 0)
            if row["id"] == self.selected:
                attr |= curses.A_REVERSE
            self._put(y, shape.line(line), width, attr, fill=row["id"] == self.selected)
        status = self.message or (f"{len(rows)} shown, {index + 1 if rows else 0} selected;  "
                                  "q quit  ? help  / filter  T K S C signal  a answer  "
                                  "l log  r context  w why  x exits")
        self._put(height - 1, status, width, curses.A_BOLD if self.message else 0)
        self.window.refresh()

    def _put(self, y, text, width, attr=0, fill=False):
        """A line at row y, cut to the screen's width (the last cell left alone: writing
        it scrolls some terminals)."""
        if y >= self.window.getmaxyx()[0]:
            return
        text = text.translate(CARET)[:max(0, width - 1)]
        if fill:
            text = text.ljust(width - 1)
        try:
            self.window.addstr(y, 0, text, attr)
        except curses.error:
            pass

    # -- modal: a question, a line of text, a pager -----------------------------------------

    def _bottom(self, text):
        height, width = self.window.getmaxyx()
        self.window.move(height - 1, 0)
        self.window.clrtoeol()
        self._put(height - 1, text, width, curses.A_BOLD)
        self.window.refresh()

    def ask(self, question):
        """One key's answer to a question on the last line, as a character ('' for none)."""
        self._bottom(question)
        key = self._key()
        return chr(key) if 0 < key < 256 else ""

    def _key(self):
        """The next key, waited for a look at a time (a signal is seen between two)."""
        while True:
            key = self.window.getch()
            if key != -1:
                return key

    def prompt(self, label, text=""):
        """A line of text typed on the last line: Enter gives it, Esc gives None."""
        try:
            curses.curs_set(1)
        except curses.error:
            pass
        try:
            while True:
                self._bottom(label + text)
                try:
                    key = self.window.get_wch()
                except curses.error:        # no key within a look
                    continue
                if key in ("\n", "\r", curses.KEY_ENTER):
                    return text
                if key == "\x1b":
                    return None
                if key in ("\x7f", "\b", curses.KEY_BACKSPACE):
                    text = text[:-1]
                elif key == "\x15":         # ^U
                    text = ""
                elif isinstance(key, str) and key.isprintable():
                    text += key
        finally:
            try:
                curses.curs_set(0)
            except curses.error:
                pass

    def pager(self, title, text):
        """Lines to read, a long one wrapped at the screen's width (wrapped()), scrolled
        with the keys; q or Esc goes back."""
        first, wrapped_to = 0, None
        while True:
            height, width = self.window.getmaxyx()
            if wrapped_to != width:
                lines, wrapped_to = wrapped(text, width - 1), width
            shown = max(1, height - 2)
            first = min(max(first, 0), max(0, len(lines) - shown))
            self.window.erase()
            self._put(0, f"{title}  ({first + 1}-{min(first + shown, len(lines))} of "
                         f"{len(lines)}; q back)", width, curses.A_REVERSE, fill=True)
            for y, line in enumerate(lines[first:first + shown], 1):
                self._put(y, line, width)
            self.window.refresh()
            key = self._key()
            if key in (ord("q"), ESC, curses.KEY_LEFT):
                return None
            first += {curses.KEY_UP: -1, ord("k"): -1, curses.KEY_DOWN: 1, ord("j"): 1,
                      curses.KEY_PPAGE: -shown, curses.KEY_NPAGE: shown, ord(" "): shown,
                      curses.KEY_HOME: -len(lines), curses.KEY_END: len(lines)}.get(key, 0)


def wrapped(lines, width):
    """Lines as a pager shows them `width` columns wide: a longer one wrapped at a space
    (else where the room ends), what follows indented by two, so that its end (the fix
    a reason names) is seen."""
    found = []
    for line in lines:
        line = line.expandtabs().translate(CARET).rstrip()
        found += textwrap.wrap(line, max(width, 8), subsequent_indent="  ",
                               break_on_hyphens=False) or [""]
    return found
