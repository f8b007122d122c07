"""make bench, many runners and one provider (agent-run(1), Providers): three
`agent-run --all -j 8` loops over 200 agents against a server on 127.0.0.1
(tests/limitedapi.py) that allows a few calls in flight and a few a second,
answering 429 with Retry-After past them; on a SQLite file, then as three hosts
(AGENTCTL_HOST) on a PostgreSQL server this script starts; each with the runs
sharing what they know of the endpoint (AGENTCTL_CONCURRENCY set to the server's)
and without (AGENTCTL_ENDPOINT_STATE=off). Each line: the throughput as a share of
the server's limit, its 429s, the requests that came over its concurrency limit,
the turns done exactly once. Not a test: it prints.

BENCH_AGENTS, BENCH_LOOPS, BENCH_JOBS, BENCH_CONCURRENCY, BENCH_RATE (a second),
BENCH_BURST and BENCH_LATENCY (seconds a call) change the sizes; BENCH_BACKENDS
(sqlite,postgresql) and BENCH_MODES (shared,alone) what runs.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agentctl.ids import INIT_ID  # noqa: E402
from agentctl.store import db  # noqa: E402
from tests.limitedapi import LimitedAPI  # noqa: E402

from postgres import agents  # noqa: E402  (bench/postgres.py, beside this file)

AGENTS = int(os.environ.get("BENCH_AGENTS", "200"))
LOOPS = int(os.environ.get("BENCH_LOOPS", "3"))
JOBS = int(os.environ.get("BENCH_JOBS", "8"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "2"))
RATE = float(os.environ.get("BENCH_RATE", "2"))
BURST = float(os.environ.get("BENCH_BURST", "2"))
LATENCY = float(os.environ.get("BENCH_LATENCY", "0.5"))
BACKENDS = os.environ.get("BENCH_BACKENDS", "sqlite,postgresql").split(",")
MODES = os.environ.get("BENCH_MODES", "shared,alone").split(",")
CEILING = float(os.environ.get("BENCH_CEILING", "1800"))    # seconds a run may take
BIN = os.path.join(ROOT, "bin")
# A cron-like loop: run --all again at once after work, a moment later when there was
# none (the other loops hold what is left, or it backs off after failures).
LOOP = ("until [ -e stop ]; do agent-run --all -j $JOBS >/dev/null 2>>errors.$AGENTCTL_HOST; "
        "[ $? = 1 ] && sleep 0.5; done")


def done_once(conn):
    """(agents whose one turn is done with one reply, turns in all)."""
    rows = conn.execute(
        "SELECT a.id, count(t.id), sum(CASE WHEN t.status = 'done' THEN 1 ELSE 0 END), "
        "(SELECT count(*) FROM messages m WHERE m.agent_id = a.id AND m.kind = 'assistant' "
        "AND m.void = 0) FROM agents a LEFT JOIN turns t ON t.agent_id = a.id "
        "WHERE a.id != ? GROUP BY a.id", (INIT_ID,)).fetchall()
    return sum(1 for _, turns, done, replies in rows if turns == done == replies == 1), \
        sum(r[1] for r in rows)


def one_run(url, shared, tmp):
    api = LimitedAPI(concurrency=CONCURRENCY, rate=RATE, burst=BURST, latency=LATENCY)
    agents(url, AGENTS, prompt="task {i}", model="openai:bench")
    env = dict(os.environ, AGENTCTL_DB=url, OPENAI_BASE_URL=api.url + "/v1",
               OPENAI_API_KEY="sk-bench", NO_PROXY="127.0.0.1", JOBS=str(JOBS),
               PATH=BIN + os.pathsep + os.environ["PATH"])
    if shared:
        env["AGENTCTL_CONCURRENCY"] = f"{api.url}={CONCURRENCY}"
    else:
        env["AGENTCTL_ENDPOINT_STATE"] = "off"
    conn = db.connect(url)
    start = time.monotonic()
    loops = [subprocess.Popen(["bash", "-c", LOOP], cwd=tmp, start_new_session=True,
                              env=dict(env, AGENTCTL_HOST=f"host{h}")) for h in range(LOOPS)]
    try:
        while done_once(conn)[0] < AGENTS and time.monotonic() - start < CEILING:
            time.sleep(0.5)
    finally:
        open(os.path.join(tmp, "stop"), "w").close()
        try:
            for loop in loops:
                loop.wait()
        except BaseException:       # interrupted: the loops go too, not left running
            for loop in loops:
                os.killpg(loop.pid, signal.SIGTERM)
            raise
    wall = time.monotonic() - start
    once, turns = done_once(conn)
    conn.close()
    counts = api.counts()
    arrivals = [t for t, _ in api.arrivals]
    answers = sorted(api.answers)
    span = (answers[-1] - min(arrivals)) if answers else 0.0
    throughput = len(answers) / span if span else 0.0
    api.close()
    return {"throughput": throughput, "share": throughput / api.limit_per_second(),
            "limit": api.limit_per_second(), "refused": counts["refused"],
            "over_concurrency": counts["over_concurrency"], "over_rate": counts["over_rate"],
            "most": counts["most_in_flight"], "once": once, "turns": turns, "wall": wall}


def line(label, r):
    print(f"{label:<34} throughput {r['throughput']:5.2f}/s = {r['share'] * 100:4.0f}% of "
          f"{r['limit']:.2f}/s; 429s {r['refused']:4d} ({r['over_concurrency']} over "
          f"concurrency, {r['over_rate']} over rate); most in flight {r['most']}; "
          f"done once {r['once']}/{AGENTS} in {r['turns']} turns; {r['wall']:.0f} s",
          flush=True)


def main():
    print(f"many runners, one provider: {LOOPS} agent-run --all -j {JOBS} loops, {AGENTS} "
          f"agents; the server allows {CONCURRENCY} in flight, {RATE:g} a second (burst "
          f"{BURST:g}), {LATENCY:g} s a call", flush=True)
    server = None
    try:
        for backend in BACKENDS:
            for mode in MODES:
                with tempfile.TemporaryDirectory() as tmp:
                    if backend == "postgresql":
                        if server is None:
                            from tests.pgserver import Server
                            server = Server()
                        url = server.database()
                    else:
                        url = os.path.join(tmp, "agents.db")
                    hosts = f" ({LOOPS} hosts)" if backend == "postgresql" else ""
                    label = f"{backend}{hosts}, {'shared' if mode == 'shared' else 'not shared'}:"
                    line(label, one_run(url, mode == "shared", tmp))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
