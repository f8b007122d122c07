"""OpenTelemetry traces (agent-run(1), TRACING): spans in the GenAI semantic conventions,
sent to a real OTLP/HTTP receiver on 127.0.0.1 that decodes the protobuf; a trace for
each turn, linked to its cause; the request's parameters and the response's id and
model; no message text unless the operator opts in; nothing at all, and
nothing of OpenTelemetry imported, without the variables; flushed before agent-run
exits, on exit 75 and on a KILL of the agent too."""

import json
import os
import subprocess
import sys
import threading

import pytest

from .conftest import ROOT, agent, fork, script, started, wait_until
from .fakeapi import fakeapi  # noqa: F401 (a fixture)
from .otlp import otlp  # noqa: F401 (a fixture)

LEAD_RULES = [
    {"match": "INBOX", "reply": {"content": "all done"}},
    {"match": "^plan", "steps": [
        {"content": "forking", "tool_calls": [
            {"id": "f1", "name": "fork",
             "arguments": {"name": "w1", "role": "task", "prompt": "job one SECRET-PROMPT"}},
            {"id": "f2", "name": "fork",
             "arguments": {"name": "w2", "role": "task", "prompt": "job two"}}],
         "usage": {"input_tokens": 120, "output_tokens": 30, "cache_read_tokens": 100,
                   "cache_write_tokens": 20}},
        {"content": "forked two"}]},
    {"match": "^job", "reply": {"content": "done", "usage": {"input_tokens": 50,
                                                              "output_tokens": 5}}},
]


def ran(*args):
    result = agent("run", *args)
    assert result.code == 0, result.err
    return result


def test_each_turn_is_a_trace_linked_to_what_caused_it(tmp_path, otlp):  # noqa: F811
    lead = fork("-n", "lead", "-m", script(tmp_path, *LEAD_RULES), "plan the work")
    ran("lead")
    ran("w1")
    ran("w2")
    ran("lead")                 # woken by its workers' exit notices
    assert otlp.requests == 4   # each agent-run sent its spans, in one request, before it returned

    turns = otlp.named("invoke_agent")
    assert [s["name"] for s in turns] == ["invoke_agent lead", "invoke_agent w1",
                                          "invoke_agent w2", "invoke_agent lead"]
    first, w1, w2, second = turns
    # a trace for each turn, its invoke_agent span the root, the turn's spans under it
    assert len({s["trace"] for s in turns}) == 4
    assert all(s["parent"] == "" for s in turns)
    for turn in turns:
        assert all(s["parent"] == turn["span"] for s in otlp.spans
                   if s["trace"] == turn["trace"] and s is not turn)
    # each linked to its cause: a worker's to the fork call that made it, a later turn
    # of the lead's to its turn before; the first to nothing
    by_id = {s["span"]: s for s in otlp.spans}

    def cause(turn):
        (link,) = turn["links"]
        caused_by = by_id[link["span"]]
        assert caused_by["trace"] == link["trace"]
        return caused_by
    assert first["links"] == []
    assert cause(w1)["name"] == "execute_tool fork"
    assert cause(w1)["attributes"]["gen_ai.tool.call.id"] == "f1"
    assert cause(w2)["attributes"]["gen_ai.tool.call.id"] == "f2"
    assert cause(w1)["trace"] == first["trace"]
    assert cause(second) is first
    assert first["kind"] == "INTERNAL" and first["resource"]["service.name"] == "agentctl"
    assert first["attributes"] == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "scripted",
        "gen_ai.agent.id": lead, "gen_ai.agent.name": "lead",
        "gen_ai.conversation.id": lead, "gen_ai.request.model": str(tmp_path / "script.jsonl"),
        "agentctl.agent.role": "agent", "agentctl.turn.id": 1, "agentctl.turn.resumed": False,
        "agentctl.turn.status": "done", "agentctl.turn.steps": 2,
        "gen_ai.usage.input_tokens": first["attributes"]["gen_ai.usage.input_tokens"],
        "gen_ai.usage.output_tokens": first["attributes"]["gen_ai.usage.output_tokens"],
        "gen_ai.usage.cache_read.input_tokens": 100,
        "gen_ai.usage.cache_creation.input_tokens": 20}
    assert first["attributes"]["gen_ai.usage.input_tokens"] > 120

    chats = [s for s in otlp.spans if s["parent"] == first["span"]
             and s["name"].startswith("chat")]
    assert len(chats) == 2 and all(c["kind"] == "CLIENT" for c in chats)
    chats.sort(key=lambda s: s["start"])
    attributes = chats[0]["attributes"]
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.response.finish_reasons"] == ["tool_call"]
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"],
            attributes["gen_ai.usage.cache_read.input_tokens"],
            attributes["gen_ai.usage.cache_creation.input_tokens"]) == (120, 30, 100, 20)
    assert chats[1]["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    tools = [s for s in otlp.spans if s["name"] == "execute_tool fork"]
    assert [t["attributes"]["agentctl.tool.outcome"] for t in tools] == ["ok", "ok"]
    assert tools[0]["attributes"]["gen_ai.tool.type"] == "function"
    assert all(s["status"] != "ERROR" for s in otlp.spans)
    # a span starts before, and ends after, the spans under it
    assert first["start"] <= chats[0]["start"] and chats[1]["end"] <= first["end"]
    # no message text without the operator's opt-in
    text = json.dumps([s["attributes"] for s in otlp.spans])
    assert "SECRET-PROMPT" not in text and "forked two" not in text
    assert "gen_ai.input.messages" not in text


def test_message_text_is_exported_only_when_the_operator_opts_in(tmp_path, otlp,  # noqa: F811
                                                                  monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    fork("-n", "lead", "-m", script(tmp_path, *LEAD_RULES), "-s", "You lead.", "plan the work")
    ran("lead")
    chat = otlp.named("chat")[0]["attributes"]
    assert json.loads(chat["gen_ai.system_instructions"]) == [{"type": "text",
                                                               "content": "You lead."}]
    assert json.loads(chat["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "plan the work"}]}]
    # a tool's result as the conventions' schema names it: a tool_call_response's response
    later = json.loads(otlp.named("chat")[1]["attributes"]["gen_ai.input.messages"])
    (response,) = later[2]["parts"]
    assert response["type"] == "tool_call_response" and response["id"] == "f1"
    assert set(response) == {"type", "id", "response"} and response["response"]
    output = json.loads(chat["gen_ai.output.messages"])
    assert output[0]["finish_reason"] == "tool_call"
    assert output[0]["parts"][0] == {"type": "text", "content": "forking"}
    assert output[0]["parts"][1]["name"] == "fork"
    call = otlp.named("execute_tool")[0]["attributes"]
    assert "SECRET-PROMPT" in call["gen_ai.tool.call.arguments"]
    assert call["gen_ai.tool.call.result"]      # the child's id


def test_nothing_is_exported_or_imported_without_the_variables(tmp_path, otlp,  # noqa: F811
                                                                monkeypatch):
    endpoint = os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT")
    fork("-n", "a", "-m", script(tmp_path, *LEAD_RULES), "job three")
    # what was imported of the telemetry's code, and of OpenTelemetry's (never a module:
    # the SDK would cost a run more than exporting may)
    code = ("import sys\nfrom agentctl.cli.run import main\ncode = main(['a'])\n"
            "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry', "
            "'google.protobuf', 'agentctl.turn.telemetry', 'agentctl.turn.otlp'))), "
            "file=sys.stderr)\nsys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, OTEL_SERVICE_NAME="x",
                                              OTEL_EXPORTER_OTLP_HEADERS="a=b"))
    assert proc.returncode == 0 and proc.stdout == "done\n"
    assert proc.stderr == "[]\n"            # not one module of the telemetry
    # the same with the variable that names an exporter: imported, and exported
    agent("send", "a", "job four")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint))
    assert proc.returncode == 0
    assert proc.stderr == "['agentctl.turn.otlp', 'agentctl.turn.telemetry']\n"
    assert [s["name"] for s in otlp.spans if s["name"].startswith("invoke")] == ["invoke_agent a"]
    assert otlp.requests == 1               # the first run sent nothing
    # "none" names none
    agent("send", "a", "job five")
    assert agent("run", "a").code == 0
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    agent("send", "a", "job six")
    assert agent("run", "a").code == 0
    assert otlp.requests == 1


def test_spans_are_flushed_before_exit_75(tmp_path, otlp):  # noqa: F811
    fork("-n", "a", "-m", script(tmp_path, {"reply": {"fail": "tempfail"}}), "hi")
    proc = started("agent-run", "a")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err
    # the process has exited: what it exported is here already, nothing to wait for
    (turn,) = otlp.named("invoke_agent")
    (chat,) = otlp.named("chat")
    assert chat["parent"] == turn["span"]
    for span in (turn, chat):
        assert span["status"] == "ERROR" and span["attributes"]["error.type"] == "TempFail"
        assert "model API unavailable" in span["message"]


def test_spans_are_flushed_when_the_agent_is_killed_mid_call(fakeapi, otlp):  # noqa: F811
    fork("-n", "a", "-m", "openai:gpt-test", "hi")
    hold = threading.Event()
    fakeapi.reply("never seen", hold=hold)
    try:
        proc = started("agent-run", "a")
        wait_until(lambda: fakeapi.requests, "the model call")
        assert agent("kill", "-s", "KILL", "a").code == 0
        out, err = proc.communicate(timeout=120)   # it gives the call up: the KILL is seen
    finally:
        hold.set()
    assert proc.returncode == 3, err
    (turn,) = otlp.named("invoke_agent")
    (chat,) = otlp.named("chat gpt-test")
    assert chat["parent"] == turn["span"]
    assert turn["attributes"]["agentctl.turn.status"] == "killed"
    for span in (turn, chat):
        assert span["status"] == "ERROR" and span["attributes"]["error.type"] == "killed"
    assert chat["attributes"]["gen_ai.provider.name"] == "openai"


def test_an_api_call_names_its_server_its_response_and_its_request(fakeapi, otlp):  # noqa: F811
    fork("-n", "a", "-m", "anthropic:claude-test", "-o", "max_tokens=300", "-o", "stop=END",
         "hi")
    fakeapi.reply("hello", usage=(100, 7), cached=(80, 15), served="claude-test-20250929",
                  reply_id="msg_01AbC")
    ran("a")
    (chat,) = otlp.named("chat")
    (turn,) = otlp.named("invoke_agent")
    port = int(fakeapi.url.rsplit(":", 1)[1])
    assert chat["name"] == "chat claude-test"
    assert {k: chat["attributes"][k] for k in (
        "gen_ai.provider.name", "gen_ai.request.model", "server.address", "server.port",
        "gen_ai.usage.input_tokens", "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_creation.input_tokens", "gen_ai.response.id",
        "gen_ai.response.model", "gen_ai.request.max_tokens",
        "gen_ai.request.stop_sequences")} == {
        "gen_ai.provider.name": "anthropic", "gen_ai.request.model": "claude-test",
        "server.address": "127.0.0.1", "server.port": port, "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.cache_read.input_tokens": 80,
        "gen_ai.usage.cache_creation.input_tokens": 15, "gen_ai.response.id": "msg_01AbC",
        "gen_ai.response.model": "claude-test-20250929", "gen_ai.request.max_tokens": 300,
        "gen_ai.request.stop_sequences": ["END"]}
    assert turn["attributes"]["gen_ai.request.max_tokens"] == 300


def test_the_request_parameters_are_the_model_options_the_conventions_name(tmp_path,  # noqa: F811
                                                                            otlp):
    fork("-n", "a", "-m", script(tmp_path, *LEAD_RULES), "-o", "temperature=0.2",
         "-o", "top_p=0.9", "-o", "seed=7", "-o", "frequency_penalty=0.5",
         "-o", "presence_penalty=-0.5", "-o", "reasoning_effort=low", "job")
    ran("a")
    (chat,) = otlp.named("chat")
    request = {k: v for k, v in chat["attributes"].items() if k.startswith("gen_ai.request.")}
    assert request == {"gen_ai.request.model": str(tmp_path / "script.jsonl"),
                       "gen_ai.request.temperature": 0.2, "gen_ai.request.top_p": 0.9,
                       "gen_ai.request.seed": 7, "gen_ai.request.frequency_penalty": 0.5,
                       "gen_ai.request.presence_penalty": -0.5}
    # none the API gave: no gen_ai.response.*
    assert not [k for k in chat["attributes"] if k.startswith("gen_ai.response.") and
                k != "gen_ai.response.finish_reasons"]


@pytest.mark.parametrize("variables, said, sent", [
    ({"OTEL_TRACES_EXPORTER": "zipkin"},
     "OTEL_TRACES_EXPORTER=zipkin: not supported (otlp, console or none): no traces",
     (0, 1)),
    ({"OTEL_METRICS_EXPORTER": "prometheus"},
     "OTEL_METRICS_EXPORTER=prometheus: not supported (otlp, console or none): no metrics",
     (1, 0)),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},         # one line for both
     "OTLP protocol grpc: only http/protobuf is supported: no traces or metrics", (0, 0)),
    ({"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"},
     "OTLP protocol grpc: only http/protobuf is supported: no metrics", (1, 0)),
])
def test_an_exporter_agentctl_cant_make_is_said_and_the_turn_runs(tmp_path, otlp,  # noqa: F811
                                                                   monkeypatch, variables,
                                                                   said, sent):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    fork("-n", "a", "-m", script(tmp_path, *LEAD_RULES), "job")
    result = agent("run", "a")
    assert result.code == 0 and result.out == "done\n"
    assert result.err == f"agent-run: tracing: {said}\n"
    assert (otlp.requests, otlp.metric_requests) == sent


def test_a_collector_out_of_reach_is_said_and_the_turn_runs(tmp_path, monkeypatch):
    import socket
    with socket.socket() as s:      # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    fork("-n", "a", "-m", script(tmp_path, *LEAD_RULES), "job")
    result = agent("run", "a")
    assert result.code == 0 and result.out == "done\n"
    # one line for both signals, said at once (nothing listens: nothing to wait for)
    assert result.err == ("agent-run: tracing: traces and metrics not exported: "
                          f"http://127.0.0.1:{port}: Connection refused\n")
