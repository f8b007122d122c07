"""make bench, the event log: what events cost the hot paths, how fast agent-log lists,
how soon a follower sees a commit, and what an idle follower costs.

    BENCH_IDLE_SECONDS    how long the idle follower is watched (default 60)
"""

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import fresh, line, program  # noqa: E402  (bench/bench.py, beside this file)
from agentctl.ids import INIT_ID  # noqa: E402
from agentctl.ops import lifecycle  # noqa: E402
from agentctl.store import events, registry  # noqa: E402
from agentctl.store.db import transaction  # noqa: E402

SEND = """
import io, sys, time
sys.argv = ["agent-send", "--jsonl"]
if {off}:
    from agentctl.store import events
    events.record = lambda *a, **k: None
from agentctl.cli.send import main
data = open({payload!r}, "rb").read()
sys.stdin = io.TextIOWrapper(io.BytesIO(data))
start = time.perf_counter()
main(["--jsonl"])
print(time.perf_counter() - start, file=sys.stderr)
"""

LOOP = """
import sys, time
from agentctl.store import db, events, registry
from agentctl.store.db import transaction
from agentctl.ops import mail
if {off}:
    events.record = lambda *a, **k: None
conn = db.connect({path!r})
to = registry.resolve(conn, "t")
start = time.perf_counter()
with transaction(conn):
    for i in range({n}):
        mail.send(conn, None, ["t"], f"message {{i}}")
print(time.perf_counter() - start, file=sys.stderr)
"""


def timed(script, env):
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, cwd=ROOT, check=True)
    return float(proc.stderr.strip().splitlines()[-1])


def with_and_without(tmp, tag, count, script):
    """Median rates (per second) of `script` on a fresh database with agent t, with
    events and with events.record made a no-op, alternating, three runs each."""
    rates = {}
    for i, off in enumerate((True, False) * 3):
        path, conn = fresh(tmp, f"{tag}-{i}.db")
        with transaction(conn):
            lifecycle.fork(conn, registry.get(conn, INIT_ID), name="t")
        conn.close()
        seconds = timed(script(off, path), dict(os.environ, AGENTCTL_DB=path))
        rates.setdefault(off, []).append(count / seconds)
    return statistics.median(rates[False]), statistics.median(rates[True])


def send_cost(tmp):
    n = 100_000
    payload = os.path.join(tmp, "mails.jsonl")
    with open(payload, "w") as f:
        f.writelines(json.dumps({"to": "t", "body": f"message {i}"}) + "\n" for i in range(n))
    with_, without = with_and_without(tmp, "send", n,
                                      lambda off, path: SEND.format(off=off, payload=payload))
    print(f"E1. bulk agent-send --jsonl of {n:,}: {with_:,.0f} mails/s with events, "
          f"{without:,.0f} without")
    line("E1. bulk send with events / without", with_ / without * 100,
         lambda v: (v >= 90, ">= 90%"), unit="%")
    m = 10_000
    with_, without = with_and_without(tmp, "loop", m,
                                      lambda off, path: LOOP.format(off=off, path=path, n=m))
    print(f"E2. {m:,} single sends in one transaction (the send tool's path, an event "
          f"each): {with_:,.0f} mails/s with events, {without:,.0f} without")
    line("E2. single sends with events / without", with_ / without * 100, unit="%")


def listing(tmp):
    n = 100_000
    path, conn = fresh(tmp, "log.db")
    with transaction(conn):
        ids = [lifecycle.fork(conn, registry.get(conn, INIT_ID), name=f"a{i}", model="echo")
               for i in range(100)]
        for i in range(n - 100):
            events.record(conn, ids[i % 100], "turn-end", turn=i, model="echo", outcome="done",
                          steps=2, input_tokens=120, output_tokens=45, mail_read=1,
                          seconds=1.25)
    conn.close()
    env = dict(os.environ, AGENTCTL_DB=path)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        out = subprocess.run([program("agent-log")], env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    assert out.stdout.count(b"\n") == n, out.stdout.count(b"\n")
    line(f"E3. agent-log, {n:,} events as text (seconds)", statistics.median(times),
         lambda v: (v < 1.0, "< 1 s"), unit=" s")
    times = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([program("agent-log"), "--format", "jsonl"], env=env,
                       stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    line(f"E3. agent-log, {n:,} events as jsonl (seconds)", statistics.median(times), unit=" s")
    return path


def follow(tmp):
    path, conn = fresh(tmp, "follow.db")
    with transaction(conn):
        agent = lifecycle.fork(conn, registry.get(conn, INIT_ID), name="a")
    env = dict(os.environ, AGENTCTL_DB=path)
    follower = subprocess.Popen([program("agent-log"), "-f", "-n", "0", "--format", "jsonl"],
                                env=env, stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    latencies = []
    for _ in range(30):
        with transaction(conn):
            events.record(conn, agent, "status", old="S", new="S")
        committed = time.time()
        follower.stdout.readline()
        latencies.append(time.time() - committed)
        time.sleep(random.uniform(0, 0.1))      # not in step with the follower's polls
    line("E4. agent-log -f: a commit to its line, median (ms)",
         statistics.median(latencies) * 1000, unit=" ms")
    line("E4. agent-log -f: a commit to its line, worst of 30 (ms)", max(latencies) * 1000,
         lambda v: (v <= 250, "<= 250 ms"), unit=" ms")
    seconds = float(os.environ.get("BENCH_IDLE_SECONDS", "60"))
    before = cpu(follower.pid)
    time.sleep(seconds)
    used = cpu(follower.pid) - before
    follower.kill()
    follower.wait()
    line(f"E5. idle agent-log -f: CPU over {seconds:g} s (ms; it polls every 0.1 s)",
         used * 1000, lambda v: (v <= seconds * 10, f"<= {seconds * 10:g} ms (1%)"), unit=" ms")


def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        send_cost(tmp)
        listing(tmp)
        follow(tmp)
    print(f"(events bench took {time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
