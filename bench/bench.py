"""make bench: one line per figure, each a ratio against its baseline measured
in the same run (medians over repeated runs). Not a test: it prints, and
the figures go in the notes that change performance."""

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agentctl.store import db, history, registry  # noqa: E402
from agentctl.ops import lifecycle
from agentctl.store.db import transaction  # noqa: E402
from agentctl.ids import INIT_ID, new_id  # noqa: E402
from tests import localhttp  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)
PYTHON = sys.executable
RUNS = int(os.environ.get("BENCH_RUNS", "25"))
PAIRS = max(RUNS, 30)       # start-up: pairs of runs, the program's and its floor's
FLOOR = [PYTHON, "-c", "import click, sqlite3"]     # what any click program over SQLite pays


def median_time(fn, runs=RUNS):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def command(args, env, stdin=None):
    def go():
        subprocess.run(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       input=stdin)
    return go


def program(name):
    return os.path.join(VENV_BIN, name)


def fresh(directory, name):
    path = os.path.join(directory, name)
    conn = db.connect(path)
    return path, conn


def line(label, value, target=None, unit="x", spread=None):
    verdict = ""
    if target is not None:
        ok, text = target(value)
        verdict = f"   target {text}: {'ok' if ok else 'MISSED'}"
    spread = f" ({spread[0]:.2f}-{spread[1]:.2f})" if spread else ""
    print(f"{label:<58} {value:10.2f}{unit}{spread}{verdict}", flush=True)


def cpu_seconds(args, env):
    """The CPU time, user and system, the kernel counted for one run of `args`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def against_floor(args, env, floor=FLOOR, pairs=PAIRS):
    """The CPU time of `args` over the floor's, run in turn (floor, program, floor ...)
    so that each pair sees the same load: the median of the pairs' ratios, and the
    middle half of them (a wide one: the machine was busy)."""
    ratios = []
    for _ in range(pairs + 1):
        base, cost = cpu_seconds(floor, env), cpu_seconds(args, env)
        ratios.append(cost / base if base else float("inf"))
    ratios = ratios[1:]     # the first pair warms the file cache
    low, _, high = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), (low, high)


def at_most(limit):
    return lambda v: (v <= limit, f"<= {limit}x")


def at_least(limit, unit=""):
    return lambda v: (v >= limit, f">= {limit}{unit}")


# Each program as a loop or cron runs it, over a database of a few agents, and the goal
# of its CPU time over the floor's: agent-send's 1.2x and agent-ps's 1.3x as they were
# set, every other program's as agent-ps's (agent-run's start is the turn's: none).
STARTUP = [
    ("agent-send", ["a", "hi"], 1.2), ("agent-ps", ["-q"], 1.3), ("agent-ps", [], 1.3),
    ("agent-why", ["a"], 1.3), ("agent-log", ["-q"], 1.3), ("agent-fork", ["-p", "a"], 1.3),
    ("agent-kill", ["-s", "CONT", "a"], 1.3), ("agent-mail", ["-c", "a"], 1.3),
    ("agent-replay", ["a"], 1.3), ("agent-wait", ["--timeout", "0", "a"], 1.3),
    ("agent-doc", ["put", "a", "hi"], 1.3), ("agent-run", ["--help"], None),
]


def startup(tmp):
    # the checkout's modules as bytecode (PYTHONDONTWRITEBYTECODE keeps a start from
    # writing it), as an installed copy has them
    subprocess.run([PYTHON, "-m", "compileall", "-q", os.path.join(ROOT, "agentctl")],
                   check=True)
    path, conn = fresh(tmp, "small.db")
    with transaction(conn):
        a = lifecycle.fork(conn, registry.get(conn, INIT_ID), name="a", model="echo")
        history.append(conn, a, "user", "hello")
    conn.close()
    env = dict(os.environ, AGENTCTL_DB=path)
    base = median_time(command([PYTHON, "-c", "pass"], env))
    floor = median_time(command(FLOOR, env))
    print(f"python3 -c pass: {base * 1000:.1f} ms; click floor (import click, sqlite3): "
          f"{floor * 1000:.1f} ms, {floor / base:.2f}x. Start-up: CPU time over the floor's, "
          f"median of {PAIRS} pairs (the middle half of them)")
    for name, args, limit in STARTUP:
        ratio, spread = against_floor([program(name)] + args, env)
        line(f"1. start-up {' '.join([name] + args)} vs click floor", ratio,
             at_most(limit) if limit else None, spread=spread)
    return base, env


def installed_startup(tmp, env):
    """Start-up as a user gets it: the console scripts of a copy pip installed into a
    plain virtual environment (the checkout's editable install adds path hooks to every
    start), against the floor of any click program in that same environment."""
    venv = os.path.join(tmp, "installed")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--quiet",
                    "--disable-pip-version-check", ROOT], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    python = os.path.join(venv, "bin", "python")
    print("installed copy: start-up against its own click floor")
    for name, args, limit in STARTUP:
        ratio, spread = against_floor([os.path.join(venv, "bin", name)] + args, env,
                                      floor=[python] + FLOOR[1:])
        line(f"1b. installed {' '.join([name] + args)} vs click floor", ratio,
             at_most(limit) if limit else None, spread=spread)


def echo_turn(tmp, base):
    path, conn = fresh(tmp, "run.db")
    ids = []
    with transaction(conn):
        for _ in range(RUNS):
            ids.append(lifecycle.fork(conn, registry.get(conn, INIT_ID), model="echo",
                                     prompt="hello"))
    conn.close()
    env = dict(os.environ, AGENTCTL_DB=path)
    times = []
    for agent_id in ids:
        start = time.perf_counter()
        subprocess.run([program("agent-run"), agent_id], env=env, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    line("6. agent-run (echo model, one turn) vs python3 -c pass",
         statistics.median(times) / base, at_most(8.0))


class _Chat(localhttp.Handler):
    """An OpenAI-compatible server that answers every request at once with one short
    reply, keeping the last body it was sent (the floor posts the same)."""

    def post(self, server, raw):
        server.body = raw
        reply = {"id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000,
                 "model": "gpt-test", "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant",
                                                               "content": "done"}}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}
        self.answer(200, json.dumps(reply).encode(), "application/json")


TURN_FLOOR = ("import os, requests; requests.post(os.environ['OPENAI_BASE_URL'] + "
              "'/chat/completions', data=open(os.environ['BENCH_BODY'], 'rb').read(), "
              "headers={'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY'], "
              "'Content-Type': 'application/json'}).json()")


def usage_of(args, env):
    """(CPU seconds, wall seconds) of one run of `args`, which must exit 0."""
    start = time.monotonic()
    proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench: {' '.join(args[:2])}: exit {os.waitstatus_to_exitcode(status)}")
    return usage.ru_utime + usage.ru_stime, time.monotonic() - start


def api_turn(tmp):
    """agent-run of one turn of an API's model (a server on 127.0.0.1 that answers at
    once), a message sent before each run (untimed), against the floor: a fresh python
    -c that imports requests and posts the same body to the same server. Paired runs,
    in turn (the order swapped every other pair): the medians of the pairs' ratios."""
    server = localhttp.LocalServer(_Chat)
    body = os.path.join(tmp, "body.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENT_ID"))}
    env.update(AGENTCTL_DB=os.path.join(tmp, "turn.db"), OPENAI_BASE_URL=server.url + "/v1",
               OPENAI_API_KEY="sk-bench", NO_PROXY="127.0.0.1", BENCH_BODY=body)
    try:
        subprocess.run([program("agent-fork"), "-n", "a", "-m", "openai:gpt-test", "hello"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        run, send = [program("agent-run"), "a"], [program("agent-send"), "a", "again"]
        floor = [PYTHON, "-c", TURN_FLOOR]
        subprocess.run(run, env=env, check=True, stdout=subprocess.DEVNULL)     # warm-up
        ratios = []
        for pair in range(PAIRS):
            subprocess.run(send, env=env, check=True, stdout=subprocess.DEVNULL)
            with open(body, "wb") as f:
                f.write(server.body)      # the body the last turn sent
            if pair % 2:
                base, cost = usage_of(floor, env), usage_of(run, env)
            else:
                cost, base = usage_of(run, env), usage_of(floor, env)
            ratios.append((cost[0] / base[0], cost[1] / base[1]))
    finally:
        server.close()
    for i, what in ((0, "CPU"), (1, "wall")):
        values = [r[i] for r in ratios]
        low, _, high = statistics.quantiles(values, n=4)
        line(f"7. agent-run (openai, one turn) vs requests.post floor, {what}",
             statistics.median(values), at_most(1.15), spread=(low, high))


def bulk_send(tmp):
    n = 100_000
    path, conn = fresh(tmp, "bulk.db")
    with transaction(conn):
        target = lifecycle.fork(conn, registry.get(conn, INIT_ID), name="t")
    conn.close()
    payload = "".join(json.dumps({"to": "t", "body": f"message {i}"}) + "\n"
                      for i in range(n)).encode()
    env = dict(os.environ, AGENTCTL_DB=path)
    start = time.perf_counter()
    subprocess.run([program("agent-send"), "--jsonl"], env=env, input=payload,
                   stdout=subprocess.DEVNULL, check=True)
    send_rate = n / (time.perf_counter() - start)
    raw_path, raw = fresh(tmp, "raw.db")
    rows = [(None, target, "mail", f"message {i}", time.time()) for i in range(n)]
    raw.execute("INSERT INTO agents (id, parent_id, forked_from, fork_msg_id, created_at) "
                "VALUES (?, ?, ?, 0, 0)", (target, INIT_ID, INIT_ID))
    start = time.perf_counter()
    for i in range(0, n, 1000):
        raw.execute("BEGIN")
        raw.executemany("INSERT INTO mail (sender_id, recipient_id, kind, body, created_at) "
                        "VALUES (?, ?, ?, ?, ?)", rows[i:i + 1000])
        raw.execute("COMMIT")
    raw_rate = n / (time.perf_counter() - start)
    raw.close()
    print(f"2. bulk agent-send --jsonl: {send_rate:,.0f} mails/s; raw batched inserts: "
          f"{raw_rate:,.0f} rows/s")
    line("2. bulk send throughput (mails/s)", send_rate, at_least(100_000, " mails/s"), unit="")
    line("2. bulk send / raw insert rate", send_rate / raw_rate * 100,
         lambda v: (v >= 40, ">= 40%"), unit="%")


def deep_replay(tmp):
    path, conn = fresh(tmp, "deep.db")
    chain = []
    with transaction(conn):
        parent = registry.get(conn, INIT_ID)
        for depth in range(100):
            child = lifecycle.fork(conn, parent)
            conn.executemany("INSERT INTO messages (agent_id, kind, content, created_at) "
                             "VALUES (?, 'user', ?, 0)",
                             [(child, f"message {depth}.{i}") for i in range(1000)])
            chain.append(child)
            parent = registry.get(conn, child)
    leaf = registry.get(conn, chain[-1])
    count = len(history.replay(conn, leaf))
    marks = ",".join("?" * len(chain))
    ours = median_time(lambda: history.replay(conn, registry.get(conn, chain[-1])), 7)
    raw = median_time(lambda: conn.execute(
        f"SELECT id, agent_id, kind, content, tool_name, tool_call_id, turn_id, created_at "
        f"FROM messages WHERE agent_id IN ({marks}) ORDER BY id", chain).fetchall(), 7)
    line(f"3. replay depth 100, {count:,} messages vs raw SQL read", ours / raw, at_most(2.0))
    conn.close()


def big_ps(tmp, base):
    def build(name, total, alive):
        path, conn = fresh(tmp, name)
        with transaction(conn):
            conn.executemany(
                "INSERT INTO agents (id, parent_id, forked_from, fork_msg_id, status, created_at) "
                "VALUES (?, ?, ?, 0, ?, ?)",
                [(new_id(), INIT_ID, INIT_ID, "S" if i < alive else "X", i) for i in range(total)])
        conn.close()
        return dict(os.environ, AGENTCTL_DB=path)
    small = median_time(command([program("agent-ps")], build("ps1k.db", 1000, 1000)), 9)
    large = median_time(command([program("agent-ps")], build("ps100k.db", 100_000, 1000)), 9)
    line("4. agent-ps, 100k agents (1k alive) vs 1k agents", large / small, at_most(1.5))


def fork_cost(tmp):
    path, conn = fresh(tmp, "fork.db")
    with transaction(conn):
        init = registry.get(conn, INIT_ID)
        short = lifecycle.fork(conn, init, name="short")
        long_ = lifecycle.fork(conn, init, name="long")
        conn.executemany("INSERT INTO messages (agent_id, kind, content, created_at) VALUES (?, 'user', 'x', 0)",
                         [(short,)] * 10 + [(long_,)] * 100_000)
    conn.close()
    env = dict(os.environ, AGENTCTL_DB=path)
    a = median_time(command([program("agent-fork"), "-p", "short"], env))
    b = median_time(command([program("agent-fork"), "-p", "long"], env))
    line("5. agent-fork of 100k-message agent vs 10-message agent", b / a, at_most(1.2))


def main():
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        base, env = startup(tmp)
        installed_startup(tmp, env)
        echo_turn(tmp, base)
        api_turn(tmp)
        bulk_send(tmp)
        deep_replay(tmp)
        big_ps(tmp, base)
        fork_cost(tmp)
    print(f"(bench took {time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
