"""make bench, agent-top: how soon its first screen shows, what it costs when nothing
changes, and how it keeps up with 10,000 live agents (reading the view, reading one
change, drawing a screen, its first screen, its idle CPU); on PostgreSQL too, on a
server this script starts (tests/pgserver.py), when the server binaries are here.

    BENCH_IDLE_SECONDS    how long the idle agent-top is watched (default 60)
    BENCH_TOP_AGENTS      the size of the big tree (default 10000)
"""

import fcntl
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import line  # noqa: E402  (bench/bench.py, beside this file)
from events import cpu  # noqa: E402  (bench/events.py)
from agentctl import clock  # noqa: E402
from agentctl.cli.top import Top  # noqa: E402
from agentctl.ids import INIT_ID  # noqa: E402
from agentctl.ops import lifecycle, top  # noqa: E402
from agentctl.store import db, history, registry  # noqa: E402
from agentctl.store.db import transaction  # noqa: E402

PROGRAM = os.path.join(ROOT, "bin", "agent-top")       # the checkout's, as a user runs it


class Terminal:
    """agent-top on a pseudo-terminal of 40 x 150, its output read as it comes."""

    def __init__(self, path):
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 150, 0, 0))
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env.update(AGENTCTL_DB=path, TERM="xterm-256color")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, PROGRAM], stdin=slave, stdout=slave,
                                     stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        self.master, self.out, self.seen = master, b"", threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.out += chunk
            if b"in flight" in self.out:
                self.seen.set()

    def first_screen(self):
        """Seconds from its start to its first screen."""
        if not self.seen.wait(60):
            raise SystemExit(f"agent-top showed no screen: {self.out[-500:]!r}")
        return time.perf_counter() - self.started

    def quit(self):
        os.write(self.master, b"q")
        self.proc.wait(30)
        os.close(self.master)


def tree(path, count):
    """A database (a new file, or a PostgreSQL URL) of `count` live agents: leads of 100
    workers each, a prompt each."""
    conn = db.connect(path)
    with transaction(conn):
        init = registry.get(conn, INIT_ID)
        leads = []
        for i in range(max(1, count // 100)):
            leads.append(lifecycle.fork(conn, init, name=f"lead{i}", model="echo"))
        for i in range(count - len(leads)):
            child = lifecycle.fork(conn, registry.get(conn, leads[i % len(leads)]),
                                   name=f"w{i}", model="echo")
            history.append(conn, child, "user", "work")
    conn.close()
    return path


def first_screen(path, runs=5):
    times = []
    for _ in range(runs):
        term = Terminal(path)
        times.append(term.first_screen())
        term.quit()
    return statistics.median(times)


def idle(path, seconds):
    """CPU seconds an agent-top on `path` uses over `seconds` when nothing changes."""
    term = Terminal(path)
    term.first_screen()
    time.sleep(2)               # its first reads done
    before = cpu(term.proc.pid)
    time.sleep(seconds)
    used = cpu(term.proc.pid) - before
    term.quit()
    return used


def small(tmp, seconds):
    path = tree(os.path.join(tmp, "small.db"), 20)
    base = statistics.median(_timed([sys.executable, "-c", "pass"]) for _ in range(10))
    print(f"python3 -c pass: {base * 1000:.0f} ms")
    line("T1. agent-top, 20 agents: start to first screen (s)", first_screen(path),
         lambda v: (v < 0.5, "< 0.5 s"), unit=" s")
    used = idle(path, seconds)
    line(f"T2. idle agent-top, 20 agents: CPU over {seconds:g} s (ms)", used * 1000,
         lambda v: (v <= seconds * 10, f"<= {seconds * 10:g} ms (1%)"), unit=" ms")


def _timed(args):
    start = time.perf_counter()
    subprocess.run(args, check=True)
    return time.perf_counter() - start


def big(tmp, count, seconds):
    path = tree(os.path.join(tmp, "big.db"), count)
    conn = db.connect(path)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        view = top.View(conn)
        times.append(time.perf_counter() - start)
    line(f"T3. {count:,} live agents: the whole view read (s)", statistics.median(times),
         unit=" s")
    other = db.connect(path)
    lead = registry.resolve(other, "lead0")
    times = []
    for i in range(20):
        with transaction(other):
            history.append(other, lifecycle.fork(other, lead, name=f"new{i}"), "user", "hi")
        start = time.perf_counter()
        view.update()
        view.ordered()
        times.append(time.perf_counter() - start)
    line(f"T4. {count:,} live agents: a fork read and the tree made again (ms)",
         statistics.median(times) * 1000, lambda v: (v < 250, "< 250 ms"), unit=" ms")
    shown = Top(conn, view, None)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        now = clock.now()
        rows = view.ordered()
        page = rows[len(rows) // 2:len(rows) // 2 + 36]     # a screen in the middle
        shown.header(now, width=150)
        view._doing.clear()             # each line's reason asked afresh (as every 10 s)
        cells = [shown.cells(row, now) for row in page]
        shape = shown.layout(cells, 150)
        for agent_cells in cells:
            shape.line(agent_cells)
        times.append(time.perf_counter() - start)
    line(f"T5. {count:,} live agents: a screen drawn, its reasons asked (ms)",
         statistics.median(times) * 1000, lambda v: (v < 250, "< 250 ms"), unit=" ms")
    line(f"T6. agent-top, {count:,} live agents: start to first screen (s)",
         first_screen(path, runs=3), unit=" s")
    used = idle(path, seconds)
    line(f"T7. idle agent-top, {count:,} agents: CPU over {seconds:g} s (ms)", used * 1000,
         lambda v: (v <= seconds * 10, f"<= {seconds * 10:g} ms (1%)"), unit=" ms")


def postgresql(seconds):
    """The idle cost on PostgreSQL, where the look is a poll of the connection's socket
    for a notification (store/pg.py)."""
    from tests.pgserver import Server
    try:
        server = Server()
    except Exception as e:      # no server binaries here: said, not measured
        print(f"T8. idle agent-top on PostgreSQL: not measured ({e})")
        return
    try:
        path = tree(server.database(), 20)
        line("T8. agent-top on PostgreSQL, 20 agents: start to first screen (s)",
             first_screen(path, runs=3), unit=" s")
        used = idle(path, seconds)
        line(f"T9. idle agent-top on PostgreSQL, 20 agents: CPU over {seconds:g} s (ms)",
             used * 1000, lambda v: (v <= seconds * 10, f"<= {seconds * 10:g} ms (1%)"),
             unit=" ms")
    finally:
        server.stop()


def main():
    started = time.time()
    seconds = float(os.environ.get("BENCH_IDLE_SECONDS", "60"))
    count = int(os.environ.get("BENCH_TOP_AGENTS", "10000"))
    with tempfile.TemporaryDirectory() as tmp:
        small(tmp, seconds)
        big(tmp, count, seconds / 2)
    postgresql(seconds / 2)
    print(f"(agent-top bench took {time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
