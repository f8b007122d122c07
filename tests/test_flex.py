"""OpenAI's flex tier and the prices of the tiers (agentctl(7), TIERS and Cost): an agent
at the flex tier asks service_tier flex, waits for the tier's capacity without holding
back the standard agents of its endpoint, falls back to the standard tier, and each call
is priced as its response says it was served."""

import pytest

from agentctl.ops import prices

from .conftest import agent, events, fork, row
from .fakeapi import fakeapi  # noqa: F401 (a fixture)

CALL = "/v1/chat/completions"


def sent_tiers(api):
    return [r["body"].get("service_tier") for r in api.requests if r["path"] == CALL]


def test_a_flex_agent_asks_the_flex_tier_and_is_priced_as_flex(fakeapi, conn):  # noqa: F811
    fork("-n", "f", "-m", "openai:gpt-test", "--tier", "flex", "hello")
    fakeapi.reply("flexed")
    run = agent("run", "f")
    assert run.code == 0 and run.out == "flexed\n", run.err
    assert sent_tiers(fakeapi) == ["flex"]
    (call,) = events(conn, "f", "call")
    assert call["tier"] == "flex"
    assert "(flex)" in agent("log", "--kind", "call", "f").out


def test_a_flex_call_served_at_the_standard_tier_is_priced_as_standard(
        fakeapi, conn):  # noqa: F811
    fork("-n", "f", "-m", "openai:gpt-test", "--tier", "flex", "hello")
    fakeapi.reply("served by default", service_tier="default")
    assert agent("run", "f").code == 0
    (call,) = events(conn, "f", "call")
    assert "tier" not in call


def test_no_capacity_waits_and_tries_again_without_throttling_the_endpoint(
        fakeapi, conn):  # noqa: F811
    fork("-n", "f", "-m", "openai:gpt-test", "--tier", "flex", "hello")
    fakeapi.flex_unavailable(times=2)
    fakeapi.reply("third time")
    run = agent("run", "f")
    assert run.code == 0 and run.out == "third time\n", run.err
    assert sent_tiers(fakeapi) == ["flex", "flex", "flex"]
    # flex's 429 is the tier's capacity, not the endpoint's limit: nobody else waits
    assert conn.execute("SELECT count(*) FROM endpoints WHERE not_before IS NOT NULL "
                        "OR refused_at IS NOT NULL").fetchone()[0] == 0
    assert events(conn, "f", "throttle") == []
    fork("-n", "s", "-m", "openai:gpt-test", "hello")
    fakeapi.reply("standard at once")
    assert agent("run", "s").out == "standard at once\n"


def test_after_its_wait_a_flex_call_is_made_at_the_standard_tier(
        fakeapi, conn, monkeypatch):  # noqa: F811
    monkeypatch.setenv("AGENTCTL_FLEX_WAIT", "0")
    fork("-n", "f", "-m", "openai:gpt-test", "--tier", "flex", "hello")
    fakeapi.flex_unavailable()
    fakeapi.reply("standard after all")
    run = agent("run", "f")
    assert run.code == 0 and run.out == "standard after all\n", run.err
    assert sent_tiers(fakeapi) == ["flex", None]
    assert "tier" not in events(conn, "f", "call")[0]


def test_a_model_without_flex_is_called_at_the_standard_tier(fakeapi, conn):  # noqa: F811
    fork("-n", "f", "-m", "openai:gpt-test", "--tier", "flex", "hello")
    fakeapi.error(400, "Invalid service_tier: flex is not available for this model")
    fakeapi.reply("standard")
    assert agent("run", "f").out == "standard\n"
    assert sent_tiers(fakeapi) == ["flex", None]


def test_a_provider_without_flex_gets_standard_calls(fakeapi, conn):  # noqa: F811
    fork("-n", "f", "-m", "anthropic:claude-test", "--tier", "flex", "hello")
    fakeapi.reply("plain")
    assert agent("run", "f").out == "plain\n"
    assert "service_tier" not in fakeapi.requests[-1]["body"]
    assert row(conn, "f")["tier"] == "flex"


USAGE = {"input_tokens": 1_000_000, "output_tokens": 1_000_000}


@pytest.mark.parametrize("model, url", [("openai:gpt-5", "https://api.openai.com/v1"),
                                        ("anthropic:claude-sonnet-4-5",
                                         "https://api.anthropic.com")])
def test_the_price_database_prices_batch_at_half(model, url):
    standard = prices.cost(model, url, USAGE)
    assert prices.cost(model, url, dict(USAGE, tier="batch")) == -(-standard // 2)


def test_the_operators_prices_take_a_tier_or_its_documented_discount(tmp_path, monkeypatch):
    path = tmp_path / "prices"
    path.write_text("openai:gpt-x*@batch 1 2\n"
                    "openai:gpt-x* 10 20\n")
    monkeypatch.setenv("AGENTCTL_PRICES", str(path))
    url = "http://127.0.0.1:9/v1"
    assert prices.cost("openai:gpt-x1", url, USAGE) == 30_000_000
    assert prices.cost("openai:gpt-x1", url, dict(USAGE, tier="batch")) == 3_000_000
    assert prices.cost("openai:gpt-x1", url, dict(USAGE, tier="flex")) == 15_000_000


def test_a_batched_call_is_charged_at_the_batch_price(
        fakeapi, conn, priced, monkeypatch):  # noqa: F811
    monkeypatch.setenv("AGENTCTL_BATCH_POLL", "0")
    fork("-n", "s", "-m", "anthropic:claude-test", "hello")
    fork("-n", "b", "-m", "anthropic:claude-test", "--tier", "batch", "hello")
    fakeapi.reply("standard", usage=(100_000, 1000))
    assert agent("run", "s").code == 0
    fakeapi.reply("batched", usage=(100_000, 1000))
    assert agent("run", "b").code == 0
    fakeapi.batches.finish()
    assert agent("run", "--all").code == 0
    (standard,), (batched,) = events(conn, "s", "call"), events(conn, "b", "call")
    assert batched["cost"] == pytest.approx(standard["cost"] / 2)
    assert row(conn, "b")["cost"] * 2 == pytest.approx(row(conn, "s")["cost"], abs=1)
