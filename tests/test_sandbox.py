"""The sandbox of tool calls (agentctl(7), SANDBOX): each way out that a hostile model
tried is shown to work for an --unconfined agent and to fail for a sandboxed one; the
limits bind (as root too: CI runs as root); the programs a tool calls act as its
agent, and no more; where no sandbox can be made, a call fails and says how to fix it.
"""

import json
import os
import socketserver
import sys
import threading

import pytest

from agentctl.store.db import connect

from .conftest import (ROOT, agent, calling, fork, marker, needs, running, script, shell,
                       tool_results, wait_until)
from .test_external_tools import make_tool

PYTHON = sys.executable     # visible in every sandbox: agentctl runs on it


@pytest.fixture(autouse=True)
def bwrap():
    return needs("bwrap", "bubblewrap")


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A tool path of the test's own, a working directory, a place outside it, a home
    with a secret, and a key in agent-run's environment."""
    tools = tmp_path / "tools"
    tools.mkdir()
    monkeypatch.setenv("AGENTCTL_TOOLS", f"{tools}:{os.path.join(ROOT, 'agentctl', 'toolbox')}")
    monkeypatch.setenv("AGENTCTL_MCP", str(tmp_path / "no-mcp.json"))
    (tmp_path / "work").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    (tmp_path / "home" / ".ssh" / "id_ed25519").write_text("SECRET-KEY-MATERIAL\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-agent-run-only-0123456789")
    return tools


class Hello(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(b"hello from 127.0.0.1\n")


@pytest.fixture
def server():
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Hello) as s:
        threading.Thread(target=s.serve_forever, daemon=True).start()
        yield s.server_address[1]
        s.shutdown()


def attempt(tools, tmp_path, body, *flags, cwd=None, name="a"):
    """Fork an agent granted one tool, `attempt`, whose body is `body`; run its turn (an
    agent-run of its own, the key in its environment); the tool's result."""
    make_tool(tools, "attempt", body)
    fork("-n", name, "--allow", "attempt", "--cwd", str(cwd or tmp_path / "work"), *flags,
         "-m", script(tmp_path, calling([("attempt", {})]), name=f"{name}.jsonl"), "go")
    ran = shell(f"agent-run {name}")
    assert ran.code == 0, ran.err
    conn = connect(os.environ["AGENTCTL_DB"])
    result, = tool_results(conn, name)
    conn.close()
    return result


MODES = ["unconfined", "sandboxed"]


def flags(mode, *more):
    return (["--unconfined"] if mode == "unconfined" else []) + list(more)


@pytest.mark.parametrize("mode", MODES)
def test_write_outside_the_working_directory(world, tmp_path, mode):
    target = tmp_path / "outside" / "written"
    result = attempt(world, tmp_path, f"echo pwned > {target} && echo wrote", *flags(mode))
    if mode == "unconfined":
        assert result == "wrote\n" and target.read_text() == "pwned\n"
    else:
        assert result.startswith("error: exit status") and not target.exists()


@pytest.mark.parametrize("mode", MODES)
def test_read_a_secret_file_in_home(world, tmp_path, mode):
    result = attempt(world, tmp_path, f"cat {tmp_path}/home/.ssh/id_ed25519; ls -a ~",
                     *flags(mode))
    assert ("SECRET-KEY-MATERIAL" in result) == (mode == "unconfined")
    if mode == "sandboxed":     # its HOME is its private /tmp
        assert ".ssh" not in result


@pytest.mark.parametrize("mode", MODES)
def test_read_agent_runs_environment(world, tmp_path, mode):
    """The key reaches the database redacted even unconfined (tool results are); in the
    sandbox no process it can see holds it."""
    result = attempt(world, tmp_path,
                     "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -a API_KEY= "
                     "| sort -u; echo looked", *flags(mode))
    assert ("OPENAI_API_KEY=***" in result) == (mode == "unconfined")
    assert "sk-test-agent-run-only" not in result


@pytest.mark.parametrize("mode", MODES)
def test_open_the_database(world, tmp_path, mode, home):
    """The database in the working directory itself (the hardest place): the sandbox shows
    an empty read-only file in place of each of its files."""
    if str(home).startswith("postgresql://"):
        pytest.skip("a PostgreSQL database is no file: the sandbox's network rule covers it")
    result = attempt(world, tmp_path, f"head -c 15 {home}; echo; wc -c < {home}-wal; "
                     f"{PYTHON} -c \"import os; os.close(os.open('{home}-wal', os.O_WRONLY))\" "
                     "2>/dev/null || echo refused", *flags(mode), cwd=tmp_path)
    if mode == "unconfined":
        assert result.startswith("SQLite format 3")
    else:
        assert "SQLite" not in result and result.split() == ["0", "refused"], result
    assert agent("ps").code == 0        # and it is unharmed


@pytest.mark.parametrize("mode", MODES + ["sandboxed --net"])
def test_connect_to_a_server_on_127_0_0_1(world, tmp_path, server, mode):
    result = attempt(world, tmp_path, f"{PYTHON} -c \"import socket; print(socket."
                     f"create_connection(('127.0.0.1', {server}), 10).recv(100).decode())\"",
                     *flags(mode), *(["--net"] if mode.endswith("--net") else []))
    if mode.startswith("sandboxed"):     # its loopback is its own (--net: the proxy's way)
        assert "hello" not in result and "Connection refused" in result
    else:
        assert result.startswith("hello from 127.0.0.1")


# Forks until refused (at most 100), each child held until the call's end kills it, so
# that each one counts: n is how many it got.
FORK_LOOP = """
n = 0
for i in range(100):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    n += 1
"""
FORKS = f"""{PYTHON} -c "
import os, signal{FORK_LOOP}print('forked', n)
" """


@pytest.mark.parametrize("mode", MODES)
def test_a_fork_bomb_under_the_process_limit(world, tmp_path, mode):
    """As root too (CI's user), whom RLIMIT_NPROC does not bind: its tools' user, in
    a user namespace of the call's own, it binds (test_sandbox_procs.py)."""
    result = attempt(world, tmp_path, FORKS, *flags(mode, "--limit", "procs=20"))
    forked = int(result.split()[-1])
    if mode == "unconfined":
        assert forked == 100
    else:
        assert 0 < forked < 20, result


@pytest.mark.parametrize("mode", MODES)
def test_a_memory_hog(world, tmp_path, mode):
    result = attempt(world, tmp_path, f"{PYTHON} -c \"b = bytearray(2 << 30); print('got 2G')\"",
                     *flags(mode, "--limit", "mem=512M"))
    if mode == "unconfined":
        assert result == "got 2G\n"
    else:
        assert result.startswith("error: exit status 1") and "MemoryError" in result


@pytest.mark.parametrize("mode", MODES)
def test_a_file_larger_than_the_size_limit(world, tmp_path, mode):
    big = tmp_path / "work" / "big"
    result = attempt(world, tmp_path, "head -c 3000000 /dev/zero > big; echo $?",
                     *flags(mode, "--limit", "fsize=1M", "--shared"))
    if mode == "unconfined":
        assert big.stat().st_size == 3000000
    else:
        assert big.stat().st_size <= 1 << 20 and result != "0\n"


@pytest.mark.parametrize("mode", MODES)
def test_a_tool_that_leaves_a_daemon_behind(world, tmp_path, mode):
    """setsid -f leaves a process in no group of the call's: unconfined, it outlives the
    call (agent-run(1) says so); sandboxed, it dies with the call's pid namespace."""
    mark = marker()
    # setsid -f forks before its child leaves the session: the tool waits until it has
    left = (f'setsid -f sleep {mark}; for i in $(seq 1000); do pid=$(pgrep -xf "sleep {mark}"); '
            f'[ -n "$pid" ] && [ "$(ps -o sid= -p $pid)" != "$(ps -o sid= -p $$)" ] && break; '
            'done; echo left')
    result = attempt(world, tmp_path, left, *flags(mode))
    assert result == "left\n"
    try:
        if mode == "unconfined":
            assert running(mark)
        else:
            wait_until(lambda: not running(mark), "the daemon to die with the sandbox")
    finally:
        for pid in running(mark):
            os.kill(pid, 9)


def test_cpu_seconds_and_open_files_are_limited(world, tmp_path):
    hog = attempt(world, tmp_path, f"{PYTHON} -c 'while True: pass'", "--limit", "cpu=1")
    assert hog.startswith("error: exit status 137")        # killed at the hard limit
    files = attempt(world, tmp_path, f"{PYTHON} -c \"fs = [open('/dev/null') for i in "
                    "range(100)]\"", "--limit", "files=20", name="b")
    assert "Too many open files" in files


def test_a_childs_sandbox_is_never_wider_than_its_parents(world, tmp_path):
    work = tmp_path / "work"
    (work / "sub").mkdir()
    fork("-n", "lead", "--cwd", str(work), "--ro", "/usr/share", "--limit", "procs=50,mem=2G")
    fork("-p", "lead", "-n", "ok", "--cwd", str(work / "sub"), "--ro", "/usr/share/doc",
         "--ro", str(work), "--limit", "procs=10")
    for refused, error in (
            (["--cwd", str(tmp_path)], f"--cwd {tmp_path}: outside lead's working directory"),
            (["--ro", "/etc"], "--ro /etc: lead's tools can't read it"),
            (["--net"], "--net *: lead has no network, so it can't give it"),
            (["--limit", "procs=51"], "--limit procs: above lead's (mem=2G,procs=50)"),
            (["--limit", "cpu=unlimited"], "--limit cpu: above lead's")):
        made = agent("fork", "-p", "lead", "-n", "x", *refused)
        assert made.code == 3 and error in made.err, (refused, made)
    as_lead = shell("AGENT_ID=lead agent-fork -n y --unconfined")
    assert as_lead.code == 3 and "only the operator gives it" in as_lead.err
    rows = {r["name"]: r for r in json.loads(
        agent("ps", "-o", "name,cwd,ro,net,limits,unconfined", "--format", "json").out)}
    assert rows["ok"]["cwd"] == str(work / "sub")
    assert rows["ok"]["limits"]["procs"] == 10 and rows["ok"]["limits"]["mem"] == 2 << 30
    assert rows["ok"]["ro"] == ["/usr/share/doc", str(work)]


# -- the programs a tool calls -----------------------------------------------------------------

def test_a_tools_programs_act_as_its_agent_and_no_more(world, tmp_path):
    fork("-n", "lead", "-m", "echo")
    body = """
agent-send lead "from the tool"; echo "send=$?"
AGENT_ID=init agent-fork -p init -n evil --allow '*' -m echo; echo "fork-init=$?"
AGENT_ID= agent-kill lead; echo "kill=$?"
agent-fork -n kid --cwd / -m echo >/dev/null; echo "fork-root=$?"
agent-fork -n kid2 --net -m echo >/dev/null; echo "fork-net=$?"
agent-fork -n kid3 -m echo >/dev/null; echo "fork=$?"
agent-ps --db /tmp/other.db; echo "db=$?"
agent-run lead; echo "run=$?"
echo body | agent-doc put notes; echo "doc=$?"
agent-replay lead >/dev/null; echo "replay=$?"
"""
    result = attempt(world, tmp_path, body)
    codes = dict(line.split("=") for line in result.splitlines() if "=" in line
                 and not line.startswith("["))
    assert codes == {"send": "0", "fork-init": "3", "kill": "3", "fork-root": "3",
                     "fork-net": "3", "fork": "0", "db": "2", "run": "2", "doc": "0",
                     "replay": "3"}, result
    mail = agent("mail", "-r", "lead")
    assert "from the tool" in mail.out and "from a " in mail.out
    rows = {r["name"]: r for r in json.loads(agent("ps", "-a", "--format", "json").out)}
    assert "evil" not in rows and "kid" not in rows and "kid2" not in rows
    assert rows["kid3"]["parent"] == rows["a"]["id"]        # the tool's agent forked it
    assert not os.path.exists("/tmp/other.db")


# -- where no sandbox can be made --------------------------------------------------------------

def test_without_bwrap_a_call_fails_naming_the_fix_and_list_tools_says_so(world, tmp_path):
    make_tool(world, "attempt", "echo ran")
    fork("-n", "a", "--allow", "attempt", "--cwd", str(tmp_path / "work"),
         "-m", script(tmp_path, calling([("attempt", {})])), "go")
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink("/bin/sh", bare / "sh")
    listed = shell(f"PATH={bare} {PYTHON} -P -c 'import sys; from agentctl.cli.run import "
                   "main; sys.exit(main())' --list-tools a", env={"PYTHONPATH": ROOT})
    assert listed.code == 0
    assert "agent-run: warning: no sandbox: the sandbox needs bubblewrap (bwrap), 0.8" in listed.err
    ran = shell(f"PATH={bare} {PYTHON} -P -c 'import sys; from agentctl.cli.run import main; "
                "sys.exit(main())' a", env={"PYTHONPATH": ROOT})
    assert ran.code == 0, ran.err
    result, = tool_results(connect(os.environ["AGENTCTL_DB"]), "a")
    assert result.startswith("error: not run: the sandbox needs bubblewrap (bwrap), 0.8 or later: install ")
    assert "apt-get install bubblewrap" in result


def test_bwraps_refusals_are_explained():
    from agentctl.tools import bwrap, sandbox
    said = ("bwrap: No permissions to creating new namespace, likely because the kernel "
            "does not allow non-privileged user namespaces. On e.g. debian this can be "
            "enabled with 'sysctl kernel.unprivileged_userns_clone=1'.")
    assert bwrap.explain(said).endswith("sysctl -w kernel.unprivileged_userns_clone=1")
    assert "apparmor_restrict_unprivileged_userns=0" in bwrap.explain(
        "bwrap: setting up uid map: Permission denied")
    assert sandbox.problem() is None        # here, it can be made


def test_bwraps_version_is_asked_once_for_each_bwrap(tmp_path, monkeypatch):
    """bwrap --version runs once, not at each agent-run's first call: a mark in the private
    run-time directory, named by the program file's identity, says it is 0.8 or later.
    Another bwrap (one replaced, older) is asked again, and refused."""
    from agentctl.tools import bwrap
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    (tmp_path / "run").mkdir()
    fake, asked = tmp_path / "bwrap", tmp_path / "asked"

    def install(version):
        new = tmp_path / "new"
        new.write_text(f"#!/bin/sh\necho x >> {asked}\necho bubblewrap {version}\n")
        new.chmod(0o755)
        os.replace(new, fake)

    def found():        # as a new agent-run finds it
        monkeypatch.setattr(bwrap, "_found", {})
        return bwrap.path()
    install("0.8.0")
    assert found() == str(fake) == found()
    assert asked.read_text().count("x") == 1
    install("0.7.1")
    with pytest.raises(bwrap.Unavailable, match="0.8 or later"):
        found()
    with pytest.raises(bwrap.Unavailable, match="0.8 or later"):
        found()
    assert asked.read_text().count("x") == 3    # not 0.8: asked each time


def test_agent_set_narrows_the_sandbox_and_widens_it_within_the_ancestors(world, tmp_path):
    """agent-set, driven by the settings' declaration: an agent narrows its own sandbox;
    an ancestor gives a descendant what its own tools have; only the operator gives
    --unconfined."""
    work = tmp_path / "work"
    fork("-n", "lead", "--cwd", str(work), "--net", "--limit", "procs=50")
    fork("-p", "lead", "-n", "kid", "--no-net", "--limit", "procs=10")

    def as_(who, *words):
        return shell(f"AGENT_ID={who} agent-set " + " ".join(words))

    assert as_("kid", "kid", "limits=procs=5").code == 0                  # narrows its own
    assert as_("kid", "kid", "net=yes").code == 3                         # widens its own
    assert as_("lead", "kid", "net=yes", "limits=procs=50").code == 0      # what lead has
    over = as_("lead", "kid", "limits=procs=51")
    assert over.code == 3 and "limits=procs: above lead's (procs=50)" in over.err, over
    outside = as_("lead", "kid", f"ro={tmp_path / 'outside'}")
    assert outside.code == 3, outside
    assert as_("lead", "kid", f"ro={work}").code == 0           # its own cwd, read-only
    refused = as_("lead", "kid", "unconfined=yes")
    assert refused.code == 3 and "only the operator gives it" in refused.err
    assert agent("set", "kid", "unconfined=yes").code == 0        # the operator
    rows = {r["name"]: r for r in json.loads(
        agent("ps", "-o", "name,net,ro,limits,unconfined", "--format", "json").out)}
    assert rows["kid"]["net"] == ["*"] and rows["kid"]["unconfined"] is True
    assert rows["kid"]["limits"]["procs"] == 50 and rows["kid"]["ro"] == [str(work)]
