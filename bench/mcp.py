"""make bench, MCP servers: what a turn pays for the MCP servers its agent is granted.

A turn of an agent granted two servers that calls none of their tools, against the same
turn with no MCP configured (their tools come from the cache: no server starts); a
turn that calls one tool of one of them (that server starts, not the other); and the
turn of the first listing (both start). The servers are the SDK's own (Python), and
the official reference servers from npm when tests/npm/install.sh has installed them
(node). Each figure is the median of RUNS whole agent-run processes. What a call costs
over the server's own start (its process started, the handshake and the call answered,
outside any sandbox) is the goal's figure: at most 0.3 s. And a Streamable HTTP
server's: a turn that calls one of its tools, the agent's first (the handshake) and
its next (the session resumed), over a turn with no MCP: at most 0.3 s.
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
from agentctl.tools import mcpwire  # noqa: E402

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


def own_start(entry, tool, arguments):
    """Seconds from a server's start to its answer to one call, outside the sandbox."""
    start = time.perf_counter()
    with open(os.devnull, "w") as errlog:
        session = mcpwire.Stdio([entry["command"], *entry["args"]], entry.get("env", {}),
                                None, errlog)
    try:
        session.handshake(30)
        session.call_tool(tool, arguments, 30)
        return time.perf_counter() - start
    finally:
        session.close()


def turn(tmp, env, allow, calls, tag, again=False):
    """Seconds of one agent-run of a new agent granted `allow` (`again`: of agent `tag`,
    sent another message), calling `calls`."""
    script = os.path.join(tmp, f"{tag}.jsonl")
    steps = [{"content": "", "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}] \
        if calls else []
    with open(script, "w") as f:
        f.write(json.dumps({"steps": steps + [{"content": "done"}]}) + "\n")
    if again:
        for argv in (["agent-set", tag, f"model=scripted:{script}"],
                     ["agent-send", tag, "again"]):
            subprocess.run([program(argv[0]), *argv[1:]], env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        subprocess.run([program("agent-fork"), "-n", tag,
                        *sum((["--allow", a] for a in allow), []), "--cwd", tmp, "-m",
                        f"scripted:{script}", "go"], env=env, check=True,
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
        plain, warm, called, own = [], [], [], []
        for n in range(RUNS):
            plain.append(turn(tmp, none, allow, [], f"plain{n}"))
            warm.append(turn(tmp, both, allow, [], f"warm{n}"))
            called.append(turn(tmp, both, allow, [(f"one__{tool}", arguments)], f"call{n}"))
            own.append(own_start(entries["one"], tool, arguments))
        p, w, c, k, o = (statistics.median(x) for x in (plain, warm, called, cold, own))
        print(f"M1. {label}: a turn with no MCP {p * 1000:.0f} ms; granted two servers, "
              f"calling none {w * 1000:.0f} ms; calling one tool {c * 1000:.0f} ms; the first "
              f"listing (both start) {k * 1000:.0f} ms")
        line(f"M1. {label}: two servers, no call / no MCP", w / p,
             lambda v: (v <= 1.1, "<= 1.1x"))
        line(f"M1. {label}: one call pays one start (ms)", (c - p) * 1000, unit=" ms")
        line(f"M1. {label}: the server's own start and call, outside (ms)", o * 1000,
             unit=" ms")
        line(f"M1. {label}: what a call costs over the server's own start (ms)",
             (c - p - o) * 1000, lambda v: (v <= 300, "<= 300 ms"), unit=" ms")
        line(f"M1. {label}: the first listing, two starts (ms)", (k - p) * 1000, unit=" ms")


def measure_http():
    """A turn calling a tool of the SDK's server over Streamable HTTP, against a turn
    with no MCP: the agent's first (the handshake) and its next (its session resumed)."""
    with tempfile.TemporaryDirectory() as tmp:
        portfile = os.path.join(tmp, "port")
        server = subprocess.Popen([sys.executable, SERVER, "http", portfile],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while not os.path.exists(portfile) and time.monotonic() < deadline:
                time.sleep(0.05)
            with open(portfile) as f:
                url = f"http://127.0.0.1:{f.read()}/mcp"
            config = os.path.join(tmp, "mcp.json")
            with open(config, "w") as f:
                json.dump({"mcpServers": {"one": {"url": url}}}, f)
            base = dict(os.environ, AGENTCTL_DB=os.path.join(tmp, "agents.db"),
                        XDG_CACHE_HOME=os.path.join(tmp, "cache"))
            none = dict(base, AGENTCTL_MCP=os.path.join(tmp, "none.json"))
            one = dict(base, AGENTCTL_MCP=config)
            call = [("one__add", {"a": 1, "b": 2})]
            turn(tmp, one, ["one__*"], call, "listing")     # (listed once, then cached)
            plain, first, resumed = [], [], []
            for n in range(RUNS):
                plain.append(turn(tmp, none, ["one__*"], [], f"plain{n}"))
                first.append(turn(tmp, one, ["one__*"], call, f"http{n}"))
                resumed.append(turn(tmp, one, ["one__*"], call, f"http{n}", again=True))
        finally:
            server.terminate()
            server.wait()
    p, f, r = (statistics.median(x) for x in (plain, first, resumed))
    print(f"M2. Streamable HTTP: a turn with no MCP {p * 1000:.0f} ms; calling one tool, "
          f"the agent's first turn {f * 1000:.0f} ms, its next {r * 1000:.0f} ms")
    line("M2. Streamable HTTP: a call, the handshake made, over no MCP (ms)", (f - p) * 1000,
         lambda v: (v <= 300, "<= 300 ms"), unit=" ms")
    line("M2. Streamable HTTP: a call, its session resumed, over no MCP (ms)",
         (r - p) * 1000, lambda v: (v <= 300, "<= 300 ms"), unit=" ms")


def main():
    measure_http()
    measure("SDK's server (Python)", python_servers())
    found = node_servers()
    if found is None:
        print("M1. the npm reference servers: not installed (tests/npm/install.sh): skipped")
    else:
        measure("reference server (node)", found)


if __name__ == "__main__":
    main()
