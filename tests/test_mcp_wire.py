"""MCP as agentctl speaks it (tools/mcpwire.py): against a hand-written stdio server
(tests/mcpfake.py) for what the SDK's server won't do, and the SDK's server over
Streamable HTTP for the session an agent's next turn resumes."""

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from agentctl.store.db import connect
from agentctl.tools import mcpwire

from .conftest import agent, calling, fork, script, tool_results, wait_until
from .test_mcp import SERVER, configure

FAKE = os.path.join(os.path.dirname(__file__), "mcpfake.py")


def fake(tmp_path, letters):
    """A started session with mcpfake.py behaving as `letters` say: (session, its log's
    messages, a function that says whether its list changed)."""
    log = tmp_path / "received.jsonl"
    changed = []
    with open(tmp_path / "stderr", "w") as errlog:
        session = mcpwire.Stdio([sys.executable, FAKE, str(log)], {"FAKE": letters},
                                str(tmp_path), errlog, lambda: changed.append(True))

    def received():
        return [json.loads(line) for line in log.read_text().splitlines()] \
            if log.exists() else []
    return session, received, changed


def test_the_handshake_names_agentctl_and_a_tools_list_of_two_pages_is_read_whole(tmp_path):
    session, received, _ = fake(tmp_path, "gj")
    try:
        session.handshake(30)
        assert session.version == "2025-06-18"
        assert [t["name"] for t in session.list_tools(30)] == ["one", "two"]
    finally:
        session.close()
    first, initialized, page1, page2 = received()
    assert first["params"]["clientInfo"] == {"name": "agentctl",
                                             "version": mcpwire.__version__}
    assert first["params"]["protocolVersion"] == mcpwire.VERSIONS[0]
    assert initialized == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert "cursor" not in page1["params"] and page2["params"] == {"cursor": "page2"}


def test_a_servers_ping_is_answered_and_its_list_changed_seen_during_a_call(tmp_path):
    session, received, changed = fake(tmp_path, "pc")
    try:
        session.handshake(30)
        result = session.call_tool("one", {"x": 1}, 30)
    finally:
        session.close()
    assert result["content"] == [{"type": "text", "text": "called"}]
    assert {"jsonrpc": "2.0", "id": "srv-1", "result": {}} in received()
    assert changed == [True]


def test_a_call_past_its_time_is_cancelled_and_one_given_up_by_poll_too(tmp_path):
    session, received, _ = fake(tmp_path, "s")
    try:
        session.handshake(30)
        with pytest.raises(TimeoutError, match="no answer in 0.3 s"):
            session.call_tool("one", {}, 0.3, poll_seconds=0.05)

        def killed():
            raise KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt):
            session.call_tool("two", {}, 30, poll=killed, poll_seconds=0.05)
        wait_until(lambda: len(received()) == 6, "the second cancel")
    finally:
        session.close()
    cancels = [m["params"] for m in received() if m.get("method") == "notifications/cancelled"]
    calls = [m["id"] for m in received() if m.get("method") == "tools/call"]
    assert cancels == [{"requestId": calls[0], "reason": "timed out"},
                       {"requestId": calls[1], "reason": "given up"}]


def test_a_server_that_refuses_the_handshake_is_modern_and_one_that_ends_is_closed(tmp_path):
    session, _, _ = fake(tmp_path, "m")
    try:
        with pytest.raises(mcpwire.Modern):
            session.handshake(30)
    finally:
        session.close()
    with open(tmp_path / "stderr", "w") as errlog:
        gone = mcpwire.Stdio([sys.executable, "-c", "pass"], {}, str(tmp_path), errlog)
    try:
        with pytest.raises(mcpwire.Closed, match="Connection closed"):
            gone.handshake(30)
    finally:
        gone.close()


def test_a_server_deaf_to_its_input_and_sigterm_is_killed_at_the_close(tmp_path):
    session, _, _ = fake(tmp_path, "d")
    session.handshake(30)
    started = time.monotonic()
    session.close()
    assert session.proc.returncode == -9
    assert time.monotonic() - started < mcpwire.GRACE_SECONDS + 2 * mcpwire.STOP_SECONDS + 10


# -- a Streamable HTTP server's session, resumed -----------------------------------------

@pytest.fixture
def logged_server(tmp_path):
    """The SDK's server over Streamable HTTP, each POSTed method in a file: (url, methods)."""
    portfile, methods = tmp_path / "http.port", tmp_path / "methods"
    proc = subprocess.Popen([sys.executable, SERVER, "http", str(portfile)],
                            env=dict(os.environ, MCP_METHODS=str(methods)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port = wait_until(lambda: portfile.exists() and portfile.read_text(),
                          "the MCP server's port")
        yield f"http://127.0.0.1:{port}/mcp", \
            lambda: methods.read_text().split() if methods.exists() else []
    finally:
        proc.kill()
        proc.wait()


def turn(tmp_path, who, a, b, first=False):
    """One turn of `who` (a new agent, `first`) calling notes__add(a, b): its result."""
    model = script(tmp_path, calling([("notes__add", {"a": a, "b": b})]))
    if first:
        fork("-n", who, "--allow", "notes__*", "-m", model, "go")
    else:
        assert agent("set", who, f"model={model}").code == 0
        assert agent("send", who, "again").code == 0
    ran = agent("run", who)
    assert ran.code == 0, ran.err
    return tool_results(connect(os.environ["AGENTCTL_DB"]), who)[-1]


def test_an_agents_next_turn_resumes_its_http_session_and_no_other_agent_does(
        logged_server, tmp_path, monkeypatch):
    url, methods = logged_server
    configure(tmp_path, monkeypatch, {"notes": {"url": url}})
    assert turn(tmp_path, "w", 1, 2, first=True) == "3"
    assert methods() == ["initialize", "notifications/initialized", "tools/list",
                         "tools/call"]
    assert turn(tmp_path, "w", 3, 4) == "7"
    assert methods()[4:] == ["tools/call"]          # no handshake: its session resumed
    kept = tmp_path / "cache" / "agentctl" / "mcp-sessions.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert turn(tmp_path, "x", 5, 6, first=True) == "11"    # another agent: its own session
    assert methods()[5:] == ["initialize", "notifications/initialized", "tools/call"]


def test_a_session_the_server_no_longer_knows_is_made_anew(logged_server, tmp_path,
                                                           monkeypatch):
    url, methods = logged_server
    configure(tmp_path, monkeypatch, {"notes": {"url": url}})
    assert turn(tmp_path, "w", 1, 2, first=True) == "3"
    kept = tmp_path / "cache" / "agentctl" / "mcp-sessions.json"
    sessions = json.loads(kept.read_text())
    for value in sessions.values():
        value["session"] = "forgotten-0123"         # (as after the server's restart)
    kept.write_text(json.dumps(sessions))
    assert turn(tmp_path, "w", 3, 4) == "7"
    assert methods()[4:] == ["tools/call", "initialize", "notifications/initialized",
                             "tools/call"]
    assert "forgotten-0123" not in kept.read_text()


def test_a_question_outside_a_call_too_long_or_sending_to_a_url_is_declined(tmp_path):
    from agentctl.tools import mcpsession
    servers = mcpsession.Servers(str(tmp_path), {})
    form = {"message": "Name?", "requestedSchema": {"type": "object", "properties": {}}}
    assert servers._elicit(form) == {"action": "decline"}          # no call waits
    servers.answering = {"answers": [], "asked": []}
    assert servers._elicit({**form, "mode": "url", "url": "http://x"}) == {"action": "decline"}
    assert servers._elicit({**form, "message": "x" * mcpsession.MAX_QUESTION}) == \
        {"action": "decline"}
    assert servers.answering["asked"] == []
    assert servers._elicit(form) == {"action": "cancel"}            # kept, to be asked
    assert servers.answering["asked"] == [form]


def test_an_http_server_that_refuses_the_handshake_is_modern_and_an_error_is_its_status():
    """400 to initialize: a server of another revision (the SDK is asked instead);
    any other status is an HTTP status, as mcpreasons words it."""
    from agentctl.tools import mcphttp

    from .localhttp import Handler, LocalServer

    class Refusing(Handler):
        def post(self, owner, body):
            method = json.loads(body).get("method")
            if method.startswith("notifications/"):
                return self.answer(202)
            if method == "initialize" and owner.status == 200:
                reply = {"jsonrpc": "2.0", "id": json.loads(body)["id"], "result": {
                    "protocolVersion": "2025-06-18", "capabilities": {}}}
                return self.answer(200, json.dumps(reply).encode(), "application/json")
            self.answer(owner.status if method == "initialize" else 500, b"no")
    server = LocalServer(Refusing)
    try:
        server.status = 400
        with pytest.raises(mcpwire.Modern):
            mcphttp.Http(server.url, {}).handshake(30)
        server.status = 200
        session = mcphttp.Http(server.url, {})
        session.handshake(30)
        with pytest.raises(mcpwire.Status) as refused:
            session.list_tools(30)
        assert refused.value.response.status_code == 500
    finally:
        server.close()


def test_a_session_unused_for_a_day_is_not_resumed_and_one_in_use_is_kept(tmp_path,
                                                                         monkeypatch):
    from agentctl.tools import mcp
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    entry = mcp.Entry("notes", {"url": "http://127.0.0.1:9/mcp"}, "http")
    env = {"AGENT_ID": "a"}
    clock = [1_000_000.0]
    monkeypatch.setattr(mcp.time, "time", lambda: clock[0])
    kept = {"session": "s1", "version": "2025-06-18", "capabilities": {}}
    mcp.keep_session(entry, env, kept)
    assert mcp.session(entry, env)["session"] == "s1"
    assert mcp.session(entry, {"AGENT_ID": "b"}) is None         # another agent's
    for hours in range(1, 30):          # used every hour: its use written down
        clock[0] += 3600
        assert mcp.session(entry, env) is not None, hours
        mcp.keep_session(entry, env, kept)
    clock[0] += mcp.SESSION_SECONDS     # then a day unused
    assert mcp.session(entry, env) is None
    mcp.keep_session(entry, env, None)
    assert json.loads((tmp_path / "agentctl" / "mcp-sessions.json").read_text()) == {}
