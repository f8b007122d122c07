"""A failed turn keeps its input and holds its agent (agentctl(7), LIFECYCLE) until a run
resumes it or agent-set changes its settings and lets it go; model options, at fork and
after."""

import json

import pytest

from .conftest import agent, events, fork, row, script, shell
from .fakeapi import fakeapi  # noqa: F401  (a fixture)


# -- a failed turn keeps its input -------------------------------------------------------------

def test_a_mistyped_model_keeps_the_prompt_and_mail_until_agent_set_fixes_it(conn, fakeapi):
    """The issue's first trap: a 404 on the first turn took the input for good."""
    fork("-n", "lead")
    agent("kill", "-s", "STOP", "lead")       # it gets mail, and --all leaves it alone
    fork("-p", "lead", "-n", "w", "-m", "openai:gpt-4o-mni", "summarise the logs")
    agent("send", "w", "and the mail")
    fakeapi.error(404, "The model `gpt-4o-mni` does not exist")
    result = agent("run", "w")
    assert result.code == 69 and "does not exist" in result.err
    w = row(conn, "w")
    assert w["held_at"] is not None and w["failures"] == 1 and "404" in w["last_failure"]
    assert agent("run", "--all").code == 1 and fakeapi.requests[1:] == []   # held: skipped
    assert "SH" in agent("ps", "-o", "name,stat").out.split("w", 1)[1].split("\n")[0]
    why = agent("why", "w")
    assert why.code == 1 and why.out.startswith("held after a failure") and "404" in why.out
    notices = conn.execute("SELECT body FROM mail WHERE kind = 'failure'").fetchall()
    assert len(notices) == 1 and "held, its input kept" in notices[0][0]
    assert agent("set", "w", "model=openai:gpt-4o-mini").code == 0
    assert row(conn, "w")["held_at"] is None and agent("why", "w").code == 0
    fakeapi.reply("done")
    result = shell("agent-run --all")
    assert (result.code, result.out, result.err) == (0, "w: done\n", "")
    sent = fakeapi.last["body"]
    assert sent["model"] == "gpt-4o-mini"
    texts = [m["content"] for m in sent["messages"] if m["role"] == "user"]
    assert texts[0] == "summarise the logs" and "and the mail" in texts[1]
    assert row(conn, "w")["failures"] == 0
    assert [e["setting"] for e in events(conn, "w", "set")] == ["model"]
    assert [e["by"] for e in events(conn, "w", "release")] == ["set"]


def test_a_turn_failed_after_a_step_resumes_where_it_failed(conn, tmp_path):
    """Its completed step is kept and not done again; an explicit run resumes the turn,
    a task too (held, not exited)."""
    steps = [{"tool_calls": [{"name": "ps", "arguments": {}}]}, {"fail": "error"}]
    fork("-n", "boss")
    fork("-p", "boss", "-n", "t", "-r", "task", "-m", script(tmp_path, {"steps": steps}), "go")
    assert agent("run", "t").code == 69
    assert row(conn, "t")["status"] == "S" and row(conn, "t")["held_at"] is not None
    assert agent("wait", "--timeout", "0", "t").code == 1          # held, not exited
    script(tmp_path, {"steps": [steps[0], {"content": "listed"}]})    # the model's file, mended
    assert agent("run", "t").out == "listed\n"
    assert row(conn, "t")["status"] == "Z"
    assert conn.execute("SELECT count(*) FROM messages WHERE kind = 'tool_call'").fetchone()[0] == 1


def test_an_unreadable_scripted_model_or_a_missing_key_holds_the_agent_once(conn, tmp_path):
    fork("-n", "lead")
    agent("kill", "-s", "STOP", "lead")
    fork("-p", "lead", "-n", "a", "-m", "scripted:relative/none.jsonl", "hi")
    fork("-p", "lead", "-n", "b", "-m", "openai:gpt-test", "hi")
    result = agent("run", "--all")
    assert result.code == 2
    assert "cannot read relative/none.jsonl" in result.err and "OPENAI_API_KEY" in result.err
    for name in ("a", "b"):
        assert row(conn, name)["held_at"] is not None
        assert len(events(conn, name, "held")) == 1
    assert shell("agent-run --all").code == 1 and shell("agent-run --all").err == ""
    assert len(conn.execute("SELECT * FROM mail WHERE kind = 'failure'").fetchall()) == 2
    assert agent("mail", "-c", "a").out == "0\n"             # nothing was taken


def test_cont_releases_a_held_agent_or_a_held_subtree(conn, tmp_path, monkeypatch):
    """agent-kill -s CONT: continue, so try again; with --cascade a subtree's holds all
    go, and agent-ps -q | agent-kill -s CONT lets every held agent go."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fork("-n", "lead")
    for name in ("a", "b"):
        fork("-p", "lead", "-n", name, "-m", "openai:gpt-test", "hi")
    assert agent("run", "--all").code == 2
    assert all(row(conn, n)["held_at"] is not None for n in ("a", "b"))
    assert agent("kill", "-s", "CONT", "a").code == 0
    assert row(conn, "a")["held_at"] is None and row(conn, "b")["held_at"] is not None
    assert agent("why", "a").code == 0                  # it would run: its input is there
    assert [e["by"] for e in events(conn, "a", "release")] == ["CONT"]
    assert "released by the operator (CONT)" in agent("log", "a").out
    assert agent("kill", "-s", "CONT", "--cascade", "lead").code == 0
    assert row(conn, "b")["held_at"] is None
    assert agent("kill", "-s", "CONT", "b").code == 0   # nothing held: nothing recorded
    assert len(events(conn, "b", "release")) == 1


def test_restart_policies_keep_their_meaning(conn, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTCTL_BACKOFF", "1h")
    fork("-n", "d", "--restart", "on-failure", "-m", script(tmp_path, {"reply": {"fail": "error"}}),
         "go")
    assert agent("run", "d").code == 69
    d = row(conn, "d")
    assert d["held_at"] is None and d["retry_at"] is not None and d["restarts"] == 1
    why = agent("why", "d").out
    assert why.startswith("backing off until ") and "1 failure(s)" in why
    assert agent("set", "d", "max_restarts=9").code == 0             # a change tries again
    assert row(conn, "d")["retry_at"] is None


# -- model options ----------------------------------------------------------------------------

@pytest.mark.parametrize("model, options, wire", [
    ("openai:gpt-test", ["temperature=0.2", "max_tokens=800", "seed=7", "stop=END"],
     {"temperature": 0.2, "max_tokens": 800, "seed": 7, "stop": "END"}),
    ("anthropic:claude-test", ["max_tokens=800", "stop=END", "effort=low"],
     {"max_tokens": 800, "stop_sequences": ["END"], "output_config": {"effort": "low"}}),
])
def test_model_options_reach_the_wire_in_each_providers_form(conn, fakeapi, model, options,
                                                             wire):
    fork("-n", "p", "-m", model, *[a for o in options for a in ("-o", o)])
    fork("-p", "p", "-n", "c", "hi")                                  # inherited
    fakeapi.reply("ok")
    assert agent("run", "c").out == "ok\n"
    body = fakeapi.last["body"]
    assert {k: body[k] for k in wire} == wire
    shown = json.loads(agent("ps", "-o", "options", "--format", "json").out)[-1]["options"]
    typed = {"temperature": 0.2, "max_tokens": 800, "seed": 7, "stop": "END", "effort": "low"}
    assert shown == {o.split("=")[0]: typed[o.split("=")[0]] for o in options}


def test_an_option_the_provider_does_not_take_is_a_clear_error(conn):
    result = agent("fork", "-m", "anthropic:claude-test", "-o", "temperature=0.2")
    assert result.code == 2
    assert result.err == ("agent-fork: unknown option temperature for model "
                          "anthropic:claude-test (known: effort, max_tokens, stop)\n")
    assert agent("fork", "-m", "openai:x", "-o", "temperature=3").code == 2
    assert agent("fork", "-m", "openai:x", "-o", "temperature").code == 2
    fork("-n", "o", "-m", "openai:x", "-o", "seed=1")
    bad = agent("set", "o", "model=anthropic:claude-test")          # seed goes with openai
    assert bad.code == 2 and "unknown option seed" in bad.err
    assert agent("set", "o", "model=anthropic:claude-test", "options=max_tokens=10").code == 0
    assert agent("set", "o", "-o", "stop=X", "-o", "max_tokens=").code == 0
    assert row(conn, "o")["options"] == "stop=X"
