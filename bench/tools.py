"""make bench, external tools: what a program tool call costs against running the same
program directly, what its sandbox adds, and what an MCP server's start costs a turn,
sandboxed and not.

The call is measured inside agent-run (the tool_runs rows, the process group, the
pipes), as the difference between a turn that makes N calls of the tool and the same
turn that makes none, per call; the direct run is the program started N times by
subprocess from Python.
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

from bench import line, program  # noqa: E402  (bench/bench.py, beside this file)

CALLS = 20
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
             lambda v: (v < 15, "< 15 ms"), unit=" ms")
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


if __name__ == "__main__":
    main()
