"""make bench, agent-ps over 100,000 live agents (issue 42): its CPU time against its
floor, the sqlite3 command-line program running the same SELECT agent-ps runs (the
statement as agent-ps sends it for those columns, its parameters written in), both
writing to /dev/null, in pairs of runs (bench.against_floor). Without the sqlite3 program the floor is
Python's sqlite3 module in a fresh process reading every row, and the line says so.

    BENCH_PS_AGENTS    the number of live agents (default 100000)
    BENCH_PS_PAIRS     pairs of runs for each figure (default 15)
"""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import PYTHON, against_floor, at_most, line, program  # noqa: E402  (bench/bench.py)
from agentctl import settings  # noqa: E402
from agentctl.ids import INIT_ID, new_id  # noqa: E402
from agentctl.cli import ps  # noqa: E402
from agentctl.store import db, history, proctable as stored, registry  # noqa: E402
from agentctl.store.db import transaction  # noqa: E402

GOAL = 2.0      # issue 42: agent-ps within twice what SQLite takes to run its statement
SHOWN = [[], ["-o", "name,stat"], ["-q"]]


def tree(path, count):
    """`count` live agents in one transaction, through the storage layer's own insert:
    leads of 100 workers each, a prompt each worker, as a fork makes them (its
    settings as init's child's), without a fork's checks (seconds, not minutes)."""
    conn = db.connect(path)
    with transaction(conn):
        values = settings.child(registry.get(conn, INIT_ID), {"model": "echo"})
        values.pop("budget")
        leads = []
        for i in range(max(1, count // 100)):
            leads.append(new_id())
            registry.insert(conn, id=leads[-1], name=f"lead{i}", parent_id=INIT_ID,
                            forked_from=INIT_ID, fork_msg_id=0, depth=1, budget_id=INIT_ID,
                            **values)
        for i in range(count - len(leads)):
            lead, child = leads[i % len(leads)], new_id()
            registry.insert(conn, id=child, name=f"w{i}", parent_id=lead, forked_from=lead,
                            fork_msg_id=0, depth=2, budget_id=INIT_ID, **values)
            history.append(conn, child, "user", "work")
    conn.close()


def statement(path, args):
    """The SELECT `agent-ps ARGS` sends (it reads only the fields its columns show), each
    parameter written in as an SQL literal: agent-ps run here, its statements traced."""
    sent = []
    rows = stored.rows

    def traced(conn, **kwargs):
        conn.tracer = lambda sql, params: sent.append((sql, params))
        return rows(conn, **kwargs)
    stored.rows = traced
    try:
        with open(os.devnull, "w") as out, contextlib.redirect_stdout(out):
            assert ps.main(["--db", path, *args]) == 0, "agent-ps failed"
    finally:
        stored.rows = rows
    sql, params = next((s, p) for s, p in sent if "FROM agents a" in s)
    pieces = sql.split("?")
    assert len(pieces) == len(params) + 1, "a ? in the statement that is no parameter"
    literals = ["'" + str(p).replace("'", "''") + "'" if isinstance(p, str) else str(p)
                for p in params]
    return "".join(piece + literal for piece, literal in zip(pieces, literals + [""]))


def floor(path, sql):
    """The floor's command, and what it is."""
    if shutil.which("sqlite3"):
        return ["sqlite3", path, sql], "sqlite3"
    read = f"import sqlite3; sqlite3.connect({path!r}).execute({sql!r}).fetchall()"
    return [PYTHON, "-c", read], "python3's sqlite3 (no sqlite3 program here)"


def main():
    started = time.time()
    count = int(os.environ.get("BENCH_PS_AGENTS", "100000"))
    pairs = int(os.environ.get("BENCH_PS_PAIRS", "15"))
    # the modules as bytecode, as an installed copy has them
    subprocess.run([PYTHON, "-m", "compileall", "-q", os.path.join(ROOT, "agentctl")],
                   check=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ps.db")
        built = time.perf_counter()
        tree(path, count)
        built = time.perf_counter() - built
        what = floor(path, "")[1]
        print(f"agent-ps, {count:,} live agents (made in {built:.1f} s): CPU time over its "
              f"floor's, {what} running its statement (each reads what it shows), median "
              f"of {pairs} pairs (the middle half of them)")
        env = dict(os.environ, AGENTCTL_DB=path)
        for args in SHOWN:
            base = floor(path, statement(path, args))[0]
            ratio, spread = against_floor([program("agent-ps")] + args, env, floor=base,
                                          pairs=pairs)
            line(f"P1. {' '.join(['agent-ps'] + args)}, {count:,} live vs {what.split()[0]}",
                 ratio, at_most(GOAL), spread=spread)
    print(f"(agent-ps bench took {time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
