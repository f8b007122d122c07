"""Budgets: carving at fork, spending per model call, turns refused or ended
over budget, the parent's notice, unspent budget given back, agent-ps."""

import json

import pytest

from .conftest import agent, fork, mails, script
from agentctl.ops import lifecycle


def reply(content, tokens, *calls):
    """A reply whose model call costs `tokens` (half in, half out)."""
    return {"content": content, "usage": {"input_tokens": tokens // 2,
                                          "output_tokens": tokens - tokens // 2},
            "tool_calls": [{"name": name, "arguments": args} for name, args in calls]}


def ps(ref):
    rows = json.loads(agent("ps", "-a", "--format", "json", "-o", "name,budget,spent").out)
    return next((r["budget"], r["spent"]) for r in rows if r["name"] == ref)


def test_fork_carves_the_childs_budget_out_of_the_parents_account(conn):
    fork("-n", "boss", "--budget", "1000")
    assert ps("boss") == (1000, 0)        # forked by the operator: nothing to carve from
    fork("-p", "boss", "-n", "kid", "--budget", "300")
    assert ps("boss") == (700, 0) and ps("kid") == (300, 0)
    fork("-p", "boss", "-n", "helper")    # no budget of its own: charged to boss
    assert ps("helper") == (700, 0)
    fork("-p", "helper", "-n", "grandkid", "--budget", "200")
    assert ps("boss") == (500, 0) and ps("grandkid") == (200, 0)
    over = agent("fork", "-p", "boss", "-n", "greedy", "--budget", "501")
    assert (over.code, over.err) == (
        3, "agent-fork: budget 501 is more than the account of boss has left (500 tokens)\n")
    assert ps("boss") == (500, 0)
    assert agent("ps", "-q").lines.__len__() == 5
    for bad in ("0", "-5", "lots"):
        result = agent("fork", "-p", "boss", "--budget", bad)
        assert result.code == 2 and "--budget" in result.err, result.err
    table = agent("ps", "-f").lines
    assert table[0].split()[-1] == "BUDGET"
    assert [line.split()[-1] for line in table[1:]] == ["-", "0/500", "0/300", "(boss)", "0/200"]
    assert table[4].endswith("0/500 (boss)")        # it shares boss's account
    assert agent("ps", "-o", "name,budget", "--format", "tsv").lines[1] == "init\t"


def test_every_model_call_is_charged_to_the_account(conn, tmp_path):
    model = script(tmp_path, {"match": "work", "steps": [
        reply("one", 30, ("ps", {})), reply("two", 20, ("ps", {})), reply("three", 10)]})
    fork("-n", "boss", "-m", model, "--budget", "1000")
    fork("-p", "boss", "-n", "helper", "work")      # shares boss's account
    result = agent("run", "--json", "helper")
    assert result.code == 0, result.err
    assert json.loads(result.out)["steps"] == 3
    assert ps("boss") == (1000, 60) and ps("helper") == (1000, 60)
    row = conn.execute("SELECT tokens_in + tokens_out, spent FROM agents "
                       "WHERE name = 'helper'").fetchone()
    assert tuple(row) == (60, 0)      # its own tokens as ever; spending is the account's
    assert agent("ps", "-o", "name,budget").lines[-1].split() == ["helper", "60/1000", "(boss)"]


def test_turn_refused_at_start_when_over_budget_and_the_parent_told_once(conn, tmp_path):
    model = script(tmp_path, {"reply": reply("pricey", 80)})
    fork("-n", "boss", "-m", model)
    fork("-p", "boss", "-n", "kid", "--budget", "50", "go")
    assert agent("run", "kid").code == 0        # the call that crosses the limit is made
    assert ps("kid") == (50, 80)
    notices = mails(conn, "boss", "budget")
    assert len(notices) == 1 and "kid" in notices[0] and "spent 80 of 50" in notices[0]
    agent("send", "kid", "and now?")
    for _ in range(2):
        result = agent("run", "kid")
        assert (result.code, result.out, result.err) == (
            3, "", "agent-run: kid: over budget (spent 80 of 50 tokens)\n")
    assert agent("mail", "-c", "kid").out == "1\n"           # its input stays pending
    assert agent("ps", "-o", "name,stat").lines[-1].split() == ["kid", "S"]
    assert len(mails(conn, "boss", "budget")) == 1
    ran = agent("run", "--all", "--json")       # boss reads its notice; kid is skipped
    boss = agent("ps", "-q", "--parent", "init").lines[0]
    assert [json.loads(line)["agent"] for line in ran.lines] == [boss]
    assert agent("run", "--all").code == 1
    assert agent("mail", "-c", "kid").out == "1\n"


def test_refusal_tells_the_parent_when_no_one_was_told(conn, tmp_path):
    fork("-n", "boss", "-m", "echo")
    fork("-p", "boss", "-n", "kid", "--budget", "100", "go")
    conn.execute("UPDATE agents SET spent = 150 WHERE name = 'kid'")
    conn.commit()
    assert agent("run", "kid").code == 3
    assert agent("run", "kid").code == 3
    notices = mails(conn, "boss", "budget")
    assert len(notices) == 1 and "spent 150 of 100" in notices[0]
    assert agent("mail", "-r", "boss").out.startswith("--- mail 1 from kid (budget)")


def test_a_turn_that_runs_out_ends_before_its_next_model_call(conn, tmp_path):
    model = script(tmp_path, {"match": "go", "steps": [
        reply("first", 60, ("ps", {})), reply("second", 60, ("ps", {})), reply("never", 1)]})
    fork("-n", "boss", "-m", model)
    fork("-p", "boss", "-n", "kid", "--budget", "100", "go")
    result = agent("run", "--json", "kid")
    assert result.code == 0
    assert result.err == "agent-run: kid: turn ended over budget (spent 120 of 100 tokens)\n"
    record = json.loads(result.out)
    assert (record["status"], record["steps"], record["text"]) == ("over_budget", 2, "second")
    turn = conn.execute("SELECT status, ended_at FROM turns ORDER BY id DESC").fetchone()
    assert turn["status"] == "over_budget" and turn["ended_at"] is not None
    unanswered = conn.execute("SELECT count(*) FROM messages c WHERE c.kind = 'tool_call' AND "
                              "NOT EXISTS (SELECT 1 FROM messages r WHERE r.kind = "
                              "'tool_result' AND r.tool_call_id = c.tool_call_id)").fetchone()
    assert unanswered[0] == 0
    assert agent("ps", "-o", "name,stat").lines[-1].split() == ["kid", "S"]
    assert len(mails(conn, "boss", "budget")) == 1


def test_unspent_budget_goes_back_to_the_parents_account_on_exit(conn, tmp_path):
    model = script(tmp_path, {"reply": reply("ok", 40)})
    fork("-n", "boss", "--budget", "1000")
    fork("-p", "boss", "-n", "kid", "-m", model, "--budget", "300", "go")
    fork("-p", "boss", "-n", "idle", "--budget", "100")
    assert agent("run", "kid").code == 0
    assert ps("boss") == (600, 0) and ps("kid") == (300, 40)
    assert agent("kill", "kid").code == 0
    assert ps("boss") == (860, 0) and ps("kid") == (40, 40)
    fork("-p", "boss", "-n", "kid2", "--budget", "860")     # all of it is usable again
    assert ps("boss") == (0, 0)
    # an account another living agent is still charged to is kept, until that one exits
    fork("-p", "idle", "-n", "user")
    agent("kill", "idle")
    assert ps("idle") == (100, 0) and ps("boss") == (0, 0)
    agent("kill", "user")
    assert ps("idle") == (0, 0) and ps("boss") == (100, 0)


def test_a_cascade_gives_every_unspent_token_back_to_a_living_account(conn):
    """Killed parents first, a grandchild's tokens must not go into its dead
    parent's account: they go up to the nearest account still in use."""
    fork("-n", "lead", "--budget", "1000")
    fork("-p", "lead", "-n", "a", "--budget", "300")
    fork("-p", "a", "-n", "b", "--budget", "100")
    fork("-p", "a", "-n", "x")                      # charged to a's account
    fork("-p", "b", "-n", "y")                      # charged to b's account
    assert ps("lead") == (700, 0) and ps("a") == (200, 0)
    assert agent("kill", "--cascade", "a").code == 0
    assert ps("lead") == (1000, 0) and ps("a") == (0, 0) and ps("b") == (0, 0)


def test_a_notice_goes_to_a_living_ancestor_when_the_owner_has_exited(conn, tmp_path):
    model = script(tmp_path, {"reply": reply("pricey", 80)})
    fork("-n", "root", "-m", model)
    fork("-p", "root", "-n", "top")
    fork("-p", "top", "-n", "lead", "--budget", "50")
    fork("-p", "lead", "-n", "x", "go")             # spends lead's account
    agent("kill", "lead")
    assert agent("wait", "lead").code == 3          # reaped: its parent stays top
    agent("kill", "top")                            # a zombie now; x is root's
    assert agent("run", "x").code == 0
    assert mails(conn, "top", "budget") == []       # an agent that has exited gets nothing
    notices = mails(conn, "root", "budget")
    assert len(notices) == 1 and "lead" in notices[0] and "(by x, " in notices[0]


@pytest.mark.parametrize("budget, result", [
    (200, None),
    (5000, "error: budget 5000 is more than the account of boss has left (1000 tokens)"),
    ("lots", "error: budget must be an integer"),
    (0, "error: budget must be at least 1"),
    (10 ** 20, "error: budget must be at most 9223372036854775807"),     # an SQLite INTEGER
])
def test_the_fork_tool_takes_a_budget(conn, tmp_path, budget, result):
    model = script(tmp_path, {"match": "plan", "steps": [
        {"content": "forking", "tool_calls": [
            {"name": "fork", "arguments": {"name": "w1", "prompt": "job", "budget": budget}}],
         "usage": {"input_tokens": 0, "output_tokens": 0}},
        {"content": "done", "usage": {"input_tokens": 0, "output_tokens": 0}}]})
    fork("-n", "top", "--budget", "2000")
    fork("-p", "top", "-n", "boss", "-m", model, "--budget", "1000", "plan")
    assert agent("run", "boss").code == 0
    text = conn.execute("SELECT content FROM messages WHERE kind = 'tool_result' AND "
                        "tool_name = 'fork' AND agent_id = (SELECT id FROM agents WHERE "
                        "name = 'boss')").fetchone()[0]
    if result is None:
        assert ps("w1") == (200, 0) and ps("boss") == (800, 0) and ps("top") == (1000, 0)
    else:
        assert text == result and ps("boss") == (1000, 0)


def test_all_skips_an_agent_whose_shared_account_ran_out_after_the_list_was_made(conn, tmp_path):
    model = script(tmp_path, {"reply": reply("pricey", 150)})
    fork("-n", "boss", "--budget", "100")
    fork("-p", "boss", "-n", "a", "-m", model, "go")
    fork("-p", "boss", "-n", "b", "-m", model, "go")
    result = agent("run", "--all")
    assert result.code == 0, result.err
    assert result.err.splitlines() == [    # (the count of runs is for a terminal)
        "agent-run: b: over budget (account of boss: spent 150 of 100 tokens)"]
    assert agent("run", "--all").code == 1          # b is left alone from now on


def test_a_summary_call_that_spends_the_rest_ends_the_turn_before_its_step(conn, tmp_path):
    model = script(tmp_path, {"match": r"^\[COMPACT\]", "reply": reply("SUMMARY", 5000)},
                   {"reply": reply("ok", 210)})
    fork("-n", "boss", "-m", model)
    fork("-p", "boss", "-n", "kid", "-w", "100", "--budget", "1000", "x" * 600)
    assert agent("run", "kid").code == 0                 # no compaction yet: one message
    agent("send", "kid", "more " * 50)
    result = agent("run", "--json", "kid")
    assert result.code == 0 and json.loads(result.out)["status"] == "over_budget", result
    assert json.loads(result.out)["steps"] == 0
    assert ps("kid") == (1000, 210 + 5000)               # the step's call was not made
    assert len(mails(conn, "boss", "budget")) == 1


def test_ps_f_in_machine_formats_gives_spent_beside_budget(conn):
    fork("-n", "boss", "--budget", "1000")
    rows = json.loads(agent("ps", "-f", "--format", "json").out)
    assert list(rows[1]) == ["id", "name", "parent", "stat", "role", "msgs", "mail", "age",
                             "wake", "budget", "spent", "depth"]
    assert (rows[1]["budget"], rows[1]["spent"]) == (1000, 0)
    assert agent("ps", "-f").lines[0].split()[-2:] == ["WAKE", "BUDGET"]


def test_a_cascade_down_a_deep_chain_of_budgets_returns_everything(conn):
    """Ended deepest first, each account gives back to the one just above: the
    top gets every token back."""
    from agentctl.store import registry
    from agentctl.store.db import transaction
    with transaction(conn):
        top = lifecycle.fork(conn, registry.get(conn, "AAAAAAAAAAAAAAAAAAAAAA"), name="top",
                             budget=100000)
        parent = top
        for depth in range(60):
            parent = lifecycle.fork(conn, registry.get(conn, parent), budget=50000 - depth * 500)
    first = conn.execute("SELECT id FROM agents WHERE parent_id = ?", (top,)).fetchone()[0]
    assert agent("kill", "--cascade", first).code == 0
    assert ps("top") == (100000, 0)
    statuses = {r[0] for r in conn.execute("SELECT status FROM agents WHERE id NOT IN (?, ?)",
                                           ("AAAAAAAAAAAAAAAAAAAAAA", top))}
    assert statuses == {"Z", "X"}


def test_the_table_marks_an_inherited_account_and_tokens_are_each_agents_own(conn):
    fork("-n", "lead", "--budget", "1000", "-m", "echo", "hello there")
    fork("-p", "lead", "-n", "kid", "-m", "echo", "hi")
    assert agent("run", "lead").code == 0
    assert agent("run", "kid").code == 0
    fork("-n", "free", "-m", "echo", "hey")
    assert agent("run", "free").code == 0
    rows = {r.split()[0]: r.split()[1:] for r in agent(
        "ps", "-o", "name,budget,tokens", "--no-headers").lines}
    lead_tokens, kid_tokens = int(rows["lead"][-1]), int(rows["kid"][-1])
    spent = lead_tokens + kid_tokens
    assert rows["lead"][:-1] == [f"{spent}/1000"]
    assert rows["kid"][:-1] == [f"{spent}/1000", "(lead)"]    # the account, not its own
    assert rows["free"][0] == "-" and int(rows["free"][1]) > 0
    shown = json.loads(agent("ps", "-o", "name,spent,tokens", "--format", "json").out)
    assert {r["name"]: r["tokens"] for r in shown}["kid"] == kid_tokens
