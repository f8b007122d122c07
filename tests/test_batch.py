"""Turns at batch prices (agentctl(7), TIERS): an agent at the batch tier sends each step's
model call through its provider's batch API, ends its run, and a later run collects the
result; against the fake of both providers' batch APIs on 127.0.0.1 (tests/fakebatch.py),
which checks each request as the real APIs would."""

import pytest

from .conftest import agent, events, fork, row, started, status
from .fakeapi import MODELS, fakeapi  # noqa: F401 (a fixture)

CALLS = ("/v1/chat/completions", "/v1/messages")


@pytest.fixture
def batching(fakeapi, monkeypatch):  # noqa: F811
    """The fake API, every batch polled by every run (no interval)."""
    monkeypatch.setenv("AGENTCTL_BATCH_POLL", "0")
    return fakeapi


def direct(api):
    """The direct (standard) model calls the fake API was sent."""
    return [r for r in api.requests if r["path"] in CALLS]


def replies(conn, ref):
    """The agent's assistant messages that count (not voided), oldest first."""
    return [r[0] for r in conn.execute(
        "SELECT content FROM messages WHERE agent_id = ? AND kind = 'assistant' AND void = 0 "
        "ORDER BY id", (row(conn, ref)["id"],))]


def shown(name, columns):
    """agent-ps's cells of `columns` for the agent `name`."""
    lines = agent("ps", "-o", f"name,{columns}").lines[1:]
    return next(line.split()[1:] for line in lines if line.split()[0] == name)


def requests(conn, ref):
    """(state, outcome) of each of the agent's batched calls, oldest first."""
    return [tuple(r) for r in conn.execute(
        "SELECT state, outcome FROM batched WHERE agent_id = ? ORDER BY created_at, id",
        (row(conn, ref)["id"],))]


@pytest.mark.parametrize("model", MODELS)
def test_a_batched_turn_exits_at_once_and_a_later_run_collects_it(batching, conn, model):
    fork("-n", "a", "-m", model, "--tier", "batch", "say hi")
    batching.reply("hi from the batch", usage=(1200, 30))
    run = agent("run", "--json", "a")
    assert run.code == 0, run.err
    assert '"status": "batched"' in run.out
    (made,) = batching.batches.made
    assert made.provider == model.partition(":")[0] and len(made.requests) == 1
    assert direct(batching) == [] and replies(conn, "a") == []
    assert status(conn, "a") == "S"
    why = agent("why", "a")
    assert why.code == 1 and f"in batch {made.id}" in why.out, why.out
    assert shown("a", "stat,tier") == ["Sb", "batch"]
    top = next(line for line in agent("top").out.splitlines() if " a " in line)
    assert " Sb " in top and "batch: model call submitted" in top, top
    # a run before the batch ends polls it and runs nothing
    idle = agent("run", "--all")
    assert idle.code == 1 and idle.out == "" and replies(conn, "a") == []
    batching.batches.finish()
    done = agent("run", "--all")
    assert done.code == 0, done.err
    assert done.out == "a: hi from the batch\n"
    assert replies(conn, "a") == ["hi from the batch"] and direct(batching) == []
    assert requests(conn, "a") == [("applied", "succeeded")]
    (call,) = events(conn, "a", "call")
    assert call["tier"] == "batch" and call["input_tokens"] == 1200
    assert agent("why", "a").out.startswith("nothing pending")
    assert agent("run", "--all").code == 1      # nothing more: applied once


def test_a_turn_with_two_tool_rounds_is_three_batches(batching, conn):
    fork("-n", "a", "-m", "openai:gpt-test", "--tier", "batch", "look twice")
    batching.reply("", tool_calls=[("check_mail", "{}")])
    batching.reply("", tool_calls=[("check_mail", "{}")])
    batching.reply("looked twice")
    assert agent("run", "a").code == 0
    for made in range(1, 4):
        assert len(batching.batches.made) == made
        batching.batches.finish()
        assert agent("run", "--all").code == 0
    assert replies(conn, "a")[-1] == "looked twice" and direct(batching) == []
    assert [r[0] for r in requests(conn, "a")] == ["applied"] * 3
    assert [len(b.requests) for b in batching.batches.made] == [1, 1, 1]
    assert [t[0] for t in events(conn, "a", "tool", "kind")] == ["tool", "tool"]


def test_agent_run_all_sends_the_agents_due_in_one_batch_per_model(batching, conn):
    for name in ("a", "b", "c"):
        fork("-n", name, "-m", "openai:gpt-test", "--tier", "batch", f"hello {name}")
    fork("-n", "d", "-m", "openai:gpt-other", "--tier", "batch", "hello d")
    for _ in range(4):
        batching.reply("hi")
    assert agent("run", "--all").code == 0
    made = sorted(batching.batches.made, key=lambda b: len(b.requests))
    assert [len(b.requests) for b in made] == [1, 3]      # OpenAI: one model a file
    assert {b.model for b in made} == {"gpt-other", "gpt-test"}
    batching.batches.finish()
    assert agent("run", "--all").code == 0
    assert all(replies(conn, n) == ["hi"] for n in "abcd")


def test_a_batch_is_at_most_the_batch_size(batching, conn, monkeypatch):
    monkeypatch.setenv("AGENTCTL_BATCH_SIZE", "2")
    for name in "abc":
        fork("-n", name, "-m", "anthropic:claude-test", "--tier", "batch", "hello")
    assert agent("run", "--all").code == 0
    assert sorted(len(b.requests) for b in batching.batches.made) == [1, 2]


def test_two_runners_collecting_the_same_results_apply_them_once(batching, conn):
    from agentctl.turn import batches
    fork("-n", "a", "-m", "openai:gpt-test", "--tier", "batch", "hello")
    batching.reply("once")
    assert agent("run", "a").code == 0
    batching.batches.finish()
    both = [started("agent-run", "--all") for _ in range(2)]    # each polls and collects
    outs = [p.communicate(timeout=120) for p in both]
    assert {p.returncode for p in both} <= {0, 1}, outs    # (1: it found none to run)
    assert "".join(out for out, _ in outs) == "a: once\n"
    assert replies(conn, "a") == ["once"] and len(events(conn, "a", "call")) == 1
    assert requests(conn, "a") == [("applied", "succeeded")]
    batches.poll(conn)          # a collector late to the party changes nothing
    assert requests(conn, "a") == [("applied", "succeeded")]
    with pytest.raises(Exception, match="applied or abandoned already"):
        with __import__("agentctl.store.db", fromlist=["transaction"]).transaction(conn):
            batches.take(conn, conn.execute("SELECT id FROM batched").fetchone()[0])


@pytest.mark.parametrize("model", MODELS)
def test_an_expired_request_is_made_as_a_standard_call(batching, conn, model):
    fork("-n", "a", "-m", model, "--tier", "batch", "hello")
    assert agent("run", "a").code == 0
    batching.batches.expire()
    batching.reply("answered at the standard tier")
    assert agent("run", "--all").code == 0
    assert replies(conn, "a") == ["answered at the standard tier"]
    assert len(direct(batching)) == 1 and requests(conn, "a") == [("applied", "expired")]
    (call,) = events(conn, "a", "call")
    assert "tier" not in call


def test_a_request_that_failed_for_now_is_made_as_a_standard_call(batching, conn):
    fork("-n", "a", "-m", "openai:gpt-test", "--tier", "batch", "hello")
    assert agent("run", "a").code == 0
    batching.error(500, "the server had an error")
    batching.batches.finish()
    batching.reply("standard after all")
    assert agent("run", "--all").code == 0
    assert replies(conn, "a") == ["standard after all"]
    assert requests(conn, "a") == [("applied", "errored")]


@pytest.mark.parametrize("model", MODELS)
def test_a_refused_request_fails_the_turn_and_is_said(batching, conn, model):
    fork("-n", "a", "-m", model, "--tier", "batch", "hello")
    assert agent("run", "a").code == 0
    batching.error(400, "prompt is malformed")
    batching.batches.finish()
    run = agent("run", "--all")
    assert run.code == 69, run.err
    assert "batch request refused" in run.err and "prompt is malformed" in run.err
    assert row(conn, "a")["held_at"] is not None and direct(batching) == []
    assert "batch request refused" in agent("why", "a").out
    (ended,) = [e for e in events(conn, "a", "batch") if e["state"] == "ended"]
    assert ended["outcome"] == "refused"


def test_kill_abandons_the_request_and_cancels_its_batch(batching, conn):
    fork("-n", "a", "-m", "anthropic:claude-test", "--tier", "batch", "hello")
    batching.reply("never applied")
    assert agent("run", "a").code == 0
    assert agent("kill", "-s", "KILL", "a").code == 0
    assert requests(conn, "a") == [("abandoned", None)]
    assert agent("run", "--all").code == 1
    (made,) = batching.batches.made
    assert made.cancelled and batching.batches.calls["cancel"] == 1
    assert requests(conn, "a") == [("cancelled", None)]
    assert agent("run", "--all").code == 1 and batching.batches.calls["cancel"] == 1
    assert replies(conn, "a") == []


def test_kill_of_one_leaves_a_shared_batch_to_the_others(batching, conn):
    for name in "ab":
        fork("-n", name, "-m", "openai:gpt-test", "--tier", "batch", "hello")
    batching.reply("for one")
    batching.reply("for the other")
    assert agent("run", "--all").code == 0
    assert agent("kill", "-s", "KILL", "a").code == 0
    assert agent("run", "--all").code == 1
    (made,) = batching.batches.made
    assert not made.cancelled
    batching.batches.finish()
    assert agent("run", "--all").code == 0
    assert replies(conn, "a") == [] and len(replies(conn, "b")) == 1


def test_a_provider_without_a_batch_api_is_a_failed_turn(conn, tmp_path):
    fork("-n", "a", "-m", "echo", "--tier", "batch", "hello")
    run = agent("run", "a")
    assert run.code == 2 and "has no batch API" in run.err


def test_tier_is_a_setting_a_child_inherits_and_agent_set_changes(conn):
    fork("-n", "lead", "--tier", "batch")
    fork("-p", "lead", "-n", "w")
    assert row(conn, "w")["tier"] == "batch"
    assert agent("set", "w", "tier=flex").code == 0
    assert shown("w", "tier") == ["flex"]
    bad = agent("set", "w", "tier=cheap")
    assert bad.code == 2 and bad.err.startswith("agent-set: unknown tier: cheap")
    assert shown("w", "stat") == ["Sf"]


def test_a_request_the_provider_could_not_take_is_sent_by_a_later_run(batching, conn,
                                                                      monkeypatch):
    from agentctl.errors import TempFail
    from agentctl.models import batch

    def unreachable(*args):
        raise TempFail("model API unavailable: openai: cannot connect to 127.0.0.1")
    fork("-n", "a", "-m", "openai:gpt-test", "--tier", "batch", "hello")
    with monkeypatch.context() as m:
        m.setattr(batch, "submit", unreachable)
        run = agent("run", "a")
    assert run.code == 0 and requests(conn, "a") == [("queued", None)], run.err
    assert "queued" in agent("why", "a").out
    batching.reply("sent at last")
    assert agent("run", "a").code == 0
    assert requests(conn, "a") == [("sent", None)] and len(batching.batches.made) == 1
    batching.batches.finish()
    assert agent("run", "a").out == "sent at last\n"


def test_a_batch_the_provider_failed_fails_the_turn_with_its_reason(batching, conn):
    fork("-n", "a", "-m", "openai:gpt-test", "--tier", "batch", "hello")
    assert agent("run", "a").code == 0
    batching.batches.fail(message="the input file is malformed")
    run = agent("run", "--all")
    assert run.code == 69 and "batch failed: the input file is malformed" in run.err, run.err
    assert requests(conn, "a") == [("applied", "refused")] and direct(batching) == []


def test_a_batch_the_provider_refuses_to_make_fails_the_turn(batching, conn, monkeypatch):
    from agentctl.models import ModelError, batch

    def refused(*args):
        raise ModelError("model API error: openai: HTTP 400: batches are not enabled")
    fork("-n", "a", "-m", "openai:gpt-test", "--tier", "batch", "hello")
    monkeypatch.setattr(batch, "submit", refused)
    run = agent("run", "a")
    assert run.code == 69 and "batches are not enabled" in run.err, run.err
    assert requests(conn, "a") == [("applied", "refused")]
    assert "batch request refused" in agent("why", "a").out
