"""OpenTelemetry traces and metrics of a turn (agent-run(1), TRACING), in the GenAI
semantic conventions: an invoke_agent span for the run of a turn, a chat span for each
model call, an execute_tool span for each tool call; each call's client metrics
(gen_ai.client.token.usage, gen_ai.client.operation.duration) and what it cost
(agentctl.cost).

Only when the standard variables name an exporter (wanted()), and only then is the
telemetry's code imported (turn/telemetry.py, turn/otlp.py: not the OpenTelemetry SDK,
whose import would cost a run more than exporting may); without them agent-run's
start-up is unchanged.

A trace for each run of a turn, linked to what caused it rather than nested under it:
the agent's row holds a trace context (agents.trace), that of the fork tool call that
made it (or its parent's: ops.lifecycle.fork), then that of its latest traced turn;
each turn links to it and puts its own in its place. So a long-lived agent's turns are
as many short traces, each a link away from the one before, and a worker's first turn
a link away from the lead's fork call.

No message text is exported unless the operator opts in with the conventions' own
variable, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.
"""

import json
import os
import time

from agentctl import keys, money, voice
from agentctl.ops import lease, prices
from agentctl.store import registry
from agentctl.text import first_line
from agentctl.turn.toolset import Paused, TaskWaits
from agentctl.turn.watch import Watcher

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
EXPORTERS = ("otlp", "console")
SIGNALS = ("traces", "metrics")
# The conventions' finish reasons (gen_ai.response.finish_reasons) for agentctl's
FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_call"}
# The model options (agent-fork -o) the conventions name a request attribute for
REQUEST = {"temperature": "gen_ai.request.temperature", "top_p": "gen_ai.request.top_p",
           "max_tokens": "gen_ai.request.max_tokens", "seed": "gen_ai.request.seed",
           "frequency_penalty": "gen_ai.request.frequency_penalty",
           "presence_penalty": "gen_ai.request.presence_penalty",
           "stop": "gen_ai.request.stop_sequences"}
# A call's tokens by gen_ai.token.type: the conventions' input (every prompt token, those
# of the cache included) and output, and the cache's parts of input, under values of
# agentctl's named after the span attributes (the conventions name no type for them)
TOKENS = (("input", "input_tokens"), ("output", "output_tokens"),
          ("cache_read", "cache_read_tokens"), ("cache_creation", "cache_write_tokens"))


def wanted(signal="traces", environ=None):
    """The exporters the standard variables name for `signal` (traces or metrics):
    OTEL_TRACES_EXPORTER (OTEL_METRICS_EXPORTER), else an OTLP endpoint (otlp), else ();
    read without importing the telemetry's code."""
    environ = os.environ if environ is None else environ
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ()
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    named = [n.strip().lower() for n in environ.get(variable, "").split(",") if n.strip()]
    if named:
        return tuple(n for n in named if n != "none")
    if environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT") or \
            environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return ("otlp",)
    return ()


def capture(environ=None):
    """Whether the operator opted in to message text on spans."""
    environ = os.environ if environ is None else environ
    return environ.get(CAPTURE, "").strip().lower() in ("true", "1", "yes", "span_only",
                                                         "span_and_event")


def start(warn):
    """The run's Tracer, or None: no exporter named, or none that can be made here
    (`warn` says why, one line for each reason: the run goes on without them)."""
    chosen, refused = {}, {}
    for signal in SIGNALS:
        names = wanted(signal)
        why = names and _problem(signal, names)
        if why:
            refused.setdefault(why, []).append(signal)
        elif names:
            chosen[signal] = names
    for why, lost in refused.items():
        warn(f"tracing: {why}: no {' or '.join(lost)}")
    if not chosen:
        return None
    from agentctl.turn import telemetry  # (start-up: 1.5 ms, only when tracing)
    return Tracer(telemetry.Telemetry(chosen, warn))


def _problem(signal, names):
    """Why the exporters `names` can't send `signal` from here, or None."""
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        return (f"OTEL_{signal.upper()}_EXPORTER={','.join(unknown)}: not supported "
                "(otlp, console or none)")
    if "otlp" in names:
        protocol = (os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
                    or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
        if protocol.strip() != "http/protobuf":
            return f"OTLP protocol {protocol}: only http/protobuf is supported"
    return None


class Tracer(Watcher):
    """The spans and measurements of one run of a turn, exported when it ends (end():
    before agent-run exits, whatever it exits with)."""

    def __init__(self, telemetry):
        self.telemetry = telemetry
        self.traced = "traces" in telemetry.chosen
        self.capture = capture()
        self.turn_span = self.chat_span = self.tool_span = None
        self.agent = self.spec = self.model = self.provider_name = None
        self.request, self.called_at = {}, None

    # -- the spans
    def begin(self, conn, agent, turn, resumed, model):
        self.agent = agent
        self.spec = turn["model"] or agent["model"] or ""
        self.provider_name, _, self.model = self.spec.partition(":")
        self.model = self.model or self.provider_name
        self.request = {REQUEST[k]: [v] if k == "stop" else v
                        for k, v in model.model_options.items() if k in REQUEST}
        name = agent["name"]
        attributes = {"gen_ai.operation.name": "invoke_agent",
                      "gen_ai.provider.name": self.provider_name,
                      "gen_ai.agent.id": agent["id"],
                      "gen_ai.conversation.id": agent["id"],
                      "gen_ai.request.model": self.model, **self.request,
                      "agentctl.agent.role": agent["role"],
                      "agentctl.turn.id": turn["id"],
                      "agentctl.turn.resumed": bool(resumed)}
        if name:
            attributes["gen_ai.agent.name"] = name
        # A trace of its own (no parent), linked to what caused it
        cause = self.telemetry.cause(agent["trace"])
        self.turn_span = self.telemetry.span(
            f"invoke_agent {name}" if name else "invoke_agent", "internal", attributes,
            links=[cause] if cause else [])
        if self.traced:     # what its next turn links to
            with lease.holding(conn, agent["id"]):
                registry.update(conn, agent["id"],
                                trace=self.turn_span.context.traceparent())

    def calling(self, messages, tools):
        if self.turn_span is None:
            return
        self.called_at = time.monotonic()
        attributes = {"gen_ai.operation.name": "chat",
                      "gen_ai.provider.name": self.provider_name,
                      "gen_ai.request.model": self.model, **self.request,
                      "gen_ai.conversation.id": self.agent["id"]}
        if self.capture:
            system = [{"type": "text", "content": m.get("content") or ""}
                      for m in messages if m.get("role") == "system"]
            if system:
                attributes["gen_ai.system_instructions"] = _json(system)
            attributes["gen_ai.input.messages"] = _json(
                [_message(m) for m in messages if m.get("role") != "system"])
        self.chat_span = self.telemetry.span(f"chat {self.model}", "client", attributes,
                                             parent=self.turn_span)

    def called(self, reply=None, error=None):
        span, self.chat_span = self.chat_span, None
        if span is None:
            return
        server = _server(reply.api_url) if reply is not None else {}
        if reply is not None:
            usage = reply.usage
            span.set_attributes({
                "gen_ai.response.finish_reasons": [FINISH.get(reply.stop_reason,
                                                              reply.stop_reason)],
                "gen_ai.usage.input_tokens": usage.get("input_tokens", 0),
                "gen_ai.usage.output_tokens": usage.get("output_tokens", 0),
                "gen_ai.usage.cache_read.input_tokens": usage.get("cache_read_tokens", 0),
                "gen_ai.usage.cache_creation.input_tokens": usage.get("cache_write_tokens", 0),
                **_response(reply), **server})
            if usage.get("estimated"):
                span.set_attribute("agentctl.usage.estimated", True)
            if self.capture:
                span.set_attribute("gen_ai.output.messages", _json([_output(reply)]))
        else:
            self._failed(span, error)
        span.end()
        self._measure(reply, error, server)

    def _measure(self, reply, error, server):
        """The call's duration, tokens and cost, as the conventions' client metrics and
        agentctl.cost."""
        attributes = {"gen_ai.operation.name": "chat",
                      "gen_ai.provider.name": self.provider_name,
                      "gen_ai.request.model": self.model, **server}
        if reply is not None and reply.response_model:
            attributes["gen_ai.response.model"] = reply.response_model
        elif reply is None:
            attributes["error.type"] = _kind(error)
        record = self.telemetry.record
        record("gen_ai.client.operation.duration", time.monotonic() - self.called_at,
               attributes)
        if reply is None or "metrics" not in self.telemetry.chosen:
            return
        usage = reply.usage
        if not usage.get("estimated"):  # the conventions: no counts, no metric
            for kind, key in TOKENS:
                count = usage.get(key, 0)
                if count or kind in ("input", "output"):
                    record("gen_ai.client.token.usage", count,
                           {**attributes, "gen_ai.token.type": kind})
        cost = prices.cost(self.spec, reply.api_url, usage)
        if cost is not None:
            record("agentctl.cost", money.dollars(cost), {
                "gen_ai.provider.name": self.provider_name, "gen_ai.request.model": self.model})

    def tool(self, call):
        if self.turn_span is None:
            return
        attributes = {"gen_ai.operation.name": "execute_tool",
                      "gen_ai.tool.name": call["tool_name"],
                      "gen_ai.tool.call.id": call["tool_call_id"],
                      "gen_ai.tool.type": "function"}
        if self.capture:
            attributes["gen_ai.tool.call.arguments"] = call["content"] or ""
        self.tool_span = self.telemetry.span(f"execute_tool {call['tool_name']}", "internal",
                                             attributes, parent=self.turn_span)

    def tool_done(self, call, text=None, error=None):
        span, self.tool_span = self.tool_span, None
        if span is None:
            return
        if error is not None:
            if isinstance(error, Paused):
                span.set_attribute("agentctl.tool.outcome", "paused")
            elif isinstance(error, TaskWaits):
                span.set_attribute("agentctl.tool.outcome", "task")
            else:
                self._failed(span, error)
        elif text is not None and voice.is_error(text):
            span.set_attribute("agentctl.tool.outcome", "error")
            span.set_attribute("error.type", "tool_error")
            span.fail(first_line(keys.redact(text), 200))
        else:
            span.set_attribute("agentctl.tool.outcome", "ok")
            if self.capture and text is not None:
                span.set_attribute("gen_ai.tool.call.result", keys.redact(text))
        span.end()

    def end(self, outcome=None, error=None):
        try:
            for open_span in (self.chat_span, self.tool_span):
                if open_span is not None:
                    open_span.end()
            span = self.turn_span
            if span is not None:
                if outcome is not None:
                    span.set_attributes({
                        "agentctl.turn.status": outcome.status,
                        "gen_ai.usage.input_tokens": outcome.input_tokens,
                        "gen_ai.usage.output_tokens": outcome.output_tokens,
                        "gen_ai.usage.cache_read.input_tokens": outcome.cached,
                        "gen_ai.usage.cache_creation.input_tokens": outcome.written,
                        "agentctl.turn.steps": outcome.steps})
                    if outcome.cost is not None:
                        span.set_attribute("agentctl.turn.cost_usd", money.dollars(outcome.cost))
                    if outcome.status == "killed":
                        span.set_attribute("error.type", "killed")
                        span.fail("killed by KILL")
                else:
                    self._failed(span, error)
                span.end()
        finally:
            self.close()

    def close(self):
        """Export what is left, at once: agent-run is about to exit."""
        self.turn_span = self.chat_span = self.tool_span = None
        self.telemetry.export()

    # -- helpers
    def traceparent(self):
        span = self.tool_span or self.turn_span
        return span.context.traceparent() if span is not None and self.traced else None

    def _failed(self, span, error):
        kind = _kind(error)
        span.set_attribute("error.type", kind)
        span.fail(first_line(keys.redact(str(error)), 200) or kind)


def _kind(error):
    """An error's error.type: killed (a KILL ended it), else its class's name."""
    return "killed" if isinstance(error, (lease.KillPending, lease.KilledMidTurn)) \
        else type(error).__name__


def _response(reply):
    """gen_ai.response.id and gen_ai.response.model, those the API gave."""
    named = {"gen_ai.response.id": reply.response_id,
             "gen_ai.response.model": reply.response_model}
    return {k: v for k, v in named.items() if v}


def _json(value):
    return json.dumps(value, ensure_ascii=False)


def _text(content):
    return content if isinstance(content, str) else _json(content)


def _message(m):
    """A message of the request in the conventions' form (gen_ai.input.messages)."""
    role = m.get("role")
    if role == "tool":
        return {"role": "tool", "parts": [{"type": "tool_call_response",
                                            "id": m.get("tool_call_id"),
                                            "response": _text(m.get("content") or "")}]}
    parts = [{"type": "text", "content": _text(m["content"])}] if m.get("content") else []
    for call in m.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append({"type": "tool_call", "id": call.get("id"), "name": function.get("name"),
                      "arguments": function.get("arguments")})
    return {"role": role, "parts": parts}


def _output(reply):
    parts = [{"type": "text", "content": keys.redact(reply.text)}] if reply.text else []
    parts += [{"type": "tool_call", "id": c.id, "name": c.name,
               "arguments": keys.redact(c.arguments)} for c in reply.tool_calls]
    return {"role": "assistant", "parts": parts,
            "finish_reason": FINISH.get(reply.stop_reason, reply.stop_reason)}


def _server(url):
    """server.address and server.port of the API that answered (none offline)."""
    if not url:
        return {}
    from urllib.parse import urlsplit  # (start-up: 1.5 ms, only when tracing a call to an API)
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return {}
    return {"server.address": parts.hostname or "", "server.port": port}
