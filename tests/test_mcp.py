"""MCP servers as users configure them (agent-run(1), MCP servers): what each offers
kept between turns, so that a turn starts only the servers it calls; Streamable HTTP
and SSE servers beside stdio ones, with tokens from the environment; a server that
fails says why in one line and fails only its own tools; the official reference
servers from npm, over stdio and Streamable HTTP."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from agentctl.store.db import connect
from agentctl.workspace import layers, view

from .conftest import (ROOT, agent, calling, fork, offered, reference_servers, row, script,
                       tool_results, wait_until)
from .fakeapi import fakeapi  # noqa: F401 (a fixture)
from .localhttp import free_port
from .mcp_server import PNG
from .test_external_tools import work_dir

SERVER = os.path.join(ROOT, "tests", "mcp_server.py")
TESTS = os.path.join(ROOT, "tests")


def configure(tmp_path, monkeypatch, servers):
    """An MCP configuration of `servers` ({name: entry}); the agents work in
    tmp_path/work; no tool path but the shipped one."""
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    monkeypatch.setenv("AGENTCTL_MCP", str(config))
    monkeypatch.setenv("AGENTCTL_TOOLS", os.path.join(ROOT, "agentctl", "toolbox"))
    monkeypatch.chdir(work_dir(tmp_path))
    return config


def notes(starts, **more):
    """The SDK's own server over stdio, counting its starts in `starts`."""
    env = {"MCP_STARTS": str(starts), **more.pop("env", {})}
    return {"command": sys.executable, "args": [SERVER], "env": env, "ro": [TESTS], **more}


def starts(path):
    return path.read_text().count("start") if path.exists() else 0


def test_a_turn_that_calls_no_mcp_tool_starts_no_server(tmp_path, monkeypatch):
    work = work_dir(tmp_path)
    one, two = work / "one", work / "two"
    configure(tmp_path, monkeypatch, {"one": notes(one), "two": notes(two)})
    fork("-n", "w", "--allow", "one__*", "--allow", "two__*", "-m", "echo", "hi")
    assert "one__add" in offered("w", mcp=True) and "two__add" in offered("w", mcp=True)
    assert (starts(one), starts(two)) == (1, 1)         # listed once, then kept
    assert agent("run", "w").code == 0                  # offered both, called neither
    assert (starts(one), starts(two)) == (1, 1)
    model = script(tmp_path, calling([("one__add", {"a": 2, "b": 3})]))
    fork("-n", "c", "--allow", "one__*", "--allow", "two__*", "-m", model, "go")
    assert agent("run", "c").code == 0
    assert tool_results(connect(os.environ["AGENTCTL_DB"]), "c") == ["5"]
    assert (starts(one), starts(two)) == (2, 1)         # only the server it called


def test_a_changed_entry_or_program_is_listed_again(tmp_path, monkeypatch):
    work = work_dir(tmp_path)
    count = work / "starts"
    wrapper = tmp_path / "notes-server"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {SERVER}\n")
    wrapper.chmod(0o755)
    entry = notes(count, command=str(wrapper), args=[], ro=[TESTS, str(tmp_path)])
    configure(tmp_path, monkeypatch, {"notes": entry})
    fork("-n", "w", "--allow", "notes__*", "-m", "echo", "hi")
    offered("w", mcp=True)
    offered("w", mcp=True)
    assert starts(count) == 1
    configure(tmp_path, monkeypatch, {"notes": dict(entry, env={**entry["env"], "X": "1"})})
    offered("w", mcp=True)
    assert starts(count) == 2                           # another entry
    mtime = wrapper.stat().st_mtime_ns + 10 ** 9
    os.utime(wrapper, ns=(mtime, mtime))
    offered("w", mcp=True)
    assert starts(count) == 3                           # its program changed


def test_a_tool_gone_since_it_was_listed_is_an_error_and_listed_again(tmp_path, monkeypatch):
    work = work_dir(tmp_path)
    state = work / "state"
    configure(tmp_path, monkeypatch, {"notes": notes(work / "starts",
                                                     env={"MCP_EXTRA": str(state)})})
    fork("-n", "w", "--allow", "notes__*", "-m", script(tmp_path, calling([("notes__extra", {})])),
         "go")
    assert "notes__extra" in offered("w", mcp=True)
    state.write_text("gone")                            # the server has changed since
    assert agent("run", "w").code == 0
    assert tool_results(connect(os.environ["AGENTCTL_DB"]), "w") == [
        "error: MCP server notes has no tool extra any more: your next turn is offered what "
        "it has now"]
    assert "notes__extra" not in offered("w", mcp=True)


def test_a_list_changed_notification_lists_the_server_again_for_the_next_turn(tmp_path,
                                                                            monkeypatch):
    """A server that says its tools changed (notifications/tools/list_changed) during a
    turn is listed again before it stops: the next turn is offered its new tool."""
    work = work_dir(tmp_path)
    configure(tmp_path, monkeypatch, {"notes": notes(work / "starts")})
    fork("-n", "w", "--allow", "notes__*", "-m", script(tmp_path, calling([("notes__grow", {})])),
         "go")
    assert "notes__fresh" not in offered("w", mcp=True)
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    assert tool_results(connect(os.environ["AGENTCTL_DB"]), "w") == ["grown"]
    assert "notes__fresh" in offered("w", mcp=True)


def test_a_server_that_fails_says_why_and_breaks_only_its_own_tools(tmp_path, monkeypatch):
    work = work_dir(tmp_path)
    broken = {"command": sys.executable, "args": [
        "-c", "import sys; print('loading config', file=sys.stderr); "
              "print('fatal: no such database: notes.db', file=sys.stderr); sys.exit(3)"]}
    configure(tmp_path, monkeypatch, {"broken": broken, "notes": notes(work / "starts")})
    model = script(tmp_path, calling([("notes__add", {"a": 1, "b": 1})]))
    fork("-n", "w", "--allow", "*", "-m", model, "go")
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    log = tmp_path / "cache" / "agentctl" / "mcp" / "broken.stderr"
    assert ran.err.splitlines()[0] == (
        f"agent-run: MCP server broken: can't start it: it exited with status 3 before it "
        f"answered; its stderr ({log}): loading config | fatal: no such database: notes.db")
    assert "fatal: no such database" in log.read_text()
    assert tool_results(connect(os.environ["AGENTCTL_DB"]), "w") == ["2"]


def test_a_variable_that_is_not_set_is_named(tmp_path, monkeypatch):
    work = work_dir(tmp_path)
    configure(tmp_path, monkeypatch, {"notes": notes(work / "starts",
                                                     env={"TOKEN": "${NOTES_TOKEN}"})})
    fork("-n", "w", "--allow", "notes__*", "-m", "echo", "hi")
    ran = agent("run", "w")
    assert (ran.code, ran.err) == (0, "agent-run: MCP server notes: ${NOTES_TOKEN} is not "
                                      "set (its configuration takes it from the "
                                      "environment)\n")
    monkeypatch.setenv("NOTES_TOKEN", "given")
    assert "notes__add" in offered("w", mcp=True)


# -- over HTTP ---------------------------------------------------------------------------------

@pytest.fixture(params=["http", "sse"])
def web_server(request, tmp_path):
    """The SDK's server over Streamable HTTP (or SSE) on 127.0.0.1, wanting a token."""
    portfile = tmp_path / f"{request.param}.port"
    proc = subprocess.Popen([sys.executable, SERVER, request.param, str(portfile)],
                            env=dict(os.environ, MCP_TOKEN="tok-0123456789abcdef"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        port = wait_until(lambda: portfile.exists() and portfile.read_text(),
                          "the MCP server's port")
        path = "/mcp" if request.param == "http" else "/sse"
        yield request.param, f"http://127.0.0.1:{port}{path}"
    finally:
        proc.kill()
        proc.wait()


def test_a_server_over_http_with_a_token_from_the_environment(web_server, tmp_path,
                                                                monkeypatch):
    kind, url = web_server
    entry = {"url": url, "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"}}
    if kind == "sse":
        entry["type"] = "sse"
    configure(tmp_path, monkeypatch, {"notes": entry})
    model = script(tmp_path, calling([("notes__add", {"a": 40, "b": 2})]))
    fork("-n", "w", "--allow", "notes__*", "-m", model, "go")
    monkeypatch.setenv("NOTES_TOKEN", "tok-0123456789abcdef")
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    assert tool_results(connect(os.environ["AGENTCTL_DB"]), "w") == ["42"]


def test_a_server_that_wants_oauth_says_so_and_shows_no_token(web_server, tmp_path,
                                                                monkeypatch):
    """Given no token, a server that names its OAuth metadata asks for a login; given
    one it refuses, the token was refused (wrong, expired or revoked), and is not shown."""
    kind, url = web_server
    configure(tmp_path, monkeypatch, {"notes": {"type": kind, "url": url}})
    fork("-n", "w", "--allow", "notes__*", "-m", "echo", "hi")
    ran = agent("run", "w")
    assert ran.code == 0
    assert ran.err.startswith("agent-run: MCP server notes: can't start it: it asks for an "
                              "OAuth login, which agentctl does not do"), ran.err
    entry = {"type": kind, "url": url, "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"}}
    configure(tmp_path, monkeypatch, {"notes": entry})
    monkeypatch.setenv("NOTES_TOKEN", "wrong-token-9876543210")
    listed = agent("run", "--list-tools", "w")
    assert listed.err == ("agent-run: MCP server notes: can't start it: the server refused "
                          "the token (HTTP 401): is it wrong, expired or revoked?\n")


# -- the official reference servers, from npm --------------------------------------------------

def everything(modules):
    return os.path.join(modules, "@modelcontextprotocol", "server-everything", "dist",
                        "index.js")


def test_the_reference_servers_over_stdio(tmp_path, monkeypatch):
    modules = reference_servers()
    work = work_dir(tmp_path)
    (work / "notes.txt").write_text("the WAL appends frames\n")
    node = shutil.which("node")
    configure(tmp_path, monkeypatch, {
        "everything": {"command": node, "args": [everything(modules), "stdio"],
                       "ro": [modules]},
        "fs": {"command": node, "args": [os.path.join(
            modules, "@modelcontextprotocol", "server-filesystem", "dist", "index.js"),
            str(work)], "ro": [modules]}})
    model = script(tmp_path, calling([("everything__get-sum", {"a": 2, "b": 40}),
                                      ("fs__read_text_file", {"path": str(work / "notes.txt")}),
                                      ("fs__write_file", {"path": str(work / "out.txt"),
                                                          "content": "written"}),
                                      ("fs__read_text_file", {"path": "/etc/hostname"})]))
    fork("-n", "w", "--allow", "everything__*", "--allow", "fs__*", "--cwd", str(work),
         "-m", model, "go")
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    conn = connect(os.environ["AGENTCTL_DB"])
    total, notes, wrote, outside = tool_results(conn, "w")
    assert "42" in total
    assert notes == "the WAL appends frames\n"
    # a server writes the agent's layer, as its tools do (agentctl(7), WORKSPACES)
    shown = view.locate(view.directories(layers.stack(conn, row(conn, "w"))), "out.txt")
    assert open(shown).read() == "written" and "Successfully wrote" in wrote
    assert not (work / "out.txt").exists()
    assert outside.startswith("error:") and "outside allowed directories" in outside


def test_a_server_and_the_calls_of_a_layered_agent_see_one_overlay(tmp_path, monkeypatch):
    """The filesystem server lives for the turn; a program call between two of its
    calls writes the agent's layer: the server sees that write at once (one overlay
    for both, agentctl(7), WORKSPACES), though it had looked for the file before."""
    modules = reference_servers()
    work = work_dir(tmp_path)
    configure(tmp_path, monkeypatch, {"fs": {"command": shutil.which("node"), "args": [
        os.path.join(modules, "@modelcontextprotocol", "server-filesystem", "dist",
                     "index.js"), str(work)], "ro": [modules]}})
    made = str(work / "made.txt")
    steps = [[("fs__read_text_file", {"path": made})],
             [("run", {"command": "echo made > made.txt"})],
             [("fs__read_text_file", {"path": made})],
             [("fs__write_file", {"path": str(work / "back.txt"), "content": "back"})],
             [("run", {"command": "cat back.txt"})]]
    model = script(tmp_path, {"steps": [{"content": "", "tool_calls": [
        {"name": n, "arguments": a} for n, a in step]} for step in steps]
        + [{"content": "done"}]})
    fork("-n", "w", "--allow", "fs__*", "--allow", "run", "--cwd", str(work), "-m", model,
         "go")
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    missing, _, found, _, back = tool_results(connect(os.environ["AGENTCTL_DB"]), "w")
    assert missing.startswith("error:") and found == "made\n", (missing, found)
    assert back.startswith("back")
    assert not (work / "made.txt").exists() and not (work / "back.txt").exists()


def test_the_reference_server_over_streamable_http(tmp_path, monkeypatch):
    import socket
    modules = reference_servers()
    port = free_port()
    proc = subprocess.Popen([shutil.which("node"), everything(modules), "streamableHttp"],
                            env=dict(os.environ, PORT=str(port)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def listening():
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return True
        except OSError:
            return proc.poll() is not None      # it died: say so below
    try:
        wait_until(listening, "the reference server to listen")
        assert proc.poll() is None, "the reference server could not listen"
        configure(tmp_path, monkeypatch, {"everything": {
            "type": "http", "url": f"http://127.0.0.1:{port}/mcp"}})
        model = script(tmp_path, calling([("everything__get-sum", {"a": 2, "b": 40}),
                                          ("everything__echo", {"message": "over http"})]))
        fork("-n", "w", "--allow", "everything__*", "-m", model, "go")
        ran = agent("run", "w")
        assert ran.code == 0, ran.err
        total, echoed = tool_results(connect(os.environ["AGENTCTL_DB"]), "w")
        assert "42" in total and "over http" in echoed
    finally:
        proc.kill()
        proc.wait()


# -- content beyond text -----------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["openai:gpt-test", "anthropic:claude-test"])
def test_an_image_a_tool_returns_reaches_the_model_as_an_image(tmp_path, monkeypatch, fakeapi,
                                                               spec):
    """In the provider's form (a user message after the results: OpenAI takes no image in a
    tool result), checked against the SDKs' request types; the stored result says what
    it was, and agent-replay shows it without the base64."""
    work = work_dir(tmp_path)
    configure(tmp_path, monkeypatch, {"notes": notes(work / "starts")})
    fakeapi.reply(tool_calls=[("notes__picture", "{}"), ("notes__add", '{"a": 1, "b": 2}')])
    fakeapi.reply("a single pixel")
    fork("-n", "w", "--allow", "notes__*", "-m", spec, "look")
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    body = fakeapi.last["body"]
    after = body["messages"][-1]
    if spec.startswith("openai"):
        assert [m["role"] for m in body["messages"][-4:]] == ["assistant", "tool", "tool", "user"]
        assert after["content"][1] == {"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + PNG}}
    else:
        kinds = [b["type"] for b in after["content"]]
        assert kinds == ["tool_result", "tool_result", "text", "image"], kinds
        assert after["content"][3]["source"] == {"type": "base64", "media_type": "image/png",
                                                 "data": PNG}
    assert "notes__picture" in after["content"][0 if spec.startswith("openai") else 2]["text"]
    picture, added = tool_results(connect(os.environ["AGENTCTL_DB"]), "w")
    assert picture == "here it is\n[image image/png, 70 bytes]" and added == "3"
    replay = agent("replay", "w").out
    assert "[image image/png, 70 bytes]" in replay and PNG not in replay
