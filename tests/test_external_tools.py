"""External tools: programs on the tool path, MCP servers, grants down the tree,
confinement, and calls to the outside that run at most once."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from agentctl import spawn
from agentctl.store.db import connect

from .conftest import (PATIENCE, ROOT, agent, calling, ended, fork, marker, offered, running,
                       script, shell, started, tool_results, wait_until)

TOOL = """#!/bin/sh
if [ "$1" = --describe ]; then
    echo '{DESCRIBE}'
    [ -n "$DESCRIBED" ] && echo x >> "$DESCRIBED"
    exit 0
fi
{BODY}
"""


def make_tool(directory, name, body, describe=None):
    describe = describe or json.dumps({"description": f"The {name} tool.",
                                       "parameters": {"type": "object", "properties": {}}})
    path = directory / name
    path.write_text(TOOL.replace("{DESCRIBE}", describe).replace("{BODY}", body))
    path.chmod(0o755)
    return path


@pytest.fixture
def toolpath(tmp_path, monkeypatch):
    directory = tmp_path / "tools"
    directory.mkdir()
    monkeypatch.setenv("AGENTCTL_TOOLS", str(directory))
    monkeypatch.setenv("AGENTCTL_MCP", str(tmp_path / "no-mcp.json"))
    return directory


def test_the_tool_convention(toolpath, tmp_path, conn, monkeypatch):
    make_tool(toolpath, "echo_args", 'cat; echo " cwd=$(pwd) agent=$AGENT_ID '
                                     'db=$AGENTCTL_DB key=${OPENAI_API_KEY:-none}"')
    make_tool(toolpath, "fails", 'echo "some output"; echo "it went wrong" >&2; exit 3')
    make_tool(toolpath, "chatty", 'head -c 200000 /dev/zero | tr "\\0" x')
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-key-123456")
    work = tmp_path / "work"
    work.mkdir()
    model = script(tmp_path, calling([("echo_args", {"x": 1}), ("fails", {}), ("chatty", {})]))
    w = fork("-n", "w", "--allow", "*", "--cwd", str(work), "-m", model, "go")
    result = agent("run", "w")
    assert result.code == 0, result.err
    echoed, failed, chatty = tool_results(conn, "w")
    assert echoed == f'{{"x": 1}} cwd={work} agent={w} db={os.environ["AGENTCTL_DB"]} key=none\n'
    assert failed == "error: exit status 3: it went wrong"
    assert len(chatty) < 70000 and chatty.endswith("\n[output cut at 65536 bytes]")


def test_a_program_tools_arguments_are_checked_against_its_parameters(toolpath, tmp_path,
                                                                       conn):
    """As a built-in tool's: a call that doesn't fit is an error the model sees, and the
    program does not run (it would have written ran.txt); a keyword outside agentctl's
    subset (format, $defs) is the program's to check."""
    make_tool(toolpath, "count", "cat >> ran.txt; echo ran", describe=json.dumps({
        "description": "Count.", "parameters": {
            "type": "object", "required": ["n"], "additionalProperties": False,
            "properties": {"n": {"type": "integer", "minimum": 1},
                           "day": {"type": "string", "format": "date"}},
            "$defs": {"unused": {"type": "strange"}}}}))
    work = tmp_path / "work"
    work.mkdir()
    model = script(tmp_path, calling([("count", {"n": "five"}), ("count", {}),
                                      ("count", {"n": 0}), ("count", {"n": 5, "extra": 1}),
                                      ("count", "[5]"), ("count", {"n": 5, "day": "not a date"})]))
    fork("--shared", "-n", "w", "--allow", "count", "--cwd", str(work), "-m", model, "go")
    result = agent("run", "w")
    assert result.code == 0, result.err
    assert tool_results(conn, "w") == [
        "error: n must be an integer", "error: n is missing", "error: n must be at least 1",
        "error: extra is not in the schema", "error: arguments must be a JSON object",
        "ran\n"]
    assert (work / "ran.txt").read_text() == '{"n": 5, "day": "not a date"}'
    assert conn.execute("SELECT count(*) FROM tool_runs").fetchone()[0] == 1


def test_a_program_tool_whose_parameters_agentctl_cant_read_is_skipped(toolpath):
    make_tool(toolpath, "typo", "echo no", describe=json.dumps({
        "description": "A typo.", "parameters": {
            "type": "object", "properties": {"n": {"type": "int"}}}}))
    make_tool(toolpath, "good", "echo ok")
    fork("-n", "w", "--allow", "*")
    listed = agent("run", "--list-tools", "--format", "json", "w")
    assert listed.code == 0, listed.err
    names = [t["name"] for t in json.loads(listed.out)]
    assert "good" in names and "typo" not in names
    assert "tool typo: parameters.properties.n.type: one of object, array, string, number, " \
        "integer, boolean, null, or a list of them: skipped" in listed.err


def test_descriptions_are_cached_and_bad_tools_skipped_with_a_warning(toolpath, tmp_path,
                                                                      monkeypatch):
    counter = tmp_path / "described"
    monkeypatch.setenv("DESCRIBED", str(counter))
    make_tool(toolpath, "good", "echo ok")
    make_tool(toolpath, "bad.name", "echo no")
    make_tool(toolpath, "nodesc", "echo no", describe="not json")
    fork("-n", "w", "--allow", "*")
    first = agent("run", "--list-tools", "--format", "json", "w")
    assert first.code == 0, first.err
    names = [t["name"] for t in json.loads(first.out)]
    assert "good" in names and "bad.name" not in names and "nodesc" not in names
    assert "tool" in first.err and "bad.name" in first.err and "nodesc" in first.err
    described = counter.read_text().count("x")
    assert agent("run", "--list-tools", "w").code == 0
    assert counter.read_text().count("x") == described, "no --describe run the second time"
    changed = make_tool(toolpath, "good", "echo changed")   # a new mtime: described again
    mtime = changed.stat().st_mtime_ns + 10 ** 9        # (one the clock's grain can't hide)
    os.utime(changed, ns=(mtime, mtime))
    assert agent("run", "--list-tools", "w").code == 0
    assert counter.read_text().count("x") == described + 1


def test_grants_narrow_down_a_three_level_tree(toolpath, tmp_path):
    for name in ("read_file", "write_file", "run"):
        make_tool(toolpath, name, "echo ok")
    fork("-n", "lead", "--allow", "*_file")
    assert offered("lead") == ["read_file", "write_file"]
    fork("-p", "lead", "-n", "worker", "--allow", "read_file", "--allow", "write_*")
    assert offered("worker") == ["read_file", "write_file"]
    refused = agent("fork", "-p", "lead", "-n", "rogue", "--allow", "run")
    assert refused.code == 3 and "lead can't use run, so it can't grant it" in refused.err
    fork("-p", "worker", "-n", "leaf", "--allow", "read_*")
    assert offered("leaf") == ["read_file"]
    refused = agent("fork", "-p", "leaf", "-n", "x", "--allow", "write_file")
    assert refused.code == 3, refused
    fork("-p", "leaf", "-n", "nothing")             # no --allow: no external tool
    assert offered("nothing") == []
    fork("-n", "root", "--allow", "*")              # the operator's child: any
    assert offered("root") == ["read_file", "run", "write_file"]
    bad = agent("fork", "-n", "y", "--allow", "a b")
    assert bad.code == 2 and "a pattern is a glob" in bad.err


def test_the_fork_tool_grants_within_its_own_and_inherits_the_cwd(toolpath, tmp_path, conn):
    make_tool(toolpath, "read_file", "pwd")
    make_tool(toolpath, "run", "echo ran")
    work = tmp_path / "work"
    work.mkdir()
    model = script(tmp_path, calling([("fork", {"name": "kid", "allow": ["read_file"],
                                                "prompt": "child"}),
                                      ("fork", {"name": "greedy", "allow": ["run"]})]))
    fork("-n", "lead", "--allow", "read_file", "--cwd", str(work), "-m", model, "go")
    assert agent("run", "lead").code == 0
    kid, greedy = tool_results(conn, "lead")
    assert greedy.startswith("error: --allow run: lead can't use run")
    row = conn.execute("SELECT allow, cwd FROM agents WHERE name = 'kid'").fetchone()
    assert tuple(row) == ("read_file", str(work))


def test_ask_pauses_a_call_until_it_is_approved(toolpath, tmp_path, conn):
    marker = tmp_path / "ran"
    make_tool(toolpath, "write_file", f"touch {marker}; echo wrote")
    model = script(tmp_path, calling([("write_file", {"path": "x"})]))
    fork("-n", "w", "--allow", "*", "--ask", "write_*", "-m", model, "go")
    assert agent("run", "w").code == 0
    assert tool_results(conn, "w") == [] and not marker.exists()
    assert conn.execute("SELECT status FROM agents WHERE name = 'w'").fetchone()[0] == "P"


def work_dir(tmp_path):
    """The agent's working directory: where its sandboxed tools may write."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return work


def test_a_call_that_times_out_is_killed_whole(toolpath, tmp_path, conn, monkeypatch):
    mark, work = marker(), work_dir(tmp_path)
    make_tool(toolpath, "slow", f"sleep {mark} & echo started > started; wait")
    monkeypatch.setenv("AGENTCTL_TOOL_TIMEOUT", "3")
    fork("--shared", "-n", "w", "--allow", "slow", "--cwd", str(work), "-m",
         script(tmp_path, calling([("slow", {})])), "go")
    start = time.monotonic()
    assert agent("run", "w").code == 0
    assert time.monotonic() - start < 30            # not the 600 s of its child
    assert tool_results(conn, "w") == ["error: timed out after 3 s (killed)"]
    assert (work / "started").exists()
    wait_until(lambda: not running(mark), "the tool's child to be killed with its group")


@pytest.mark.parametrize("how", ["sandboxed", "unconfined"])
def test_kill_9_during_a_slow_tool_runs_it_at_most_once(toolpath, tmp_path, conn, how):
    """The line is there once, never twice; the resumed turn says the outcome is unknown.
    A sandboxed tool dies with its agent-run (its sandbox does); an unconfined one is
    found by its environment and killed when the turn resumes."""
    mark, work = marker(), work_dir(tmp_path)
    make_tool(toolpath, "append", f"echo line >> ledger; sleep {mark}; echo done")
    fork("--shared", "-n", "w", "--allow", "append", "--cwd", str(work),
         *(["--unconfined"] if how == "unconfined" else []),
         "-m", script(tmp_path, calling([("append", {})])), "go")
    run = started("agent-run", "w")
    wait_until(lambda: running(mark), "the tool to write its line")
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert (work / "ledger").read_text() == "line\n"
    if how == "sandboxed":
        wait_until(lambda: not running(mark), "the sandbox to die with its agent-run")
    result = wait_until(lambda: (ran := shell("agent-run w")).code != 75 and ran,
                        "the dead run's lease to be taken over")
    assert result.code == 0, result
    assert (work / "ledger").read_text() == "line\n", "never run twice"
    assert tool_results(conn, "w") == ["error: interrupted: agent-run ended while this call ran; "
                                       "its outcome is unknown and it was not run again"]
    wait_until(lambda: not running(mark), "the tool's group to be killed")
    assert [tuple(r) for r in conn.execute("SELECT tool, outcome FROM tool_runs")] == \
        [("append", "unknown")]


def test_kill_during_a_tool_call_kills_the_tool(toolpath, tmp_path, conn):
    mark = marker()
    make_tool(toolpath, "slow", f"sleep {mark}")
    fork("-n", "w", "--allow", "slow", "--cwd", str(work_dir(tmp_path)), "-m",
         script(tmp_path, calling([("slow", {})])), "go")
    run = started("agent-run", "w")
    wait_until(lambda: running(mark), "the tool to start")
    assert agent("kill", "-s", "KILL", "w").code == 0
    run.wait(timeout=PATIENCE)
    assert run.returncode == 3
    wait_until(lambda: not running(mark), "the tool to be killed")


def test_shipped_file_tools_are_confined(tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "a.txt").write_text("inside")
    (tmp_path / "secret").write_text("outside")
    os.symlink(tmp_path / "secret", work / "link")
    os.symlink(tmp_path, work / "dirlink")
    monkeypatch.setenv("AGENTCTL_DB", str(work / "agents.db"))     # the database, inside
    model = script(tmp_path, calling([
        ("read_file", {"path": "sub/a.txt"}), ("read_file", {"path": "../secret"}),
        ("read_file", {"path": "link"}), ("read_file", {"path": "dirlink/secret"}),
        ("read_file", {"path": str(tmp_path / "secret")}), ("read_file", {"path": "agents.db"}),
        ("write_file", {"path": "sub/new.txt", "content": "made"}),
        ("write_file", {"path": "link", "content": "clobber"}),
        ("list_dir", {"path": "sub"}), ("run", {"command": "echo hi"})]))
    fork("--shared", "-n", "w", "--allow", "*_file", "--allow", "list_dir", "--cwd", str(work),
         "-m", model, "go")
    result = agent("run", "w")
    assert result.code == 0, result.err
    from agentctl.store import db
    out = tool_results(db.connect(str(work / "agents.db")), "w")
    assert out[0] == "inside"
    assert ".. is not allowed" in out[1]
    assert "link is a symbolic link: refused" in out[2]
    assert "dirlink is a symbolic link: refused" in out[3]
    assert "outside the working directory" in out[4]
    assert "agents.db: not for tools" in out[5]
    assert out[6] == "wrote 4 bytes to sub/new.txt" and (work / "sub/new.txt").read_text() == "made"
    assert "symbolic link: refused" in out[7] and (tmp_path / "secret").read_text() == "outside"
    assert out[8] == "a.txt\t6\nnew.txt\t4\n"
    assert out[9].startswith("error: unknown tool: run (tools: fork, ")     # not granted
    assert out[9].endswith(", list_dir, read_file, write_file)")     # what it has, all of it


def test_agent_ps_shows_grants_and_marks_the_unconfined(tmp_path, monkeypatch):
    fork("-n", "files", "--allow", "*_file", "--ask", "write_file")
    fork("-n", "shell", "--allow", "run", "--unconfined")
    rows = [json.loads(line) for line in agent(
        "ps", "-o", "name,allow,ask,unconfined", "--format", "jsonl").lines]
    assert rows[1:] == [
        {"name": "files", "allow": ["*_file"], "ask": ["write_file"], "unconfined": False},
        {"name": "shell", "allow": ["run"], "ask": [], "unconfined": True}]
    table = agent("ps").lines
    assert [line.split()[3] for line in table[2:]] == ["S", "S!"]     # STAT: ! unconfined
    assert agent("ps", "-o", "name,stat", "--format", "tsv").lines[3] == "shell\tS!"


@pytest.fixture
def mcp_config(tmp_path, monkeypatch):
    """A real MCP server (tests/mcp_server.py, which the operator's configuration lets its
    sandbox read); the tests' agents work in tmp_path/work, where it counts its starts."""
    work = work_dir(tmp_path)
    monkeypatch.chdir(work)
    starts = work / "starts"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"notes": {
        "command": sys.executable, "args": [os.path.join(ROOT, "tests", "mcp_server.py")],
        "env": {"MCP_STARTS": str(starts)}, "ro": [os.path.join(ROOT, "tests")]}}}))
    monkeypatch.setenv("AGENTCTL_MCP", str(config))
    monkeypatch.setenv("AGENTCTL_TOOLS", str(tmp_path / "none"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-key-123456")
    return starts


def test_mcp_tools_from_a_real_server(mcp_config, tmp_path, conn):
    model = script(tmp_path, calling([("notes__add", {"a": 2, "b": 40}), ("notes__whoami", {}),
                                      ("notes__broken", {})]))
    w = fork("-n", "w", "--allow", "notes__*", "-m", model, "go")
    result = agent("run", "w")
    assert result.code == 0, result.err
    rule = "a tool's name is 1 to 64 letters, digits, _ or -: skipped"
    assert f"'notes__a_tool_whose_name_is_far_too_long_for_any_provider_to_take_it': {rule}" \
        in result.err                                   # too long once prefixed
    assert f"'notes__dotted.name': {rule}" in result.err
    added, who, broken = tool_results(conn, "w")
    assert added == "42"
    assert who == f"agent={w} cwd={os.getcwd()} key=False procs=256"   # (the default limit)
    assert broken.startswith("error:") and "broken" in broken
    assert mcp_config.read_text() == "start\n"          # one server, for the one turn


def test_mcp_servers_start_only_for_agents_granted_their_tools(mcp_config, tmp_path):
    fork("-n", "plain", "-m", "echo", "hi")
    fork("-n", "other", "--allow", "github__*", "-m", "echo", "hi")
    assert agent("run", "plain").code == 0 and agent("run", "other").code == 0
    assert not mcp_config.exists()
    listed = agent("run", "--list-tools", "--format", "json", "plain")
    assert [t for t in json.loads(listed.out) if t["source"].startswith("mcp")] == []


def test_mcp_without_the_sdk_speaks_to_stdio_and_names_the_extra_for_sse(mcp_config, tmp_path):
    """agentctl speaks MCP itself: without the SDK installed in agent-run's Python, a
    stdio server's tool is called all the same; an SSE server, which the SDK alone
    speaks to, says which extra it needs, and breaks its own tools only."""
    config = json.loads((tmp_path / "mcp.json").read_text())
    config["mcpServers"]["old"] = {"type": "sse", "url": "http://127.0.0.1:9/sse"}
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    model = script(tmp_path, calling([("notes__add", {"a": 2, "b": 40})]))
    fork("-n", "w", "--allow", "notes__*", "--allow", "old__*", "-m", model, "go")
    code = ("import sys, builtins\n"
            "real = builtins.__import__\n"
            "def no_mcp(name, *a, **k):\n"
            "    if name == 'mcp' or name.startswith('mcp.'): raise ImportError(name)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = no_mcp\n"
            "from agentctl.cli.run import main\nsys.exit(main(['w']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 0, proc       # the turn runs, with the stdio server's tools
    assert "agent-run: MCP server old: this server needs the mcp extra: from agentctl's " \
        "checkout, make install EXTRAS=mcp (or pip install '.[mcp]')\n" in proc.stderr
    assert tool_results(connect(os.environ["AGENTCTL_DB"]), "w") == ["42"]


@pytest.mark.parametrize("text, said", [
    ('{"mcpServers": {"x": {"args": "not a list"}}}',
     "MCP server 'x' ({config}): want a \"command\" (stdio) or a \"url\" (Streamable HTTP, "
     "or SSE with \"type\": \"sse\"): skipped"),
    ('{"mcpServers": {"x": {"command": "true", "args": "not a list"}}}',
     "MCP server 'x' ({config}): \"args\" is a list of texts: skipped"),
    ('{"mcpServers": {"x": {"type": "carrier-pigeon", "url": "http://x"}}}',
     "MCP server 'x' ({config}): unknown type 'carrier-pigeon' (stdio, http or sse): skipped"),
    ("not json", "{config}: not JSON: "),
])
def test_a_bad_mcp_configuration_is_one_line_and_breaks_no_turn(tmp_path, monkeypatch, text,
                                                                  said):
    """A wrong entry is left out with a warning (an unreadable file: every server); the
    turn runs with every other tool (it broke every turn of an agent holding any grant)."""
    config = tmp_path / "mcp.json"
    config.write_text(text)
    monkeypatch.setenv("AGENTCTL_MCP", str(config))
    fork("-n", "w", "--allow", "*", "-m", "echo", "hi")
    result = agent("run", "w")
    assert result.code == 0, result
    assert result.err.startswith("agent-run: " + said.format(config=config)), result.err
    assert result.err.count("\n") == 1


def test_the_tool_path_and_the_mcp_file_are_refused_inside_the_working_directory(
        tmp_path, monkeypatch):
    """Confinement is not only about leaving the directory: what grants tools, and the
    database, can't be read or written through a file tool even where it is inside, and
    a refused write truncates nothing (it did: O_TRUNC came before the check)."""
    from agentctl.store import db
    work = tmp_path / "work"
    tools = work / "mytools"
    tools.mkdir(parents=True)
    monkeypatch.setenv("AGENTCTL_DB", str(work / "agents.db"))
    shipped = os.path.join(ROOT, "agentctl", "toolbox")
    monkeypatch.setenv("AGENTCTL_TOOLS", f"{tools}:{shipped}")
    (work / "mcp.json").write_text('{"mcpServers": {}}')
    monkeypatch.setenv("AGENTCTL_MCP", str(work / "mcp.json"))
    model = script(tmp_path, calling([
        ("write_file", {"path": "mytools/evil", "content": "#!/bin/sh"}),
        ("list_dir", {"path": "mytools"}), ("read_file", {"path": "mcp.json"}),
        ("write_file", {"path": "mcp.json", "content": "{}"}),
        ("write_file", {"path": "agents.db", "content": "gone"})]))
    fork("-n", "w", "--allow", "*_file", "--allow", "list_dir", "--cwd", str(work),
         "-m", model, "go")
    assert agent("run", "w").code == 0
    conn = db.connect(str(work / "agents.db"))
    out = tool_results(conn, "w")
    assert len(out) == 5
    for result in out:
        assert ": not for tools (agentctl's database, configuration" in result, result
    assert not (tools / "evil").exists()
    assert (work / "mcp.json").read_text() == '{"mcpServers": {}}'


def test_an_mcp_tools_output_is_capped(mcp_config, tmp_path, conn, monkeypatch):
    monkeypatch.setenv("AGENTCTL_TOOL_OUTPUT", "10")
    model = script(tmp_path, calling([("notes__whoami", {})]))
    fork("-n", "w", "--allow", "notes__whoami", "-m", model, "go")
    assert agent("run", "w").code == 0
    text, = tool_results(conn, "w")
    assert text.startswith("agent=") and text.endswith("\n[output cut at 10 bytes]")
    assert len(text.split("\n")[0]) == 10


def test_a_failing_tool_shows_the_tail_of_a_long_stderr(toolpath, tmp_path, conn):
    make_tool(toolpath, "noisy", 'i=0; while [ $i -lt 3000 ]; do echo "noise $i" >&2; '
                                 'i=$((i+1)); done; echo "the real error" >&2; exit 1')
    fork("-n", "w", "--allow", "noisy", "-m", script(tmp_path, calling([("noisy", {})])), "go")
    assert agent("run", "w").code == 0
    text, = tool_results(conn, "w")
    assert text.startswith("error: exit status 1: ") and text.endswith("the real error")
    assert len(text) < 2100


@pytest.mark.parametrize("how", ["sandboxed", "unconfined"])
def test_a_call_ends_when_its_tool_does_and_what_it_left_is_killed(toolpath, tmp_path, conn,
                                                                   how):
    """A process left behind that holds the tool's output open does not make the call
    wait for the timeout; it is killed with the group (sandboxed: with its sandbox)."""
    mark = marker()
    make_tool(toolpath, "leaves", f"sleep {mark} & echo started")
    fork("-n", "w", "--allow", "leaves", "--cwd", str(work_dir(tmp_path)),
         *(["--unconfined"] if how == "unconfined" else []),
         "-m", script(tmp_path, calling([("leaves", {})])), "go")
    start = time.monotonic()
    assert agent("run", "w").code == 0
    assert time.monotonic() - start < 30            # not the 600 s of what it left
    assert tool_results(conn, "w") == ["started\n"]
    wait_until(lambda: not running(mark), "what the tool left to be killed")


def test_the_run_tool_times_out_with_its_output_and_no_traceback(tmp_path, conn, monkeypatch):
    monkeypatch.setenv("AGENTCTL_TOOLS", os.path.join(ROOT, "agentctl", "toolbox"))
    monkeypatch.setenv("AGENTCTL_MCP", str(tmp_path / "no-mcp.json"))
    mark = marker()
    model = script(tmp_path, calling([
        ("run", {"command": "echo before; sleep 60; echo after", "timeout": 1}),
        ("run", {"command": f"sleep {mark} & echo oops >&2; exit 4"}),
        ("run", {"command": 42})]))
    fork("-n", "w", "--allow", "run", "--cwd", str(work_dir(tmp_path)), "-m", model, "go")
    start = time.monotonic()
    assert agent("run", "w").code == 0
    assert time.monotonic() - start < 30            # not the 60 s of the sleeps
    timed_out, background, bad = tool_results(conn, "w")
    assert timed_out == "before\n\n[timed out after 1 s: the shell was killed]\n"
    assert background == "\n[stderr]\noops\n\n[exit status 4]\n"
    assert bad == "error: command must be a string"     # checked: the tool never ran
    wait_until(lambda: not running(mark), "what the command left to be killed")


def test_an_mcp_call_times_out_and_a_kill_cuts_it_short(mcp_config, tmp_path, conn,
                                                        monkeypatch):
    monkeypatch.setenv("AGENTCTL_TOOL_TIMEOUT", "1")
    fork("-n", "w", "--allow", "notes__nap", "-m",
         script(tmp_path, calling([("notes__nap", {"seconds": 30})])), "go")
    start = time.monotonic()
    assert agent("run", "w").code == 0
    assert time.monotonic() - start < 25            # not the 30 s of the call
    assert tool_results(conn, "w") == ["error: timed out after 1 s"]
    monkeypatch.delenv("AGENTCTL_TOOL_TIMEOUT")
    fork("-n", "k", "--allow", "notes__nap", "-m",
         script(tmp_path, calling([("notes__nap", {"seconds": 60})]), name="k.jsonl"), "go")
    run = started("agent-run", "k")
    wait_until(lambda: run.poll() is not None or conn.execute(
        "SELECT count(*) FROM tool_runs WHERE tool = 'notes__nap' AND ended_at IS NULL"
    ).fetchone()[0], "the MCP call to start")
    assert run.poll() is None, run.communicate()
    killed = time.monotonic()
    assert agent("kill", "-s", "KILL", "k").code == 0
    run.wait(timeout=PATIENCE)
    assert run.returncode == 3
    assert time.monotonic() - killed < 30, "not the 60 s of the call"


@pytest.mark.parametrize("recorded", ["none", "another's"])
def test_a_resumed_turn_kills_its_calls_processes_and_no_others(toolpath, tmp_path, conn,
                                                                recorded):
    """What is left of an interrupted call is found by its environment: killed when
    agent-run died before recording its group, and a group id that is another's by now
    (a stranger's session) is left alone. (An unconfined call: a sandboxed one dies with
    its agent-run.)"""
    mark = marker()
    make_tool(toolpath, "slow", f"sleep {mark}")
    fork("-n", "w", "--allow", "slow", "--unconfined", "-m",
         script(tmp_path, calling([("slow", {})])), "go")
    run = started("agent-run", "w")
    tool_pid, = wait_until(lambda: running(mark), "the tool to start")
    run.send_signal(signal.SIGKILL)
    run.wait()
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        with conn:
            conn.execute("UPDATE tool_runs SET pgid = ?",
                         (None if recorded == "none" else stranger.pid,))
        result = wait_until(lambda: (ran := shell("agent-run w")).code != 75 and ran,
                            "the dead run's lease to be taken over")
        assert result.code == 0, result
        assert tool_results(conn, "w")[0].startswith("error: interrupted: ")
        wait_until(lambda: ended(tool_pid), "the call's process to be found and killed")
        assert stranger.poll() is None, "the stranger lives"
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.parametrize("how", ["sandboxed", "unconfined"])
def test_a_missing_mcp_configuration_cant_be_written_into_being(tmp_path, monkeypatch, how):
    """A file tool whose working directory holds the configuration's directory can't
    create the file that would start any command as an MCP server (nor the cache of the
    tools' descriptions): unconfined, the file tools refuse it; sandboxed, agentctl's
    directories are not there at all (what is written there is in a tmpfs that goes
    with the call)."""
    from agentctl.store import db
    home = tmp_path / "home"
    (home / ".config" / "agentctl").mkdir(parents=True)
    (home / ".cache" / "agentctl").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("AGENTCTL_TOOLS", os.path.join(ROOT, "agentctl", "toolbox"))
    monkeypatch.delenv("AGENTCTL_MCP", raising=False)
    monkeypatch.setenv("AGENTCTL_DB", str(tmp_path / "agents.db"))
    server = json.dumps({"mcpServers": {"x": {"command": "touch", "args": ["pwned"]}}})
    model = script(tmp_path, calling([
        ("write_file", {"path": ".config/agentctl/mcp.json", "content": server}),
        ("write_file", {"path": str(home / ".config/agentctl/mcp.json"), "content": server}),
        ("write_file", {"path": ".cache/agentctl/tools.json", "content": "{}"}),
        ("write_file", {"path": ".config/agentctl/other.json", "content": "{}"})]))
    fork("-n", "w", "--allow", "write_file", "--cwd", str(home),
         *(["--unconfined"] if how == "unconfined" else []), "-m", model, "go")
    assert agent("run", "w").code == 0
    out = tool_results(db.connect(str(tmp_path / "agents.db")), "w")
    if how == "unconfined":
        for result in out:      # (agentctl's directories whole, not just its files)
            assert ": not for tools (" in result, result
    else:
        assert not (home / ".config/agentctl/other.json").exists()
    assert not (home / ".config/agentctl/mcp.json").exists()


def test_a_fork_that_names_an_mcp_server_its_parent_cant_reach_is_refused(mcp_config,
                                                                         tmp_path, conn):
    fork("-n", "lead", "--allow", "read_file")
    refused = agent("fork", "-p", "lead", "-n", "x", "--allow", "notes__*")
    assert refused.code == 3
    assert refused.err == ("agent-fork: --allow notes__*: lead can't use the tools of MCP "
                           "server notes, so it can't grant them\n")
    fork("-n", "notes", "--allow", "notes__add")
    fork("-p", "notes", "-n", "ok", "--allow", "notes__*")     # within: it narrows to add
    model = script(tmp_path, calling([("fork", {"name": "kid", "allow": ["notes__add"]})]))
    fork("-n", "lead2", "--allow", "read_file", "-m", model, "go")
    assert agent("run", "lead2").code == 0
    assert tool_results(conn, "lead2") == ["error: --allow notes__add: lead2 can't use the "
                                           "tools of MCP server notes, so it can't grant them"]
    assert not mcp_config.exists(), "no server was started to decide"


def test_the_file_tools_refuse_what_is_no_regular_file_without_blocking(tmp_path,
                                                                        monkeypatch, conn):
    monkeypatch.setenv("AGENTCTL_TOOLS", os.path.join(ROOT, "agentctl", "toolbox"))
    monkeypatch.setenv("AGENTCTL_MCP", str(tmp_path / "no-mcp.json"))
    work = tmp_path / "work"
    work.mkdir()
    os.mkfifo(work / "pipe")
    (work / "dir").mkdir()
    model = script(tmp_path, calling([
        ("read_file", {"path": "pipe"}), ("read_file", {"path": "dir"}),
        ("write_file", {"path": "pipe", "content": "x"}),
        ("write_file", {"path": "pipe", "content": "x", "append": True})]))
    fork("-n", "w", "--allow", "*_file", "--cwd", str(work), "-m", model, "go")
    start = time.monotonic()
    assert agent("run", "w").code == 0
    assert time.monotonic() - start < 30            # no open that blocks for ever
    out = tool_results(conn, "w")
    assert out[0] == "error: exit status 1: pipe: not a regular file"
    assert out[1] == "error: exit status 1: dir: not a regular file"
    for text in out[2:]:                    # no reader: the open fails, at once
        assert text == "error: exit status 1: No such device or address"


def test_the_shell_tool_of_the_man_page_works_as_printed(toolpath, tmp_path, conn):
    """agent-run(1)'s complete tool in shell, taken from the page, unescaped as roff
    prints it, and called by a turn."""
    page = open(os.path.join(ROOT, "man", "agent-run.1"), encoding="utf-8").read()
    body = page[page.index(".EX\n#!/bin/sh\n# word_count") + 4:]
    body = body[:body.index(".EE\n")]
    for roff, text in (("\\(aq", "'"), ("\\-", "-"), ("\\(dq", '"')):
        body = body.replace(roff, text)
    tool = toolpath / "word_count"
    tool.write_text(body)
    tool.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "words.txt").write_text("one two three\n")
    model = script(tmp_path, calling([("word_count", {"path": "words.txt"}),
                                      ("word_count", {"path": "../x"})]))
    fork("-n", "w", "--allow", "word_count", "--cwd", str(work), "-m", model, "go")
    assert agent("run", "w").code == 0
    assert tool_results(conn, "w") == ["3\n",
                                       "error: exit status 1: stay in the working directory"]


def test_relative_paths_are_made_absolute_at_start(tmp_path):
    """`cd ops; agent-run --db agents.db` with the agent's --cwd above: the tool is
    told the database's absolute path, and the file tools refuse it by its path from
    the agent's directory (a relative path resolved again in the tool's directory
    protected another file, and the programs a tool calls opened another database).
    A relative AGENTCTL_MCP is the same file seen from the tool's directory."""
    work = tmp_path / "work"
    (work / "ops").mkdir(parents=True)
    model = script(tmp_path, calling([
        ("write_file", {"path": "ops/agents.db", "content": "clobbered"}),
        ("write_file", {"path": "ops/mcp.json", "content": "{}"}),
        ("where", {})]))
    tools = tmp_path / "tools"      # (not above the cwd: a tool path holds no working directory)
    tools.mkdir()
    make_tool(tools, "where", 'echo "db=$AGENTCTL_DB mcp=$AGENTCTL_MCP"; agent-ps -q')
    result = shell(f"cd {work}/ops && export AGENTCTL_MCP=mcp.json "
                   f"AGENTCTL_TOOLS={tools}:{ROOT}/agentctl/toolbox && "
                   f"agent-fork --db agents.db -n w --allow '*_file' --allow where "
                   f"--cwd {work} -m {model} go >/dev/null && agent-run --db agents.db w")
    assert result.code == 0, result.err
    from agentctl.store import db
    conn = db.connect(str(work / "ops" / "agents.db"))
    clobber, mcp, where = tool_results(conn, "w")
    assert ": not for tools (" in clobber and ": not for tools (" in mcp, (clobber, mcp)
    me = conn.execute("SELECT id FROM agents WHERE name = 'w'").fetchone()[0]
    # (AGENTCTL_MCP is not in a sandboxed tool's environment at all)
    assert where.split("\n")[0] == f"db={work}/ops/agents.db mcp="
    assert me in where.split("\n")[1:]     # agent-ps in the tool read the same database
    assert sorted(os.listdir(work)) == ["ops"]      # no database made in the tool's cwd


def test_a_tool_that_prints_a_key_stores_it_redacted(toolpath, tmp_path, home):
    """A tool reads agent-run's environment in /proc and prints what it finds: the
    result is stored, and replayed, with the keys redacted, as replies are."""
    from .conftest import stored
    make_tool(toolpath, "snoop", "tr '\\0' '\\n' < /proc/$PPID/environ | grep _API_KEY=")
    model = script(tmp_path, calling([("snoop", {})]))
    fork("-n", "w", "--allow", "snoop", "--unconfined", "-m", model, "go")
    secret = "sk-live-0123456789abcdef"
    result = shell("agent-run w", env={"OPENAI_API_KEY": secret})
    assert result.code == 0, result.err
    replay = shell("agent-replay w")
    assert "OPENAI_API_KEY=***" in replay.out
    assert secret not in replay.out and secret.encode() not in stored(home)


def test_turns_of_run_all_cant_be_shadowed_by_the_current_directory(tmp_path, home):
    """agent-run --all started each turn with python -c, which puts the current
    directory first on the import path: an agentctl/ folder there ran instead."""
    trap = tmp_path / "trap"
    (trap / "agentctl").mkdir(parents=True)
    (trap / "agentctl" / "__init__.py").write_text(
        f"open({str(tmp_path / 'pwned')!r}, 'w').close()\n")
    fork("-n", "w", "-m", "echo", "hello")
    result = shell(f"cd {trap} && agent-run --all")
    assert result.code == 0, result.err
    assert not (tmp_path / "pwned").exists()
    assert agent("replay", "w").out.rstrip().endswith("hello")


@pytest.mark.parametrize("site", [True, False])
def test_a_child_of_agentctl_imports_agentctl_from_where_its_parent_did(tmp_path, site):
    """spawn.python (a program, the proxy's forwarders, the sandbox's launcher): an
    agentctl/ folder in the current directory or on $PYTHONPATH is never imported."""
    trap = tmp_path / "trap"
    (trap / "agentctl").mkdir(parents=True)
    (trap / "agentctl" / "__init__.py").write_text(
        f"open({str(tmp_path / 'pwned')!r}, 'w').close()\n")
    argv = spawn.python("import agentctl.ids; print(agentctl.ids.__file__)", site=site)
    proc = subprocess.run(argv, cwd=trap, env=dict(os.environ, PYTHONPATH=str(trap)),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == os.path.join(ROOT, "agentctl", "ids.py") + "\n"
    assert not (tmp_path / "pwned").exists()
    version = subprocess.run(spawn.program("ps", "--version"), cwd=trap, capture_output=True,
                             text=True, env=dict(os.environ, PYTHONPATH=str(trap)))
    assert version.returncode == 0 and version.stdout.startswith("agent-ps ")
    assert not (tmp_path / "pwned").exists()


def test_list_dir_writes_a_name_on_one_line(tmp_path):
    """A name with a newline forged a second entry ("secret.txt<TAB>0"): names are
    written as ls -b writes them."""
    (tmp_path / "a\nsecret.txt\t0").write_text("")
    (tmp_path / "back\\slash").write_text("x")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "agentctl", "toolbox", "list_dir")],
                          input="{}", capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "a\\nsecret.txt\\t0\t0\nback\\\\slash\t1\n"


def test_a_hard_link_to_a_program_on_the_tool_path_cant_be_written(toolpath, tmp_path, conn,
                                                                   monkeypatch):
    """A hard link in the working directory to a tool program is that program: a
    confined write_file through it rewrote the tool the next turn would run."""
    work = tmp_path / "work"
    work.mkdir()
    victim = make_tool(toolpath, "victim", "echo honest")
    os.link(victim, work / "innocent")
    monkeypatch.setenv("AGENTCTL_TOOLS", f"{toolpath}:{os.path.join(ROOT, 'agentctl', 'toolbox')}")
    model = script(tmp_path, calling([("write_file", {"path": "innocent",
                                                      "content": "echo evil"})]))
    fork("-n", "w", "--allow", "write_file", "--cwd", str(work), "-m", model, "go")
    assert agent("run", "w").code == 0
    assert "innocent: not for tools (" in tool_results(conn, "w")[0]
    assert "echo honest" in victim.read_text()


def test_a_pattern_reaches_mcp_tools_only_when_it_names_the_server(mcp_config, tmp_path):
    """*_add matched notes__add, and *_file the tools of any file server configured
    later: only a pattern that names the server (or *) reaches its tools."""
    fork("-n", "glob", "--allow", "*_add")
    fork("-n", "named", "--allow", "notes__a*")
    fork("-n", "all", "--allow", "*")
    assert offered("glob", mcp=True) == []
    assert offered("named", mcp=True) == ["notes__add"]
    assert "notes__add" in offered("all", mcp=True)


def test_a_grant_that_matches_no_tool_is_taken_with_a_warning(toolpath):
    make_tool(toolpath, "read_file", "cat")
    made = agent("fork", "-n", "w", "--allow", "read_fle", "--allow", "read_*",
                 "--ask", "writ_file:1h", "--cwd", str(toolpath.parent))
    assert made.code == 0
    assert made.err == ("agent-fork: read_fle: matches no tool that exists now (a grant may "
                        "name tools installed later)\n"
                        "agent-fork: writ_file:1h: matches no tool that exists now (a grant "
                        "may name tools installed later)\n")


def shipped(name, arguments, cwd, *flags):
    """A shipped tool run by hand, as its convention says: arguments on stdin."""
    return subprocess.run([os.path.join(ROOT, "agentctl", "toolbox", name), *flags],
                          input=json.dumps(arguments), capture_output=True, text=True,
                          cwd=cwd, env={"PATH": os.environ["PATH"]})


def test_read_file_reads_limit_bytes_and_says_where_to_go_on(tmp_path):
    (tmp_path / "f.txt").write_text("abcdefghijklmnop")
    first = shipped("read_file", {"path": "f.txt", "limit": 10}, tmp_path)
    assert first.stdout == "abcdefghij\n[cut at 10 bytes: read on with offset 10]"
    rest = shipped("read_file", {"path": "f.txt", "offset": 10, "limit": 10}, tmp_path)
    assert rest.stdout == "klmnop"


@pytest.mark.parametrize("name", ["read_file", "write_file", "list_dir", "run", "fetch_url"])
def test_a_shipped_tool_describes_itself_when_run_by_hand(name, tmp_path):
    """Outside agentctl's environment (no PYTHONPATH) --describe printed a traceback."""
    described = shipped(name, {}, tmp_path, "--describe")
    assert described.returncode == 0 and described.stderr == ""
    assert json.loads(described.stdout)["parameters"]["type"] == "object"


def test_list_tools_cuts_a_description_between_words():
    fork("-n", "w", "--allow", "read_file")
    listed = agent("run", "--list-tools", "w")
    line = next(line for line in listed.lines if line.startswith("read_file"))
    assert line.rstrip().endswith("(paths are relative...")
