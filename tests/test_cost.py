"""What it costs (agentctl(7), COST): usage as the providers report it (cache reads and
writes apart), money per call, turn and agent, prices from the operator's file or the
price database, unpriced models, budgets in dollars carved down the tree, and the cache
hints each provider takes."""

import json

import pytest

from agentctl import endpoint, modelspec
from agentctl.errors import UsageError
from agentctl.models import Cache
from agentctl.models.anthropic import request_body as anthropic_body
from agentctl.models.api import Endpoint
from agentctl.models.openai import OpenAIModel
from agentctl.ops import prices
from agentctl.store.db import connect, transaction
from tests.fakeapi import ask, fakeapi  # noqa: F401 (a fixture)
from tests.fakechecks import request_problem

from .conftest import agent, fork, script


# -- usage as the providers report it -----------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("spec, cached, read, written", [
    ("anthropic:claude-test", (80, 15), 80, 15),
    ("openai:gpt-test", (80, 0), 80, 0),
])
def test_cache_reads_and_writes_are_counted_apart(fakeapi, stream, spec, cached, read,  # noqa: F811
                                                  written):
    fakeapi.reply("hi", usage=(100, 7), cached=cached)
    reply, _ = ask(spec, stream)
    assert reply.usage == {"input_tokens": 100, "output_tokens": 7, "cache_read_tokens": read,
                           "cache_write_tokens": written, "estimated": False}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("timings, read", [({"cache_n": 90, "prompt_n": 10}, 90),
                                           ({"prompt_n": 25}, 75)])
def test_llama_servers_timings_say_what_its_cache_held(fakeapi, stream, timings,  # noqa: F811
                                                       read):
    fakeapi.reply("hi", usage=(100, 7), timings=dict(timings, predicted_n=7))
    reply, _ = ask("openai:gpt-test", stream)
    assert reply.usage["cache_read_tokens"] == read and reply.usage["input_tokens"] == 100


# -- money ---------------------------------------------------------------------------------------

def test_a_call_is_priced_and_recorded_per_call_turn_and_agent(fakeapi, priced):  # noqa: F811
    fork("-n", "a", "-m", "anthropic:claude-test", "hello")
    fakeapi.reply("done", usage=(10000, 500), cached=(8000, 1000))
    result = agent("run", "--format", "json", "a")
    assert result.code == 0, result.err
    record = json.loads(result.out)
    # 1,000 fresh at $3, 8,000 read at $0.30, 1,000 written at $3.75, 500 out at $15 /MTok
    dollars = (1000 * 3 + 8000 * 0.30 + 1000 * 3.75 + 500 * 15) / 1e6
    assert record["cost"] == pytest.approx(dollars) and record["unpriced"] == 0
    assert (record["input_tokens"], record["cache_read_tokens"],
            record["cache_write_tokens"]) == (10000, 8000, 1000)
    row = json.loads(agent("ps", "-o", "id,tokens,cached,cost,unpriced", "--format",
                           "json").out)[-1]
    assert row["tokens"] == 10500 and row["cached"] == 8000
    assert row["cost"] == pytest.approx(dollars) and row["unpriced"] == 0
    assert agent("ps", "-o", "cost").lines[-1] == "$0.0167"
    log = agent("log", "--kind", "call,turn-end", "a").lines
    assert log[0].endswith("model call anthropic:claude-test: 10000+500 tokens (8000 cached, "
                           "1000 written), $0.0167 (turn 1)")
    assert "turn 1 done: 1 step, 10000+500 tokens (8000 cached, 1000 written), $0.0167" \
        in log[1]


def test_a_model_without_a_price_is_unpriced_not_free(fakeapi):  # noqa: F811
    fork("-n", "a", "-m", "openai:gpt-test", "hello")
    fakeapi.reply("done", usage=(100, 5))
    record = json.loads(agent("run", "--format", "json", "a").out)
    assert record["cost"] is None and record["unpriced"] == 1
    assert agent("ps", "-o", "name,cost").lines[-1].split() == ["a", "unpriced"]
    assert json.loads(agent("ps", "-o", "cost", "--format", "json").out)[-1]["cost"] is None
    assert agent("log", "--kind", "call", "a").lines[0].endswith(", unpriced (turn 1)")


def test_the_price_database_prices_a_public_api_and_not_a_local_one():
    genai_prices = pytest.importorskip("genai_prices")
    usage = {"input_tokens": 10000, "cache_read_tokens": 8000, "cache_write_tokens": 1000,
             "output_tokens": 500}
    url = "https://api.anthropic.com"
    micros = prices.cost("anthropic:claude-sonnet-4-5", url, usage)
    want = genai_prices.calc_price(genai_prices.Usage(**usage), "claude-sonnet-4-5",
                                   provider_api_url=url).total_price
    assert micros == round(want * 1_000_000) and micros > 0
    fresh = prices.cost("anthropic:claude-sonnet-4-5", url, dict(usage, cache_read_tokens=0))
    assert fresh > micros                       # a cache read costs less than fresh input
    hour = prices.cost("anthropic:claude-sonnet-4-5", url, dict(usage, cache_write_1h_tokens=1000))
    assert hour > micros                        # an hour's write costs more than 5 minutes'
    for local in ("http://127.0.0.1:8080/v1", "http://localhost:11434/v1",
                  "http://192.168.1.5:8000/v1"):
        assert prices.cost("openai:gpt-4o", local, usage) is None
    assert prices.cost("anthropic:claude-nosuch", url, usage) is None
    assert prices.cost("scripted:x", "", usage) is None


@pytest.mark.parametrize("url, where", [
    ("http://127.0.0.1:8080/v1", "loopback"), ("http://127.1.2.3/v1", "loopback"),
    ("http://localhost:11434/v1", "loopback"), ("http://LocalHost./v1", "loopback"),
    ("http://gpu.localhost:8000", "loopback"), ("http://[::1]:8000/v1", "loopback"),
    ("http://[::ffff:127.0.0.1]:8000/v1", "loopback"),
    ("http://192.168.1.5:8000/v1", "private"), ("http://10.0.0.5:8080/v1", "private"),
    ("http://169.254.1.1/v1", "private"), ("http://gpu.local:8000/v1", "private"),
    ("https://api.openai.com/v1", None), ("http://8.8.8.8/v1", None),
    ("http://localhost.example.com/v1", None), ("http://mylocal/v1", None),
])
def test_one_rule_says_where_a_server_is_for_its_key_and_its_price(url, where, monkeypatch):
    """modelspec.locality() is asked by both: a loopback server needs no key
    (agentctl/endpoint.py), a loopback or private one has no public price (ops/prices.py)."""
    assert modelspec.locality(url) == where
    monkeypatch.delenv("AGENTCTL_PRICES", raising=False)
    if where == "loopback":
        assert endpoint.api_key("OPENAI_API_KEY", url, "openai:x") == ""
    else:
        with pytest.raises(UsageError, match="OPENAI_API_KEY is not set"):
            endpoint.api_key("OPENAI_API_KEY", url, "openai:x")
    asked = []
    monkeypatch.setattr(prices, "_database_price", lambda name, at: asked.append(at))
    assert prices.cost("openai:gpt-4o", url, {"input_tokens": 10, "output_tokens": 1}) is None
    assert asked == ([] if where else [url])


def test_a_price_file_that_is_no_price_file_is_a_usage_error(tmp_path, monkeypatch):
    bad = tmp_path / "prices"
    bad.write_text("openai:*  cheap\n")
    monkeypatch.setenv("AGENTCTL_PRICES", str(bad))
    fork("-n", "a", "-m", "echo", "hello")
    result = agent("run", "a")
    assert result.code == 2
    assert result.err == (f"agent-run: AGENTCTL_PRICES: {bad}:1: want MODEL INPUT OUTPUT "
                          "[CACHE_READ [CACHE_WRITE [CACHE_WRITE_1H]]], prices in dollars "
                          "per million tokens\n")
    assert agent("replay", "--format", "jsonl", "a").lines[-1].count('"turn_id": null')
    monkeypatch.setenv("AGENTCTL_PRICES", str(tmp_path / "nosuch"))
    assert agent("run", "a").code == 2


# -- budgets in dollars ----------------------------------------------------------------------------

def test_a_money_budget_is_carved_spent_and_refused_as_tokens_are(tmp_path, priced):
    model = script(tmp_path, {"reply": {"content": "done", "usage": {  # $0.015 a call
        "input_tokens": 10, "output_tokens": 5}}})
    lead = fork("-n", "lead", "-m", model, "--budget", "$0.05")
    assert agent("fork", "-p", "lead", "--budget", "100", "x").code == 2     # not in tokens
    refused = agent("fork", "-p", "lead", "--budget", "0.06usd", "x")
    assert (refused.code, refused.err) == (3, "agent-fork: budget $0.0600 is more than the "
                                              "account of lead has left ($0.0500)\n")
    fork("-p", "lead", "-n", "w", "--budget", "0.02usd", "work")
    assert [r.split() for r in agent("ps", "-o", "name,budget").lines[2:]] == [
        ["lead", "$0.0000/$0.0300"], ["w", "$0.0000/$0.0200"]]
    agent("send", "lead", "go")
    for _ in range(2):
        assert agent("run", "lead").code == 0
        agent("send", "lead", "more")
    result = agent("run", "lead")
    assert (result.code, result.err) == (3, "agent-run: lead: over budget (spent $0.0300 of "
                                            "$0.0300)\n")
    rows = json.loads(agent("ps", "-o", "name,budget,spent,budget_unit,cost",
                            "--format", "json").out)
    assert rows[1] == {"name": "lead", "budget": 0.03, "spent": 0.03, "budget_unit": "usd",
                       "cost": 0.03}
    assert agent("log", "--kind", "budget", "lead").lines[0].endswith(
        "budget exhausted: $0.0300 of $0.0300")
    # what the worker leaves goes back when it exits
    assert agent("run", "w").code == 0
    assert agent("kill", "w").code == 0
    assert agent("ps", "-o", "name,budget").lines[2].split() == ["lead", "$0.0300/$0.0350"]
    assert lead


def test_the_fork_tool_takes_a_budget_in_dollars(tmp_path, priced):
    model = script(tmp_path, {"match": "^plan", "steps": [
        {"content": "", "tool_calls": [{"name": "fork", "arguments": {
            "name": "w", "budget_usd": 0.01, "prompt": "work"}}]},
        {"content": "", "tool_calls": [{"name": "fork", "arguments": {
            "name": "v", "budget": 10, "budget_usd": 0.01}}]},
        {"content": "forked"}]}, {"reply": {"content": "ok"}})
    fork("-n", "lead", "-m", model, "--budget", "$1", "plan")
    assert agent("run", "lead").code == 0
    assert agent("ps", "-o", "name,budget").lines[-1].split() == ["w", "$0.0000/$0.0100"]
    results = [json.loads(r) for r in agent("replay", "--format", "jsonl", "lead").lines]
    errors = [r["content"] for r in results if r["kind"] == "tool_result"]
    assert errors[1] == "error: give budget (tokens) or budget_usd (dollars), not both"


def test_a_token_budget_does_not_count_what_the_cache_served(tmp_path):
    model = script(tmp_path, {"reply": {"content": "done", "usage": {
        "input_tokens": 100, "output_tokens": 5, "cache_read_tokens": 90,
        "cache_write_tokens": 4}}})
    fork("-n", "a", "-m", model, "--budget", "1000", "hello")
    assert agent("run", "a").code == 0
    row = json.loads(agent("ps", "-o", "spent,tokens,cached", "--format", "json").out)[-1]
    assert row == {"spent": 15, "tokens": 105, "cached": 90}


def test_a_subtree_is_totalled_in_one_column(tmp_path, priced):
    model = script(tmp_path, {"reply": {"content": "done", "usage": {"input_tokens": 10,
                                                                   "output_tokens": 5}}})
    fork("-n", "lead", "-m", model, "go")
    fork("-p", "lead", "-n", "w1", "work")
    fork("-p", "w1", "-n", "w2", "work")
    fork("-n", "other", "-m", model, "go")
    for name in ("lead", "w1", "w2", "other"):
        assert agent("run", name).code == 0
    rows = agent("ps", "-o", "name,cost,tree_cost").lines
    assert [r.split() for r in rows[1:]] == [["init", "-", "$0.0600"],
                                             ["lead", "$0.0150", "$0.0450"],
                                             ["w1", "$0.0150", "$0.0300"],
                                             ["w2", "$0.0150", "$0.0150"],
                                             ["other", "$0.0150", "$0.0150"]]
    assert agent("kill", "-s", "KILL", "w2").code == 0          # the dead still count
    agent("wait", "w2")                                         # reaped: X
    rows = json.loads(agent("ps", "-o", "name,tree_cost", "--format", "json").out)
    assert rows[1] == {"name": "lead", "tree_cost": 0.045, "tree_unpriced": 0}


def test_a_machine_reads_a_subtree_total_with_the_calls_it_lacks(tmp_path, priced):
    """A subtree with an unpriced call: the table marks its total +?, a machine format
    carries the count beside it (agent-ps(1), tree_cost)."""
    reply = {"reply": {"content": "done", "usage": {"input_tokens": 10, "output_tokens": 5}}}
    fork("-n", "lead", "-m", script(tmp_path, reply), "go")
    fork("-p", "lead", "-n", "w", "-m", script(tmp_path, reply, name="w.jsonl"), "work")
    for name in ("lead", "w"):
        assert agent("run", name).code == 0
    conn = connect(None)
    with transaction(conn):     # as if w's model had no price
        conn.execute("UPDATE agents SET cost = NULL, unpriced = 1 WHERE name = 'w'")
    conn.close()
    assert agent("ps", "-o", "name,tree_cost").lines[2].split() == ["lead", "$0.0150+?"]
    rows = json.loads(agent("ps", "-o", "name,tree_cost", "--format", "json").out)
    assert rows[1] == {"name": "lead", "tree_cost": 0.015, "tree_unpriced": 1}
    tsv = agent("ps", "-o", "tree_unpriced,name", "--format", "tsv").lines
    assert tsv[0].split("\t") == ["tree_unpriced", "name"] and tsv[2].split("\t") == ["1", "lead"]


# -- cache hints -----------------------------------------------------------------------------------

MESSAGES = [{"role": "system", "content": "Be brief. " * 400},
            {"role": "user", "content": "one " * 1000},
            {"role": "assistant", "content": "two " * 1000},
            {"role": "user", "content": "three"}]


def breakpoints(body):
    text = json.dumps(body)
    return text.count('"cache_control"')


@pytest.mark.parametrize("ttl", ["5m", "1h"])
def test_anthropic_breakpoints_pass_the_sdks_types(ttl):
    body = anthropic_body("claude-sonnet-4-5", MESSAGES, [], 100, False, Cache((1, 2, 3)), ttl)
    assert request_problem("anthropic", body) is None
    assert breakpoints(body) == 4       # the system prompt and the three marks
    assert body["system"][0]["cache_control"] == (
        {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": "1h"})
    assert body["messages"][2]["content"][-1]["cache_control"]
    off = anthropic_body("claude-sonnet-4-5", MESSAGES, [], 100, False, Cache((1, 2, 3)), "off")
    assert breakpoints(off) == 0 and off["system"] == MESSAGES[0]["content"]


def test_anthropic_skips_a_prefix_below_the_models_minimum():
    short = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert breakpoints(anthropic_body("claude-sonnet-4-5", short, [], 100, False,
                                      Cache((1,)))) == 0
    # 4,000 characters: above Sonnet's 1,024 tokens, below Haiku 4.5's 4,096
    long = [{"role": "system", "content": "Be brief. " * 400}, {"role": "user", "content": "hi"}]
    assert breakpoints(anthropic_body("claude-sonnet-4-5", long, [], 100, False, Cache())) == 1
    assert breakpoints(anthropic_body("claude-haiku-4-5", long, [], 100, False, Cache())) == 0


def test_a_bad_cache_ttl_is_a_usage_error(fakeapi, monkeypatch):  # noqa: F811
    monkeypatch.setenv("AGENTCTL_CACHE_TTL", "2h")
    fork("-n", "a", "-m", "anthropic:claude-test", "hello")
    result = agent("run", "a")
    assert (result.code, result.err) == (2, "agent-run: AGENTCTL_CACHE_TTL must be 5m, 1h or "
                                            "off, not '2h'\n")
    assert fakeapi.requests == []


@pytest.mark.parametrize("url, sent", [("https://api.openai.com/v1", True),
                                       ("http://127.0.0.1:8080/v1", False)])
def test_openai_gets_a_prompt_cache_key_and_other_servers_nothing(url, sent):
    model = OpenAIModel("gpt-4o")
    endpoint = Endpoint(url, "", model.options(url))
    body = model.request_body(MESSAGES, [], False, endpoint, Cache((3,), "agentctl-AAAA"))
    assert ("prompt_cache_key" in body) is sent
    assert request_problem("openai", body) is None
    if sent:
        assert body["prompt_cache_key"] == "agentctl-AAAA"


def test_a_family_shares_one_prompt_cache_key(fakeapi, monkeypatch):  # noqa: F811
    """The key comes from the lineage's root: a child and a grandchild send the lead's."""
    seen = []
    real = OpenAIModel.request_body

    def spy(self, messages, tools, stream, endpoint, cache=None):
        seen.append(cache.key)
        return real(self, messages, tools, stream, endpoint, cache)
    monkeypatch.setattr(OpenAIModel, "request_body", spy)
    lead = fork("-n", "lead", "-m", "openai:gpt-test", "go")
    fork("-p", "lead", "-n", "c", "work")
    fork("-p", "c", "-n", "g", "work")
    for name in ("lead", "c", "g"):
        fakeapi.reply("ok")
        assert agent("run", name).code == 0
    assert seen == [f"agentctl-{lead}"] * 3
