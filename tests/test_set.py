"""agent-set: an agent's settings changed after its fork, as the settings' declaration says:
narrowed by the agent itself, widened only by an ancestor that has what it gives, a
budget carved from the parent's account in its own unit; one line for each refusal."""

from .conftest import agent, events, fork, row


def test_narrowing_is_always_allowed_widening_only_above(conn, monkeypatch):
    lead = fork("-n", "lead", "--allow", "read_file", "--allow", "list_dir", "--budget", "1000",
                "--max-children", "5")
    kid = fork("-p", "lead", "-n", "kid", "--allow", "read_file", "--allow", "list_dir",
               "--budget", "300")
    monkeypatch.setenv("AGENT_ID", kid)
    assert agent("set", "kid", "allow=read_file", "max_children=2").code == 0     # narrower
    assert agent("set", "kid", "ask=run:1h,write_*").code == 0                  # more asked
    assert row(conn, "kid")["ask"] == "run:1h\nwrite_*"
    assert agent("set", "kid", "ask=").code == 3                                # fewer asked
    refused = agent("set", "kid", "allow=read_file,list_dir")
    assert refused.code == 3 and "only narrow its own" in refused.err
    assert agent("set", "kid", "model=echo").code == 3
    assert agent("set", "lead", "max_children=1").code == 3       # not a descendant of kid
    monkeypatch.setenv("AGENT_ID", lead)
    assert agent("set", "kid", "allow=read_file,list_dir", "model=echo").code == 0
    widen = agent("set", "kid", "allow=write_file")
    assert widen.code == 3 and "can't use write_file" in widen.err
    assert agent("set", "kid", "max_children=9").code == 3          # lead holds 5
    assert agent("set", "kid", "budget=500").code == 0              # out of lead's account
    assert (row(conn, "lead")["budget"], row(conn, "kid")["budget"]) == (500, 500)
    assert agent("set", "kid", "budget=600").code == 0
    assert agent("set", "kid", "budget=9999").code == 3             # more than it has left
    assert agent("set", "kid", "budget=100").code == 0              # gives back 500
    assert (row(conn, "lead")["budget"], row(conn, "kid")["budget"]) == (900, 100)
    monkeypatch.delenv("AGENT_ID")
    assert agent("set", "lead", "allow=*", "max_children=50").code == 0     # the operator
    sets = [(e["setting"], e.get("old"), e.get("new")) for e in events(conn, "kid", "set")]
    assert sets[:2] == [("allow", "read_file,list_dir", "read_file"), ("max_children", "5", "2")]


def test_agent_set_errors(conn):
    fork("-n", "a", "-m", "echo")
    for args, code, text in [
            ((), 2, "nothing to set"), (("model",), 2, "want KEY=VALUE"),
            (("window=5",), 2, "unknown setting: window"), (("role=task",), 2, "set once"),
            (("model=nosuch:x",), 2, "unknown model"), (("cwd=/no/such/dir",), 2, "not a dir"),
            (("options=temperature=9",), 2, "temperature"), (("-o", "colour=red"), 2,
                                                              "unknown option colour"),
            (("schema={\"type\": \"thing\"}",), 2, "schema.type")]:
        result = agent("set", "a", *args)
        assert (result.code, result.out) == (code, ""), (args, result.err)
        assert text in result.err and result.err.count("\n") == 1, result.err
    assert agent("set", "nosuch", "model=echo").code == 1
    assert agent("set", "init", "model=echo").code == 3
    agent("kill", "a")
    assert agent("set", "a", "model=echo").code == 3


def test_a_setting_added_to_the_declaration_is_settable_with_no_code_of_its_own(conn,
                                                                               monkeypatch):
    """agent-set knows no setting by name: a new declaration (as the sandbox's ro, net ...)
    is picked up from agentctl.settings alone."""
    from agentctl import settings
    fork("-n", "a", "-m", "echo", "--reap-after", "1h")
    copy = settings.get("reap_after").replace(doc="Changed.")
    monkeypatch.setitem(settings.BY_NAME, "reap_after", copy)
    assert agent("set", "a", "reap_after=2h").code == 0
    assert row(conn, "a")["reap_after"] == 7200.0


def test_agent_set_changes_a_money_budget_in_its_unit(tmp_path, priced):
    fork("-n", "lead", "-m", "echo", "--budget", "$1")
    fork("-p", "lead", "-n", "w", "--budget", "$0.25")
    assert agent("set", "w", "budget=$0.40").code == 0         # 0.15 more from lead's
    assert [r.split() for r in agent("ps", "-o", "name,budget").lines[2:]] == [
        ["lead", "$0.0000/$0.6000"], ["w", "$0.0000/$0.4000"]]
    tokens = agent("set", "w", "budget=500")
    assert tokens.code == 2 and "counts dollars" in tokens.err, tokens
    fork("-p", "lead", "-n", "v")                               # charged to lead's
    assert agent("set", "v", "budget=0.10usd").code == 0       # an account of its own
    assert agent("ps", "-o", "name,budget").lines[-1].split() == ["v", "$0.0000/$0.1000"]
    assert agent("set", "w", "budget=$0.10").code == 0          # less gives back
    assert agent("ps", "-o", "name,budget").lines[2].split() == ["lead", "$0.0000/$0.8000"]
