"""make bench, external tools: what a program tool call costs against running the same
program directly, what its sandbox adds (whole, and by part), and what an MCP server's
start costs a turn, sandboxed and not.

The call is measured inside agent-run (the tool_runs rows, the process group, the
pipes), as the difference between a turn that makes N calls of the tool and the same
turn that makes none, per call; the direct run is the program started N times by
subprocess from Python.

The sandbox's parts (T3) are measured on the command Sandbox.wrap() makes, started
as agent-run starts it (its handles opened, as root the handshake of its user
namespace), against the same command with a part left out; the parts are taken in
turn in each round (so that each difference sees the same load), and each figure is
the median of the rounds' differences. The goal of the whole: 10 ms a call (issue 42).
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

from bench import RUNS, line, program  # noqa: E402  (bench/bench.py, beside this file)

CALLS = 20
GOAL = 10.0         # ms the sandbox may add to a call (issue 42)
TOOL = """#!/bin/sh
if [ "$1" = --describe ]; then
  echo '{"description": "Count words.", "parameters": {"type": "object", "properties": {}}}'
  exit 0
fi
cat >/dev/null; echo "3 words"
"""


def turn_seconds(tmp, env, calls, tag, *flags):
    script = os.path.join(tmp, f"{tag}.jsonl")
    steps = [{"content": "", "tool_calls": [{"name": "words", "arguments": {}}] * calls}] \
        if calls else []
    with open(script, "w") as f:
        f.write(json.dumps({"steps": steps + [{"content": "done"}]}) + "\n")
    env = dict(env, AGENTCTL_DB=os.path.join(tmp, f"{tag}.db"))
    subprocess.run([program("agent-fork"), "-n", "w", "--allow", "words", "--cwd", tmp, *flags,
                    "-m", f"scripted:{script}", "go"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    start = time.perf_counter()
    subprocess.run([program("agent-run"), "w"], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)    # (as root, the tools run as nobody: agentctl(7), SANDBOX)
        tools = os.path.join(tmp, "tools")
        os.mkdir(tools)
        path = os.path.join(tools, "words")
        with open(path, "w") as f:
            f.write(TOOL)
        os.chmod(path, 0o755)
        env = dict(os.environ, AGENTCTL_TOOLS=tools, XDG_CACHE_HOME=os.path.join(tmp, "cache"),
                   AGENTCTL_MCP=os.path.join(tmp, "none.json"))
        boxed, free, without = [], [], []
        for n in range(5):
            boxed.append(turn_seconds(tmp, env, CALLS, f"boxed{n}"))
            free.append(turn_seconds(tmp, env, CALLS, f"free{n}", "--unconfined"))
            without.append(turn_seconds(tmp, env, 0, f"without{n}"))
        per_call = (statistics.median(free) - statistics.median(without)) / CALLS
        sandboxed = (statistics.median(boxed) - statistics.median(without)) / CALLS
        direct = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(CALLS):
                subprocess.run([path], input=b"{}", stdout=subprocess.DEVNULL, check=True)
            direct.append((time.perf_counter() - start) / CALLS)
        direct_call = statistics.median(direct)
        print(f"T1. a program tool call inside agent-run: {sandboxed * 1000:.1f} ms sandboxed, "
              f"{per_call * 1000:.1f} ms unconfined; the program run directly: "
              f"{direct_call * 1000:.1f} ms")
        line("T1. program tool call (unconfined) / the program run directly",
             per_call / direct_call, lambda v: (v <= 1.5, "<= 1.5x"))
        line("T1. what the sandbox adds to a call (ms)", (sandboxed - per_call) * 1000,
             lambda v: (v <= GOAL, f"<= {GOAL:g} ms"), unit=" ms")
        parts(tmp, path, env)
        config = os.path.join(tmp, "mcp.json")
        with open(config, "w") as f:
            json.dump({"mcpServers": {"notes": {"command": sys.executable, "args": [
                os.path.join(ROOT, "tests", "mcp_server.py")],
                "ro": [os.path.join(ROOT, "tests")]}}}, f)
        plain, served, served_free = [], [], []
        for n in range(5):
            for allow, into, flags in (("words", plain, ()), ("notes__add", served, ()),
                                       ("notes__add", served_free, ("--unconfined",))):
                db = os.path.join(tmp, f"mcp-{n}-{allow}-{len(flags)}.db")
                e = dict(env, AGENTCTL_DB=db, AGENTCTL_MCP=config)
                subprocess.run([program("agent-fork"), "-n", "w", "--allow", allow, "--cwd", tmp,
                                *flags, "-m", "echo", "hi"], env=e, check=True,
                               stdout=subprocess.DEVNULL)
                start = time.perf_counter()
                subprocess.run([program("agent-run"), "w"], env=e, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                into.append(time.perf_counter() - start)
        line("T2. an MCP server's start and stop, per turn, sandboxed (ms)",
             (statistics.median(served) - statistics.median(plain)) * 1000, unit=" ms")
        line("T2. an MCP server's start and stop, per turn, unconfined (ms)",
             (statistics.median(served_free) - statistics.median(plain)) * 1000, unit=" ms")


# bwrap's options that take one argument (BINDS take two, MADE and MODIFIERS one: bwrap.py)
ONE_ARGUMENT = ("--cap-drop", "--cap-add", "--seccomp", "--json-status-fd", "--chdir",
                "--remount-ro", "--info-fd", "--userns-block-fd")


def operations(argv):
    """bwrap's part of a wrapped command as (kind, words) in order: kind `namespaces`,
    `seccomp`, `system` (what comes before /proc), `proc`, `dev`, or `call` (the rest:
    its /tmp, working directory, covers, Python, program); and the command after."""
    from agentctl.tools import bwrap
    end = argv.index("--")
    ops, held, n, seen_proc = [], [], 1, False
    while n < end:
        word = argv[n]
        width = 3 if word in bwrap.BINDS else 2 if word in bwrap.MADE + bwrap.MODIFIERS \
            + ONE_ARGUMENT else 1
        words, n = argv[n:n + width], n + width
        if word in bwrap.MODIFIERS:
            held += words
            continue
        dest = words[-1] if width > 1 else ""
        if word == "--seccomp":
            kind = "seccomp"
        elif word in bwrap.BINDS + bwrap.MADE and dest.startswith("/proc"):
            kind, seen_proc = "proc", True
        elif word in bwrap.BINDS + bwrap.MADE and dest == "/dev":
            kind = "dev"
        elif word in bwrap.BINDS + bwrap.MADE or word in ("--chdir", "--remount-ro"):
            kind = "call" if seen_proc else "system"
        else:
            kind = "namespaces"
        ops.append((kind, held + words))
        held = []
    return ops, argv[end:]


def run(argv, env):
    """One start of a wrapped command as agent-run makes it; wall seconds."""
    from agentctl.tools import handles
    start = time.perf_counter()
    argv, fds, handshake = handles.opened(argv)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True,
                            pass_fds=fds)
    for fd in fds:
        os.close(fd)
    if handshake is not None:
        handshake.give()
    out, err = proc.communicate(b"{}")
    if proc.returncode != 0 or b"words" not in out:
        raise SystemExit(f"bench/tools.py: {argv[0]}: {err.decode(errors='replace')[-300:]}")
    return time.perf_counter() - start


def parts(tmp, path, env):
    """T3: the sandbox of a call, part by part, against the program run directly."""
    from agentctl.tools import sandbox
    from agentctl.tools.bwrap import open_parents
    from agentctl.tools.handles import Users
    os.environ["XDG_CACHE_HOME"] = env["XDG_CACHE_HOME"]    # (the filter agent-run made)
    box = sandbox.Sandbox({"cwd": tmp, "ro": None, "net": None, "limits": None, "rw": None,
                           "env": None}, env)
    prepared = box.wrap([path], None, path)
    ops, command = operations(prepared.argv)
    users = [w for w in prepared.argv if isinstance(w, Users)]
    tools = os.path.dirname(path)

    def bwrap(*kinds, more=()):
        argv = [prepared.argv[0]] + [w for kind, words in ops if kind in kinds
                                     for w in words if w not in users] + list(more) + command
        return open_parents(argv) if os.geteuid() == 0 else argv    # (as wrap() does)

    stages = [          # (what it adds, argv): each the one before and one part more
        ("the program run directly", [path]),
        ("setpriv (as root; else prlimit)", command[1:]),
        ("bwrap: its namespaces (and one bind of /)",
         bwrap("namespaces", more=["--ro-bind", "/", "/"])),
        ("the system, read-only, in place of /",
         bwrap("namespaces", "system", more=["--ro-bind", tools, tools])),
        ("/proc", bwrap("namespaces", "system", "proc", more=["--ro-bind", tools, tools])),
        ("/dev", bwrap("namespaces", "system", "proc", "dev", more=["--ro-bind", tools, tools])),
        ("its /tmp, working directory, covers, Python, program",
         bwrap("namespaces", "system", "proc", "dev", "call")),
        ("the seccomp filter", bwrap("namespaces", "system", "proc", "dev", "call", "seccomp")),
    ]
    if users:           # as root, the last part: what Sandbox.wrap() makes
        stages.append(("its user namespace: maps and limits (handshake)",
                       prepared.argv))
    rounds = []
    for _ in range(RUNS + 1):
        rounds.append([run(argv, box.environment) for _, argv in stages])
    rounds = rounds[1:]         # (the first warms the caches)
    started = time.perf_counter()
    for _ in range(RUNS):
        box.wrap([path], None, path).close()
    making = (time.perf_counter() - started) / RUNS
    prepared.close()
    floor = statistics.median(r[0] for r in rounds)
    print(f"T3. the sandbox of a call by part (median of {RUNS} rounds, each part against "
          f"the one before; the program run directly: {floor * 1000:.1f} ms)")
    for n, (label, _) in enumerate(stages[1:], 1):
        line(f"T3.   {label}", statistics.median(r[n] - r[n - 1] for r in rounds) * 1000,
             unit=" ms")
    line("T3.   agent-run's Sandbox.wrap() (arguments, covers)", making * 1000, unit=" ms")
    whole = statistics.median(r[-1] - r[0] for r in rounds) + making
    line("T3. the sandbox, whole: over the program run directly (ms)", whole * 1000,
         lambda v: (v <= GOAL, f"<= {GOAL:g} ms"), unit=" ms")


if __name__ == "__main__":
    main()
