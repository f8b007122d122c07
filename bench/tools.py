"""make bench, external tools: what a program tool call costs against running the same
program directly, what its sandbox adds (whole, and by part), and what an MCP server's
start costs a turn, sandboxed and not.

The call is measured inside agent-run (the tool_runs rows, the process group, the
pipes), as the difference between a turn that makes N calls of the tool and the same
turn that makes none, per call, in pairs of turns; the direct run is the program
started N times by subprocess from Python. The agent works in a directory of its own,
and agentctl's files (its database, the tool path, the MCP configuration, the cache)
are elsewhere, as by default: a second figure puts them all in its working directory,
where each call's sandbox must cover each one (agentctl(7), SANDBOX). A turn of one
call pays what a turn's first sandboxed call sets up once (the sandbox's modules, the
proxy of agentctl's programs, bwrap and the seccomp filter found): its own figure.

The sandbox's parts (T3) are measured on the command Sandbox.wrap() makes for the same
agent as agent-run makes it (with its proxy, its database), started as agent-run starts
it (its handles opened, as root the handshake of its user namespace), against the same
command with a part left out; the parts are taken in turn in each round (so that each
difference sees the same load), and each figure is the median of the rounds'
differences. The goal of the whole: 10 ms a call (issue 42).
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
TURNS = 5           # pairs of turns for each T1 figure
GOAL = 10.0         # ms the sandbox may add to a call (issue 42)
TOOL = """#!/bin/sh
if [ "$1" = --describe ]; then
  echo '{"description": "Count words.", "parameters": {"type": "object", "properties": {}}}'
  exit 0
fi
cat >/dev/null; echo "3 words"
"""


class Place:
    """An agent's working directory (`cwd`) and where agentctl's files are (`state`): its
    tool path with the tool, its cache, its MCP configuration, the turns' databases."""

    def __init__(self, tmp, name, inside=False):
        self.cwd = os.path.join(tmp, name)
        self.state = self.cwd if inside else os.path.join(tmp, name + "-state")
        for directory in {self.cwd, self.state}:
            os.mkdir(directory)
            os.chmod(directory, 0o777)  # (as root, the tools run as nobody: agentctl(7))
        tools = os.path.join(self.state, "tools")
        os.mkdir(tools)
        self.tool = os.path.join(tools, "words")
        with open(self.tool, "w") as f:
            f.write(TOOL)
        os.chmod(self.tool, 0o755)
        self.env = dict(os.environ, AGENTCTL_TOOLS=tools,
                        XDG_CACHE_HOME=os.path.join(self.state, "cache"),
                        AGENTCTL_MCP=os.path.join(self.state, "none.json"))

    def db(self, tag):
        return os.path.join(self.state, f"{tag}.db")

    def turn(self, calls, tag, *flags):
        """Seconds agent-run takes over a turn of `calls` calls of the tool."""
        script = os.path.join(self.state, f"{tag}.jsonl")
        steps = [{"content": "", "tool_calls": [{"name": "words", "arguments": {}}] * calls}] \
            if calls else []
        with open(script, "w") as f:
            f.write(json.dumps({"steps": steps + [{"content": "done"}]}) + "\n")
        env = dict(self.env, AGENTCTL_DB=self.db(tag))
        subprocess.run([program("agent-fork"), "-n", "w", "--allow", "words", "--cwd",
                        self.cwd, *flags, "-m", f"scripted:{script}", "go"], env=env,
                       check=True, stdout=subprocess.DEVNULL)
        start = time.perf_counter()
        subprocess.run([program("agent-run"), "w"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        return time.perf_counter() - start

    def added(self, calls, tag):
        """(what the sandbox adds to a call, what a call costs unconfined), per call, in
        seconds: medians over pairs of turns, each against a turn of no call."""
        boxed, free = [], []
        for n in range(TURNS + 1):
            without = self.turn(0, f"{tag}-without{n}")
            sandboxed = self.turn(calls, f"{tag}-boxed{n}")
            unconfined = self.turn(calls, f"{tag}-free{n}", "--unconfined")
            boxed.append((sandboxed - unconfined) / calls)
            free.append((unconfined - without) / calls)
        return statistics.median(boxed[1:]), statistics.median(free[1:])   # (1st: warm-up)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        place = Place(tmp, "work")
        added, per_call = place.added(CALLS, "t1")
        direct = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(CALLS):
                subprocess.run([place.tool], input=b"{}", stdout=subprocess.DEVNULL,
                               check=True)
            direct.append((time.perf_counter() - start) / CALLS)
        direct_call = statistics.median(direct)
        print(f"T1. a program tool call inside agent-run: {(per_call + added) * 1000:.1f} ms "
              f"sandboxed, {per_call * 1000:.1f} ms unconfined; the program run directly: "
              f"{direct_call * 1000:.1f} ms (median of {TURNS} pairs of turns of {CALLS} calls)")
        line("T1. program tool call (unconfined) / the program run directly",
             per_call / direct_call, lambda v: (v <= 1.5, "<= 1.5x"))
        line("T1. what the sandbox adds to a call (ms)", added * 1000,
             lambda v: (v <= GOAL, f"<= {GOAL:g} ms"), unit=" ms")
        line("T1.   agentctl's files in its working directory (ms)",
             Place(tmp, "inside", inside=True).added(CALLS, "t1b")[0] * 1000, unit=" ms")
        line("T1.   a turn's only call, with what a turn sets up (ms)",
             place.added(1, "t1c")[0] * 1000, unit=" ms")
        parts(place)
        env = place.env
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
                subprocess.run([program("agent-fork"), "-n", "w", "--allow", allow, "--cwd",
                                place.cwd, *flags, "-m", "echo", "hi"], env=e, check=True,
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


def parts(place):
    """T3: the sandbox of a call, part by part, against the program run directly: the
    sandbox of T1's agent, as agent-run makes it (its proxy, its database)."""
    from agentctl.ids import new_id
    from agentctl.tools import programs, proxy, runas, sandbox
    from agentctl.tools.bwrap import open_parents
    from agentctl.tools.handles import Users
    os.environ.update({k: place.env[k] for k in ("XDG_CACHE_HOME", "AGENTCTL_TOOLS",
                                                 "AGENTCTL_MCP")})  # (paths.protected's)
    path, database = place.tool, place.db("t1-boxed1")
    env = programs.environment(new_id(), database)
    server = proxy.Server(env, place.cwd, peer_uids={runas.user()[0]}
                          if os.geteuid() == 0 else None)
    box = sandbox.Sandbox({"cwd": place.cwd, "ro": None, "net": None, "limits": None,
                           "rw": None, "env": None}, env, server, database)
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
    server.close()
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
