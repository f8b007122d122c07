"""OpenTelemetry metrics (agent-run(1), TRACING, Metrics), sent to a real OTLP/HTTP
receiver on 127.0.0.1 that decodes the protobuf: the GenAI conventions' client metrics
of each model call (tokens by type, the cache's apart; duration, its error), what the
calls cost in agentctl's own metric, delta temporality, one request a run; each signal
on or off by its own variables; console's lines of JSON."""

import json

import pytest

from .conftest import agent, fork, script
from .fakeapi import fakeapi  # noqa: F401 (a fixture)
from .otlp import otlp  # noqa: F401 (a fixture)

TOKEN_BOUNDS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                16777216, 67108864]
SECOND_BOUNDS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                 40.96, 81.92]
USAGE = {"match": "^job", "reply": {"content": "done", "usage": {"input_tokens": 50,
                                                                  "output_tokens": 5}}}


def ran(*args):
    result = agent("run", *args)
    assert result.code == 0, result.err
    return result


def test_a_call_is_measured_in_the_conventions_and_priced(fakeapi, otlp, priced):  # noqa: F811
    fork("-n", "a", "-m", "anthropic:claude-test", "hi")
    fakeapi.reply("hello", usage=(100, 7), cached=(80, 15), served="claude-test-20250929")
    ran("a")
    assert otlp.metric_requests == 1        # the run's metrics, in one request
    port = int(fakeapi.url.rsplit(":", 1)[1])
    call = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
            "gen_ai.request.model": "claude-test",
            "gen_ai.response.model": "claude-test-20250929",
            "server.address": "127.0.0.1", "server.port": port}
    tokens = {p["attributes"]["gen_ai.token.type"]: p
              for p in otlp.measured("gen_ai.client.token.usage")}
    # input counts every prompt token (the cache's too), each part of the cache apart
    assert {kind: (p["count"], p["sum"]) for kind, p in tokens.items()} == {
        "input": (1, 100), "output": (1, 7), "cache_read": (1, 80), "cache_creation": (1, 15)}
    for kind, point in tokens.items():
        assert point["attributes"] == {**call, "gen_ai.token.type": kind}
        assert (point["type"], point["unit"], point["temporality"]) == (
            "histogram", "{token}", "DELTA")
        assert point["bounds"] == TOKEN_BOUNDS
    (duration,) = otlp.measured("gen_ai.client.operation.duration")
    assert duration["attributes"] == call and duration["unit"] == "s"
    assert duration["count"] == 1 and 0 < duration["sum"] < 120
    assert duration["bounds"] == SECOND_BOUNDS and duration["temporality"] == "DELTA"
    (cost,) = otlp.measured("agentctl.cost")
    # 5 fresh tokens at $3, 7 out at $15, 80 read at $0.30, 15 written at $3.75 a million
    assert (cost["type"], cost["unit"], cost["temporality"]) == ("sum", "USD", "DELTA")
    assert cost["value"] == pytest.approx(0.0002)
    assert cost["attributes"] == {"gen_ai.provider.name": "anthropic",
                                  "gen_ai.request.model": "claude-test"}
    assert cost["resource"]["service.name"] == "agentctl"


def test_a_failed_call_has_its_duration_and_no_tokens(tmp_path, otlp):  # noqa: F811
    fork("-n", "a", "-m", script(tmp_path, {"reply": {"fail": "tempfail"}}), "hi")
    assert agent("run", "a").code == 75
    (duration,) = otlp.measured("gen_ai.client.operation.duration")
    assert duration["attributes"]["error.type"] == "TempFail"
    assert otlp.measured("gen_ai.client.token.usage") == []
    assert otlp.measured("agentctl.cost") == []


def test_counts_the_api_did_not_give_are_not_measured(tmp_path, otlp):  # noqa: F811
    # the scripted model's reply has no usage: agentctl estimates it, the conventions
    # want no metric of an estimate
    fork("-n", "a", "-m", script(tmp_path, {"reply": {"content": "done"}}), "hi")
    ran("a")
    assert otlp.measured("gen_ai.client.token.usage") == []
    assert len(otlp.measured("gen_ai.client.operation.duration")) == 1
    assert otlp.measured("agentctl.cost") == []      # no price for it: no cost


def test_a_priced_offline_call_costs_what_its_price_says(tmp_path, otlp, priced):  # noqa: F811
    fork("-n", "a", "-m", script(tmp_path, USAGE), "job")
    ran("a")
    (cost,) = otlp.measured("agentctl.cost")
    assert cost["value"] == pytest.approx(0.055)      # 55 tokens at $1000 a million
    assert {p["attributes"]["gen_ai.token.type"]: p["sum"]
            for p in otlp.measured("gen_ai.client.token.usage")} == {"input": 50, "output": 5}


@pytest.mark.parametrize("variables, sent", [
    ({"OTEL_METRICS_EXPORTER": "none"}, (1, 0)),
    ({"OTEL_TRACES_EXPORTER": "none"}, (0, 1)),
    ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "", "OTEL_EXPORTER_OTLP_ENDPOINT": "",
      "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "{url}/v1/traces"}, (1, 0)),
])
def test_each_signal_is_asked_for_by_its_own_variables(tmp_path, otlp, monkeypatch,  # noqa: F811
                                                       variables, sent):
    for name, value in variables.items():
        monkeypatch.setenv(name, value.format(url=otlp.url))
    fork("-n", "a", "-m", script(tmp_path, USAGE), "job")
    result = ran("a")
    assert result.err == ""
    assert (otlp.requests, otlp.metric_requests) == sent


def test_the_operator_may_ask_for_cumulative_sums(tmp_path, otlp, monkeypatch):  # noqa: F811
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "cumulative")
    fork("-n", "a", "-m", script(tmp_path, USAGE), "job")
    ran("a")
    assert {p["temporality"] for p in otlp.points} == {"CUMULATIVE"}


def test_console_writes_a_line_of_json_for_each_span_and_point(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "console")
    fork("-n", "a", "-m", script(tmp_path, USAGE), "job")
    result = ran("a")
    assert result.out == "done\n"                   # standard output is the turn's
    lines = [json.loads(line) for line in result.err.splitlines()]
    spans = {line["name"]: line for line in lines if "name" in line}
    assert set(spans) == {"invoke_agent a", f"chat {tmp_path / 'script.jsonl'}"}
    chat = spans[f"chat {tmp_path / 'script.jsonl'}"]
    assert chat["parent_id"] == spans["invoke_agent a"]["span_id"]
    assert chat["kind"] == "CLIENT" and chat["attributes"]["gen_ai.usage.input_tokens"] == 50
    points = {(p["metric"], p["attributes"].get("gen_ai.token.type")): p["value"]
              for p in lines if "metric" in p}
    assert points[("gen_ai.client.token.usage", "output")]["sum"] == 5
    assert points[("gen_ai.client.operation.duration", None)]["count"] == 1
