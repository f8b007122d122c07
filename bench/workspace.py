"""make bench, copy-on-write workspaces (agentctl(7), WORKSPACES): what a call's layer
adds to a sandboxed call, and what a fork costs whatever the size of the tree.

W1: the same turn of N calls of a tool in a layered working directory and in the same
directory given --shared (no layer), per call, in pairs of turns (each pair sees the
same load): the median of the differences. The goal: 10 ms a call (issue 40).

W2: agent-fork of an agent whose layer holds 100,000 files and whose directory holds
100,000 more, against agent-fork of one whose layer holds one file and whose directory
is empty, in turn: each fork freezes a layer that holds something (a file is written
into the parent's new layer before each), as a fork of a working agent does. The goal:
the same cost (at most 1.2x), a fork being O(1) in files.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import RUNS, line, program  # noqa: E402  (bench/bench.py, beside this file)
from tools import CALLS, TURNS, Place  # noqa: E402  (bench/tools.py)

from agentctl.store import db, layers as rows  # noqa: E402
from agentctl.workspace import layers  # noqa: E402

FILES = 100_000
GOAL = 10.0


def layer_added(place):
    """What a call's layer adds to a sandboxed call, in seconds (W1)."""
    added = []
    for n in range(TURNS + 1):
        layered = place.turn(CALLS, f"w1-layered{n}")
        shared = place.turn(CALLS, f"w1-shared{n}", "--shared")
        added.append((layered - shared) / CALLS)
    return statistics.median(added[1:])     # (the first: a warm-up)


def many(directory, count):
    os.makedirs(directory, exist_ok=True)
    for n in range(count):
        with open(os.path.join(directory, f"f{n}"), "w"):
            pass


class Forking:
    """An agent `name` over a directory of `files` files whose first layer holds as
    many (at least one), to be forked again and again (fork())."""

    def __init__(self, tmp, name, files):
        self.name, cwd = name, os.path.join(tmp, name)
        many(cwd, files)
        self.env = dict(os.environ, AGENTCTL_DB=os.path.join(tmp, f"{name}.db"),
                        XDG_DATA_HOME=os.path.join(tmp, f"{name}-data"))
        subprocess.run([program("agent-fork"), "-n", name, "--cwd", cwd], env=self.env,
                       check=True, stdout=subprocess.DEVNULL)
        self.conn = db.connect(self.env["AGENTCTL_DB"])
        self.agent = self.conn.execute("SELECT id FROM agents WHERE name = ?",
                                       (name,)).fetchone()[0]
        many(self.upper(), files or 1)

    def upper(self):
        os.environ["XDG_DATA_HOME"] = self.env["XDG_DATA_HOME"]    # (layers.root() reads it)
        return layers.upper(rows.own(self.conn, self.agent)["id"])

    def fork(self):
        """Seconds of agent-fork -p NAME, after a file is written into the parent's own
        layer (so that the fork freezes one)."""
        many(self.upper(), 1)
        start = time.perf_counter()
        subprocess.run([program("agent-fork"), "-p", self.name], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)
        return time.perf_counter() - start


def main():
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        added = layer_added(Place(tmp, "work"))
        line("W1. what a call's layer adds to a sandboxed call (ms)", added * 1000,
             lambda v: (v <= GOAL, f"<= {GOAL:g} ms"), unit=" ms")
        print(f"W1. the whole turn of {CALLS} calls: {added * CALLS * 1000:.1f} ms more with "
              "a layer (its namespace made once, each call entering it)")
        small, large = Forking(tmp, "small", 0), Forking(tmp, "large", FILES)
        os.sync()       # (the files made: their writing back no part of a fork's time)
        pairs = [(small.fork(), large.fork()) for _ in range(RUNS)]     # (in turn: same load)
        small = statistics.median(a for a, _ in pairs)
        large = statistics.median(b for _, b in pairs)
        print(f"W2. agent-fork: {small * 1000:.1f} ms over an empty tree, {large * 1000:.1f} ms "
              f"over {FILES:,} files and a layer of {FILES:,} (medians of {RUNS})")
        line("W2. agent-fork over 100k files vs over none", large / small,
             lambda v: (v <= 1.2, "<= 1.2x"))


if __name__ == "__main__":
    main()
