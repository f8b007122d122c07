"""MCP failures an operator can see (agent-run(1), MCP servers): a server whose tools
were listed on an earlier turn and that fails now (broken, down, its token revoked) is
one line on agent-run's standard error, once a run, the reason in the tool's event in
agent-log and in the error the model reads; `agent-run --list-tools --check` contacts
every configured server now; a crash's stderr is shown without its noise, and a path
the sandbox hides is named with the key that would show it. Also: the client says it is
agentctl, VS Code's configuration form is read, HTTP servers are not confined."""

import json
import os
import subprocess
import sys

import pytest

from agentctl.store.db import connect
from agentctl.tools import mcpreasons

from .conftest import agent, calling, fork, offered, script, tool_results, wait_until
from .test_external_tools import work_dir
from .test_mcp import SERVER, configure, notes, starts


def db():
    return connect(os.environ["AGENTCTL_DB"])


def tool_events(who):
    """agent-log's lines of `who`'s tool events."""
    log = agent("log", "--kind", "tool", who)
    assert log.code == 0, log.err
    return [line for line in log.out.splitlines() if line.strip()]


@pytest.fixture
def http_server(tmp_path):
    """The SDK's server over Streamable HTTP on 127.0.0.1, wanting a token: (url, stop)."""
    portfile = tmp_path / "http.port"
    proc = subprocess.Popen([sys.executable, SERVER, "http", str(portfile)],
                            env=dict(os.environ, MCP_TOKEN="tok-0123456789abcdef"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop():
        proc.kill()
        proc.wait()
    try:
        port = wait_until(lambda: portfile.exists() and portfile.read_text(),
                          "the MCP server's port")
        yield f"http://127.0.0.1:{port}/mcp", stop
    finally:
        stop()


def test_a_listed_server_that_broke_is_said_once_logged_and_told(tmp_path, monkeypatch):
    work = work_dir(tmp_path)
    crash = work / "crash"       # (where its sandbox sees it)
    configure(tmp_path, monkeypatch, {"notes": notes(work / "starts",
                                                     env={"MCP_CRASH": str(crash)})})
    model = script(tmp_path, calling([("notes__add", {"a": 1, "b": 2}),
                                      ("notes__add", {"a": 3, "b": 4})]))
    fork("-n", "w", "--allow", "notes__*", "-m", model, "go")
    assert "notes__add" in offered("w", mcp=True)       # listed: kept for the turns
    crash.write_text("loading config\nfatal: no such database: notes.db\n")
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    lines = [line for line in ran.err.splitlines() if "MCP server" in line]
    assert len(lines) == 1, ran.err                      # two calls, said once
    assert lines[0].startswith("agent-run: MCP server notes: can't start it: it exited with "
                               "status 3 before it answered; its stderr ")
    assert lines[0].endswith("loading config | fatal: no such database: notes.db")
    results = tool_results(db(), "w")
    assert len(results) == 2
    assert all(r.startswith("error: MCP server notes: can't start it: it exited with status 3")
               for r in results)
    events = tool_events("w")
    assert len(events) == 2
    assert all("notes__add error in" in e and "fatal: no such database" in e for e in events)


def test_a_listed_http_server_that_is_down_or_refuses_its_token_is_said(http_server, tmp_path,
                                                                       monkeypatch):
    url, stop = http_server
    configure(tmp_path, monkeypatch, {"notes": {"url": url, "headers": {
        "Authorization": "Bearer ${NOTES_TOKEN}"}}})
    monkeypatch.setenv("NOTES_TOKEN", "tok-0123456789abcdef")
    model = script(tmp_path, calling([("notes__add", {"a": 1, "b": 2})]))
    fork("-n", "w", "--allow", "notes__*", "-m", model, "go")
    assert "notes__add" in offered("w", mcp=True)
    monkeypatch.setenv("NOTES_TOKEN", "revoked-0123456789")       # a token revoked
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    assert ran.err.splitlines()[-1] == (    # (its session of the listing's turn resumed)
        "agent-run: MCP server notes: add: the server refused the token (HTTP "
        "401): is it wrong, expired or revoked?")
    assert "revoked-0123456789" not in ran.err
    assert "refused the token" in tool_events("w")[-1]
    stop()                                                          # and now down
    assert agent("send", "w", "again").code == 0
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    assert ran.err.splitlines()[-1].startswith(
        f"agent-run: MCP server notes: add: can't connect to {url}"), ran.err
    assert f"can't connect to {url}" in tool_events("w")[-1]
    assert tool_results(db(), "w")[-1].startswith("error: MCP server notes: add: "
                                                  "can't connect")


def test_check_contacts_every_server_now_and_fails_when_one_does(tmp_path, monkeypatch):
    work = work_dir(tmp_path)
    crash = work / "crash"       # (where its sandbox sees it)
    configure(tmp_path, monkeypatch, {
        "good": notes(work / "good"),
        "bad": notes(work / "bad", env={"MCP_CRASH": str(crash)})})
    fork("-n", "w", "--allow", "good__*", "-m", "echo", "hi")   # its grants reach one
    assert "good__add" in offered("w", mcp=True)
    assert starts(work / "good") == 1
    checked = agent("run", "--list-tools", "--check", "--format", "json", "w")
    assert checked.code == 0, checked.err
    rows = {r["server"]: r for r in json.loads(checked.out)}
    assert set(rows) == {"good", "bad"}         # every server, not only the grants'
    assert rows["good"]["status"] == "ok" and rows["good"]["tools"] >= 5
    assert starts(work / "good") == 2           # contacted now, not answered from a list
    crash.write_text("fatal: the disk is gone\n")
    checked = agent("run", "--list-tools", "--check", "w")
    assert checked.code == 1
    table = checked.out.splitlines()
    assert table[0].split() == ["SERVER", "TRANSPORT", "STATUS", "TOOLS", "SECONDS", "ERROR"]
    assert table[1].split()[:4] == ["good", "stdio", "ok", str(rows["good"]["tools"])]
    assert table[2].split()[:4] == ["bad", "stdio", "failed", "-"]
    said = [line for line in checked.err.splitlines() if "MCP server" in line]
    assert len(said) == 1 and said[0].startswith("agent-run: MCP server bad: can't start it: ")
    assert said[0].endswith("fatal: the disk is gone")
    assert agent("run", "--check", "w").code == 2           # a usage error alone
    configure(tmp_path, monkeypatch, {})                    # none configured: all well
    checked = agent("run", "--list-tools", "--check", "w")
    assert (checked.code, checked.out) == (0, "")


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_the_client_says_it_is_agentctl(transport, tmp_path, monkeypatch, request):
    if transport == "stdio":
        entry = notes(work_dir(tmp_path) / "starts")
    else:
        url, _ = request.getfixturevalue("http_server")
        entry = {"url": url, "headers": {"Authorization": "Bearer tok-0123456789abcdef"}}
    configure(tmp_path, monkeypatch, {"notes": entry})
    fork("-n", "w", "--allow", "notes__*", "-m",
         script(tmp_path, calling([("notes__client", {})])), "go")
    assert agent("run", "w").code == 0
    from agentctl import __version__
    assert tool_results(db(), "w") == [f"agentctl {__version__}"]


def test_vs_codes_form_is_read_and_an_http_server_is_not_confined(tmp_path, monkeypatch):
    config = configure(tmp_path, monkeypatch, {})
    stdio = dict(notes(work_dir(tmp_path) / "starts"), type="stdio")
    stdio["env"] = {**stdio["env"], "HOME_SEEN": "${env:HOME}"}
    config.write_text(json.dumps({"inputs": [], "servers": {
        "notes": stdio, "web": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}}))
    fork("-n", "w", "--allow", "notes__*", "-m", "echo", "hi")
    listed = agent("run", "--list-tools", "--format", "json", "w")
    assert listed.code == 0, listed.err
    tools = {t["name"]: t for t in json.loads(listed.out)}
    assert tools["notes__add"]["confined"] is True
    assert "MCP server web" not in listed.err       # not granted: not started
    config.write_text(json.dumps({"servers": {"notes": dict(stdio, env={
        "TOKEN": "${input:token}"})}}))
    listed = agent("run", "--list-tools", "w")
    assert "${input:token} asks VS Code's user" in listed.err


def test_an_http_servers_tools_are_not_confined(http_server, tmp_path, monkeypatch):
    url, _ = http_server
    configure(tmp_path, monkeypatch, {"notes": {"url": url, "headers": {
        "Authorization": "Bearer tok-0123456789abcdef"}}})
    fork("-n", "w", "--allow", "notes__*", "-m", "echo", "hi")
    listed = agent("run", "--list-tools", "--format", "json", "w")
    assert {t["confined"] for t in json.loads(listed.out) if t["name"].startswith("notes__")} \
        == {False}


def test_a_path_the_sandbox_hides_is_named_with_the_key_that_shows_it(tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "server.py").write_text("print('never run')\n")
    configure(tmp_path, monkeypatch, {"notes": {"command": sys.executable,
                                                "args": [str(outside / "server.py")]}})
    fork("-n", "w", "--allow", "notes__*", "-m", "echo", "hi")
    listed = agent("run", "--list-tools", "w")
    assert f'its sandbox shows it none of {outside}: "ro": ["{outside}"] in its entry ' \
           f'would' in listed.err, listed.err
    configure(tmp_path, monkeypatch, {"notes": {"command": sys.executable,
                                                "args": [str(outside / "server.py")],
                                                "ro": [str(outside)]}})
    listed = agent("run", "--list-tools", "w")
    assert "shows it none of" not in listed.err         # shown now: it starts (and exits)


NODE_CRASH = """node:internal/modules/cjs/loader:1228
  throw err;
  ^

Error: Cannot find module '/somewhere/outside/usr/server.js'
    at Module._resolveFilename (node:internal/modules/cjs/loader:1225:15)
    at Module._load (node:internal/modules/cjs/loader:1051:27)
    at node:internal/main/run_main_module:28:49 {
  code: 'MODULE_NOT_FOUND',
  requireStack: []
}

Node.js v20.19.2
"""

PYTHON_CRASH = """agentctl: net: refused pypi.org:443: not in its list; add "pypi.org" to the "net" of MCP server x to allow it
Traceback (most recent call last):
  File "/srv/server.py", line 3, in <module>
    main()
  File "/srv/server.py", line 2, in main
    open("/etc/server.toml")
FileNotFoundError: [Errno 2] No such file or directory: '/etc/server.toml'
"""


@pytest.mark.parametrize("crash, shown", [
    (NODE_CRASH, ["Error: Cannot find module '/somewhere/outside/usr/server.js'"]),
    (PYTHON_CRASH, ['agentctl: net: refused pypi.org:443: not in its list; add "pypi.org" to '
                    'the "net" of MCP server x to allow it',
                    "FileNotFoundError: [Errno 2] No such file or directory: "
                    "'/etc/server.toml'"]),
])
def test_a_crash_is_shown_without_its_noise(crash, shown, tmp_path):
    log = tmp_path / "server.stderr"
    log.write_text(crash)
    assert mcpreasons.tail(str(log)) == shown


def test_only_a_missing_path_that_exists_outside_is_named():
    exists = {"/srv/tools/server.js", "/srv/tools"}.__contains__
    assert mcpreasons.hidden(["Error: Cannot find module '/srv/tools/server.js'"],
                             exists) == "/srv/tools"
    assert mcpreasons.hidden(["Error: Cannot find module '/nowhere/server.js'"],
                             exists) is None
    assert mcpreasons.hidden(["loaded /srv/tools/server.js"], exists) is None   # not missing
