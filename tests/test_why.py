"""agent-why: why an agent is not running a turn now, every reason one a line, each reason
one function of agentctl.ops.why's list."""

from .conftest import agent, fork


def test_agent_why_gives_every_reason_one_a_line(conn, monkeypatch):
    fork("-n", "idle", "-m", "echo")
    fork("-n", "ready", "-m", "echo", "go")
    fork("-n", "stopped", "-m", "echo", "go")
    agent("kill", "-s", "STOP", "stopped")
    fork("-n", "later", "-m", "echo")
    agent("send", "--in", "2h", "later", "wake up")
    fork("-n", "poor", "-m", "echo", "--budget", "1", "go")
    conn.execute("UPDATE agents SET spent = 5 WHERE name = 'poor'")
    conn.commit()
    assert agent("why", "ready").code == 0 and agent("why", "ready").out == "pending: 1 prompt\n"
    out = {n: agent("why", n) for n in ("idle", "stopped", "later", "poor", "init")}
    assert all(r.code == 1 for r in out.values())
    assert out["idle"].out == "nothing pending: no prompt, no unread mail, no due timer\n"
    assert out["stopped"].out.startswith("stopped: by STOP")
    assert out["later"].out.splitlines()[1].startswith("deferred mail due at ")
    assert out["poor"].out.startswith("budget spent: spent 5 of 1 tokens")
    assert out["init"].out.startswith("init: ")
    agent("kill", "idle")
    assert agent("why", "idle").out.startswith("exited: ")
    assert agent("why", "nosuch").code == 1


def test_a_reason_is_one_function_added_to_the_list(conn, monkeypatch):
    from agentctl.ops import why
    fork("-n", "ready", "-m", "echo", "go")
    monkeypatch.setattr(why, "REASONS", why.REASONS + [
        lambda conn, agent, now: "rate limited: the provider asked to wait"])
    result = agent("why", "ready")
    assert (result.code, result.out) == (1, "rate limited: the provider asked to wait\n")
