"""make bench, PostgreSQL against SQLite: the same programs on both, in the same run,
on a server this script starts (tests/pgserver.py: 127.0.0.1, a directory of its
own). Each line is PostgreSQL's time over SQLite's (medians); then agent-ps's CPU time on
PostgreSQL over its floor, agent-ps on SQLite with the same rows, in pairs of runs (issue
42's goal beside it); the last ones are the start-up cost of the PostgreSQL path itself
(libpq loaded) and, for comparison, of importing psycopg, the driver it replaced. Not a
test: it prints."""

import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agentctl.ids import INIT_ID, new_id  # noqa: E402
from agentctl.store import db, history, registry  # noqa: E402
from agentctl.store.db import transaction  # noqa: E402

from bench import against_floor, at_most  # noqa: E402  (bench/bench.py, beside this file)
from bench import line as verdict_line  # noqa: E402
from bench import median_time as median  # noqa: E402

GOAL = 1.5      # agent-ps on PostgreSQL over agent-ps on SQLite with the same rows

VENV_BIN = os.path.dirname(sys.executable)


def run(env, *args, stdin=None):
    subprocess.run([os.path.join(VENV_BIN, args[0]), *args[1:]], env=env, input=stdin,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def agents(url, count, prompt=None, model="echo"):
    """`count` agents of `model` forked from init, each with `prompt` ("{i}" its number)
    when given (rows written directly: the setup is not timed)."""
    conn = db.connect(url)
    with transaction(conn):
        for i in range(count):
            agent_id = new_id()
            registry.insert(conn, id=agent_id, name=f"b{i}", parent_id=INIT_ID,
                            forked_from=INIT_ID, fork_msg_id=0, model=model)
            if prompt:
                history.append(conn, agent_id, "user", prompt.format(i=i))
    conn.close()


def line(label, pg, lite, unit="ms"):
    print(f"{label:<52} {pg * 1000:8.1f} {unit} vs {lite * 1000:8.1f} {unit}   "
          f"{pg / lite:5.2f}x", flush=True)


def ps_on(pg, lite):
    """(agent-ps -a on `pg`, the environment, the same on `lite`: its floor), for
    against_floor."""
    ps = os.path.join(VENV_BIN, "agent-ps")
    return [ps, "--db", pg, "-a"], os.environ, [ps, "--db", lite, "-a"]


def main():
    from tests.pgserver import Server
    started = time.perf_counter()
    server = Server()
    print(f"{'PostgreSQL server: initdb and start (once per host)':<52} "
          f"{(time.perf_counter() - started) * 1000:8.1f} ms", flush=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            lite, pg = os.path.join(tmp, "agents.db"), server.database()
            envs = {name: dict(os.environ, AGENTCTL_DB=url) for name, url
                    in (("pg", pg), ("lite", lite))}
            for url in (lite, pg):
                agents(url, 1000)
            times = {k: median(lambda e=e: run(e, "agent-mail", "-c", "init"))
                     for k, e in envs.items()}
            line("start-up: agent-mail -c (process, open, one query)", times["pg"],
                 times["lite"])
            times = {k: median(lambda e=e: run(e, "agent-send", "b1", "hello"))
                     for k, e in envs.items()}
            line("agent-send, one mail", times["pg"], times["lite"])
            times = {k: median(lambda e=e: run(e, "agent-ps", "-a"))
                     for k, e in envs.items()}
            line("agent-ps -a over 1,000 agents", times["pg"], times["lite"])
            small = {"lite": os.path.join(tmp, "small.db"), "pg": server.database()}
            for url in small.values():
                agents(url, 5)
            for rows, dbs in (("1,000 agents", (pg, lite)), ("6 agents", (small["pg"],
                                                                       small["lite"]))):
                ratio, spread = against_floor(*ps_on(*dbs))
                verdict_line(f"agent-ps -a, {rows}: CPU on PostgreSQL / on SQLite", ratio,
                             at_most(GOAL), spread=spread)
            fresh = {"lite": os.path.join(tmp, "run.db"), "pg": server.database()}
            for url in fresh.values():
                agents(url, 100, prompt="go")
            times = {}
            for k, url in fresh.items():
                env = dict(os.environ, AGENTCTL_DB=url)
                start = time.perf_counter()
                run(env, "agent-run", "--all", "-j", "4")
                times[k] = (time.perf_counter() - start) / 100
            line("agent-run --all -j 4, 100 agents: per turn", times["pg"], times["lite"])
        bare = median(lambda: subprocess.run([sys.executable, "-c", "pass"]))
        for label, code in (
                ("PostgreSQL's start-up: store.pg, libpq loaded",
                 "from agentctl.store import pg; pg.libpq.library()"),
                ("import psycopg (for comparison: not used)", "import psycopg")):
            imports = median(lambda: subprocess.run([sys.executable, "-c", code], cwd=ROOT))
            print(f"{label:<52} {(imports - bare) * 1000:8.1f} ms", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
