"""make bench, MCP servers: what a turn pays for the MCP servers its agent is granted.

A turn of an agent granted two servers that calls none of their tools, against the same
turn with no MCP configured (their tools come from the cache: no server starts); a
turn that calls one tool of one of them (that server starts, not the other); and the
turn of the first listing (both start). The servers are the SDK's own (Python), and
the official reference servers from npm when tests/npm/install.sh has installed them
(node). Each figure is the median of RUNS whole agent-run processes.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "npm"))

from bench import line, program  # noqa: E402  (bench/bench.py, beside this file)
from npmdir import where  # noqa: E402

RUNS = 7
SERVER = os.path.join(ROOT, "tests", "mcp_server.py")


def python_servers():
    entry = {"command": sys.executable, "args": [SERVER], "ro": [os.path.join(ROOT, "tests")]}
    return {"one": entry, "two": dict(entry, env={"WHICH": "two"})}, "add", {"a": 1, "b": 2}


def node_servers():
    modules = os.path.join(where(), "node_modules")
    node = shutil.which("node")
    if not node or not os.path.exists(os.path.join(where(), ".installed")):
        return None
    index = os.path.join(modules, "@modelcontextprotocol", "server-everything", "dist",
                         "index.js")
    entry = {"command": node, "args": [index, "stdio"], "ro": [modules]}
    return {"one": entry, "two": dict(entry, env={"WHICH": "two"})}, "get-sum", {"a": 1, "b": 2}


def turn(tmp, env, allow, calls, tag):
    """Seconds of one agent-run of a new agent granted `allow`, calling `calls`."""
    script = os.path.join(tmp, f"{tag}.jsonl")
    steps = [{"content": "", "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}] \
        if calls else []
    with open(script, "w") as f:
        f.write(json.dumps({"steps": steps + [{"content": "done"}]}) + "\n")
    subprocess.run([program("agent-fork"), "-n", tag, *sum((["--allow", a] for a in allow), []),
                    "--cwd", tmp, "-m", f"scripted:{script}", "go"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.perf_counter()
    subprocess.run([program("agent-run"), tag], env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(label, servers):
    entries, tool, arguments = servers
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)    # (as root, the tools run as nobody: agentctl(7), SANDBOX)
        config = os.path.join(tmp, "mcp.json")
        with open(config, "w") as f:
            json.dump({"mcpServers": entries}, f)
        base = dict(os.environ, AGENTCTL_DB=os.path.join(tmp, "agents.db"),
                    XDG_CACHE_HOME=os.path.join(tmp, "cache"),
                    AGENTCTL_TOOLS=os.path.join(ROOT, "agentctl", "toolbox"))
        none = dict(base, AGENTCTL_MCP=os.path.join(tmp, "none.json"))
        both = dict(base, AGENTCTL_MCP=config)
        allow = ["one__*", "two__*", "read_file"]
        cold = []
        for n in range(3):          # the first listing: both servers start
            shutil.rmtree(os.path.join(tmp, "cache"), ignore_errors=True)
            cold.append(turn(tmp, both, allow, [], f"cold{n}"))
        plain, warm, called = [], [], []
        for n in range(RUNS):
            plain.append(turn(tmp, none, allow, [], f"plain{n}"))
            warm.append(turn(tmp, both, allow, [], f"warm{n}"))
            called.append(turn(tmp, both, allow, [(f"one__{tool}", arguments)], f"call{n}"))
        p, w, c, k = (statistics.median(x) for x in (plain, warm, called, cold))
        print(f"M1. {label}: a turn with no MCP {p * 1000:.0f} ms; granted two servers, "
              f"calling none {w * 1000:.0f} ms; calling one tool {c * 1000:.0f} ms; the first "
              f"listing (both start) {k * 1000:.0f} ms")
        line(f"M1. {label}: two servers, no call / no MCP", w / p,
             lambda v: (v <= 1.1, "<= 1.1x"))
        line(f"M1. {label}: one call pays one start (ms)", (c - p) * 1000, unit=" ms")
        line(f"M1. {label}: the first listing, two starts (ms)", (k - p) * 1000, unit=" ms")


def main():
    measure("SDK's server (Python)", python_servers())
    found = node_servers()
    if found is None:
        print("M1. the npm reference servers: not installed (tests/npm/install.sh): skipped")
    else:
        measure("reference server (node)", found)


if __name__ == "__main__":
    main()
