"""make bench, what exporting costs (agent-run(1), TRACING): `agent-run AGENT` with the
OpenTelemetry variables pointing at an OTLP/HTTP receiver on 127.0.0.1 (tests/otlp.py,
which decodes what it is sent), against the same command without them; paired runs,
one of each in turn (the order swapped every other pair), each run's CPU (user + system,
the operating system's accounting of the finished child) and wall time; a new prompt is
sent before each run, untimed. Two models: an API's (openai:, a server on 127.0.0.1 that
answers at once: tests/limitedapi.py) and the offline scripted model (a tool call, then
a reply), which alone loads no HTTP client of its own. Each line: the medians of the
pairs' ratios, against the goal of 1.2. Not a test: it prints.

BENCH_OTEL_RUNS (pairs, 20) and BENCH_OTEL_MODELS (api,scripted) change what runs.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.limitedapi import LimitedAPI  # noqa: E402
from tests.otlp import Receiver  # noqa: E402

RUNS = int(os.environ.get("BENCH_OTEL_RUNS", "20"))
MODELS = os.environ.get("BENCH_OTEL_MODELS", "api,scripted").split(",")
GOAL = 1.2
BIN = os.path.join(ROOT, "bin")
SCRIPT = {"steps": [{"content": "looking", "tool_calls": [
    {"id": "c1", "name": "ps", "arguments": {}}]}, {"content": "done"}]}
QUIET = ("OTEL_", "AGENT_ID", "PYTHONDONTWRITEBYTECODE")


def clean_environment():
    """The environment with no OpenTelemetry variable and no agent of the caller's; and
    the modules' bytecode written (by the warm-up run) and read, as a user's runs have
    it: compiling every module at every run would double a run's cost."""
    return {k: v for k, v in os.environ.items() if not k.startswith(QUIET)}


def timed(argv, env):
    """(CPU seconds, wall seconds) of one run of `argv`, which must exit 0."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"bench/otel.py: {' '.join(argv)}: exit {proc.returncode}: "
                         f"{err.decode(errors='replace').strip()}")
    if err:
        raise SystemExit(f"bench/otel.py: {' '.join(argv)}: said {err.decode().strip()}")
    return usage.ru_utime + usage.ru_stime, wall


def measure(model, env, receiver):
    """The pairs' (cpu ratio, wall ratio) and each side's medians."""
    run = [os.path.join(BIN, "agent-run"), "a"]
    send = [os.path.join(BIN, "agent-send"), "a", "again"]
    subprocess.run([os.path.join(BIN, "agent-fork"), "-n", "a", "-m", model, "begin"],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    exporting = dict(env, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url)
    subprocess.run(run, env=exporting, check=True, stdout=subprocess.DEVNULL)  # warm-up
    on, off = [], []
    for pair in range(RUNS):
        for side in ((on, exporting), (off, env))[::1 if pair % 2 == 0 else -1]:
            subprocess.run(send, env=env, check=True, stdout=subprocess.DEVNULL)
            side[0].append(timed(run, side[1]))
    cpu = statistics.median(a[0] / b[0] for a, b in zip(on, off))
    wall = statistics.median(a[1] / b[1] for a, b in zip(on, off))
    return cpu, wall, [statistics.median(x[i] for x in side) for side in (on, off)
                       for i in (0, 1)]


def main():
    print(f"exporting to OTLP/HTTP on 127.0.0.1 against not: agent-run, {RUNS} pairs",
          flush=True)
    receiver = Receiver()
    api = LimitedAPI(concurrency=64, rate=1e6, burst=1e6, latency=0, headers=False)
    try:
        for name in MODELS:
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(clean_environment(), AGENTCTL_DB=os.path.join(tmp, "agents.db"),
                           NO_PROXY="127.0.0.1", OPENAI_BASE_URL=api.url + "/v1",
                           OPENAI_API_KEY="sk-bench")
                if name == "api":
                    model = "openai:bench"
                else:
                    path = os.path.join(tmp, "script.jsonl")
                    with open(path, "w") as f:
                        f.write(json.dumps(SCRIPT) + "\n")
                    model = f"scripted:{path}"
                before = receiver.requests
                cpu, wall, (on_cpu, on_wall, off_cpu, off_wall) = measure(model, env, receiver)
                if receiver.requests - before < RUNS:
                    raise SystemExit("bench/otel.py: the receiver was sent less than a "
                                     "request a run")
                verdict = "within" if max(cpu, wall) <= GOAL else "over"
                print(f"{name + ':':<10} cpu {cpu:.2f}x ({on_cpu * 1000:.0f} ms against "
                      f"{off_cpu * 1000:.0f}), wall {wall:.2f}x ({on_wall * 1000:.0f} ms "
                      f"against {off_wall * 1000:.0f}): {verdict} the goal of {GOAL}x",
                      flush=True)
    finally:
        api.close()
        receiver.close()
    if receiver.errors:
        raise SystemExit(f"bench/otel.py: the receiver refused: {receiver.errors[0]}")


if __name__ == "__main__":
    main()
