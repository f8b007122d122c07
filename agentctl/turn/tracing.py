"""OpenTelemetry traces of a turn (agent-run(1), TRACING), in the GenAI semantic
conventions: an invoke_agent span for the run of a turn, a chat span for each model
call, an execute_tool span for each tool call.

Only when the standard variables name an exporter (wanted()), and only then is
OpenTelemetry imported (the optional extra otel: the SDK and the OTLP/HTTP
protobuf exporter); without them agent-run's start-up is unchanged.

One tree for a tree of agents: an agent's turns continue the trace context its row
holds (agents.trace): the span of the fork tool call that made it, else its parent's
(ops.lifecycle.fork), else, for an agent the operator forked, the first traced
turn's own span, stored then. So a worker's turns sit under the lead's fork call,
and the lead's later turns under its first.

No message text is exported unless the operator opts in with the conventions' own
variable, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.
"""

import json
import os
import sys

from agentctl import __version__, keys, voice
from agentctl.ops import lease
from agentctl.store import registry
from agentctl.text import first_line
from agentctl.turn.toolset import Paused
from agentctl.turn.watch import Watcher

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
EXPORTERS = ("otlp", "console")
# The conventions' finish reasons (gen_ai.response.finish_reasons) for agentctl's
FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_call"}


def wanted(environ=None):
    """The exporters the standard variables name (OTEL_TRACES_EXPORTER, else an OTLP
    endpoint: otlp), or () when they name none; read without importing OpenTelemetry."""
    environ = os.environ if environ is None else environ
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ()
    named = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",")
             if n.strip()]
    if named:
        return tuple(n for n in named if n != "none")
    if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or \
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
    (`warn` says why, in one line: the run goes on without traces)."""
    names = wanted()
    if not names:
        return None
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        warn(f"tracing: OTEL_TRACES_EXPORTER={','.join(unknown)}: not supported "
             f"(otlp, console or none): no traces")
        return None
    if "otlp" in names:
        protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                    or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
        if protocol.strip() != "http/protobuf":
            warn(f"tracing: OTLP protocol {protocol}: only http/protobuf is supported: "
                 "no traces")
            return None
    try:
        return Tracer(names, warn)
    except ImportError:
        warn("tracing: the OpenTelemetry SDK is not installed (from agentctl's checkout, "
             "make install EXTRAS=otel, or pip install '.[otel]'): no traces")
        return None


class Tracer(Watcher):
    """The spans of one run of a turn, exported when it ends (end(): flushed before
    agent-run exits, whatever it exits with)."""

    def __init__(self, names, warn):
        from opentelemetry import trace  # (an optional extra: otel)
        from opentelemetry.sdk.resources import Resource  # (an optional extra: otel)
        from opentelemetry.sdk.trace import TracerProvider  # (an optional extra: otel)
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # (an optional extra: otel)
        from opentelemetry.trace.propagation.tracecontext import (  # (an optional extra: otel)
            TraceContextTextMapPropagator)
        self.trace, self.propagator = trace, TraceContextTextMapPropagator()
        attributes = {"service.version": __version__}
        if not (os.environ.get("OTEL_SERVICE_NAME")
                or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")):
            attributes["service.name"] = "agentctl"
        self.provider = TracerProvider(resource=Resource.create(attributes))
        for name in names:
            self.provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
        self.tracer = self.provider.get_tracer("agentctl", __version__)
        # The SDK's complaints (a collector out of reach) as agent-run's one-line warnings
        self.logger, self.handler = _warnings(warn)
        self.propagated, self.logger.propagate = self.logger.propagate, False
        self.capture = capture()
        self.turn_span = self.chat_span = self.tool_span = None
        self.context = None
        self.agent = self.model = self.provider_name = None

    # -- the spans
    def begin(self, conn, agent, turn, resumed):
        self.agent = agent
        spec = turn["model"] or agent["model"] or ""
        self.provider_name, _, self.model = spec.partition(":")
        self.model = self.model or self.provider_name
        parent = None
        if agent["trace"]:
            parent = self.propagator.extract({"traceparent": agent["trace"]})
        name = agent["name"]
        attributes = {"gen_ai.operation.name": "invoke_agent",
                      "gen_ai.provider.name": self.provider_name,
                      "gen_ai.agent.id": agent["id"],
                      "gen_ai.conversation.id": agent["id"],
                      "gen_ai.request.model": self.model,
                      "agentctl.agent.role": agent["role"],
                      "agentctl.turn.id": turn["id"],
                      "agentctl.turn.resumed": bool(resumed)}
        if name:
            attributes["gen_ai.agent.name"] = name
        self.turn_span = self.tracer.start_span(
            f"invoke_agent {name}" if name else "invoke_agent", context=parent,
            kind=self.trace.SpanKind.INTERNAL, attributes=attributes)
        self.context = self.trace.set_span_in_context(self.turn_span)
        if not agent["trace"]:
            # An agent with no trace to continue starts one: its later turns, and the
            # agents it forks, continue this one.
            with lease.holding(conn, agent["id"]):
                registry.update(conn, agent["id"], trace=self._traceparent(self.turn_span))

    def calling(self, messages, tools):
        if self.turn_span is None:
            return
        attributes = {"gen_ai.operation.name": "chat",
                      "gen_ai.provider.name": self.provider_name,
                      "gen_ai.request.model": self.model,
                      "gen_ai.conversation.id": self.agent["id"]}
        if self.capture:
            system = [{"type": "text", "content": m.get("content") or ""}
                      for m in messages if m.get("role") == "system"]
            if system:
                attributes["gen_ai.system_instructions"] = _json(system)
            attributes["gen_ai.input.messages"] = _json(
                [_message(m) for m in messages if m.get("role") != "system"])
        self.chat_span = self.tracer.start_span(
            f"chat {self.model}", context=self.context, kind=self.trace.SpanKind.CLIENT,
            attributes=attributes)

    def called(self, reply=None, error=None):
        span, self.chat_span = self.chat_span, None
        if span is None:
            return
        if reply is not None:
            usage = reply.usage
            span.set_attributes({
                "gen_ai.response.finish_reasons": [FINISH.get(reply.stop_reason,
                                                              reply.stop_reason)],
                "gen_ai.usage.input_tokens": usage.get("input_tokens", 0),
                "gen_ai.usage.output_tokens": usage.get("output_tokens", 0),
                "gen_ai.usage.cache_read.input_tokens": usage.get("cache_read_tokens", 0),
                "gen_ai.usage.cache_creation.input_tokens": usage.get("cache_write_tokens", 0)})
            if usage.get("estimated"):
                span.set_attribute("agentctl.usage.estimated", True)
            span.set_attributes(_server(reply.api_url))
            if self.capture:
                span.set_attribute("gen_ai.output.messages", _json([_output(reply)]))
        else:
            self._failed(span, error)
        span.end()

    def tool(self, call):
        if self.turn_span is None:
            return
        attributes = {"gen_ai.operation.name": "execute_tool",
                      "gen_ai.tool.name": call["tool_name"],
                      "gen_ai.tool.call.id": call["tool_call_id"],
                      "gen_ai.tool.type": "function"}
        if self.capture:
            attributes["gen_ai.tool.call.arguments"] = call["content"] or ""
        self.tool_span = self.tracer.start_span(
            f"execute_tool {call['tool_name']}", context=self.context,
            kind=self.trace.SpanKind.INTERNAL, attributes=attributes)

    def tool_done(self, call, text=None, error=None):
        span, self.tool_span = self.tool_span, None
        if span is None:
            return
        if error is not None:
            if isinstance(error, Paused):
                span.set_attribute("agentctl.tool.outcome", "paused")
            else:
                self._failed(span, error)
        elif text is not None and voice.is_error(text):
            span.set_attribute("agentctl.tool.outcome", "error")
            span.set_attribute("error.type", "tool_error")
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR,
                                              first_line(keys.redact(text), 200)))
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
                        span.set_attribute("agentctl.turn.cost_usd", outcome.cost / 1e6)
                    if outcome.status == "killed":
                        span.set_attribute("error.type", "killed")
                        span.set_status(self.trace.Status(self.trace.StatusCode.ERROR,
                                                          "killed by KILL"))
                else:
                    self._failed(span, error)
                span.end()
        finally:
            self.close()

    def close(self):
        """Export what is left, at once: agent-run is about to exit."""
        self.turn_span = self.chat_span = self.tool_span = None
        try:
            self.provider.shutdown()
        finally:
            self.logger.removeHandler(self.handler)
            self.logger.propagate = self.propagated

    # -- helpers
    def traceparent(self):
        span = self.tool_span or self.turn_span
        return self._traceparent(span) if span is not None else None

    def _traceparent(self, span):
        carrier = {}
        self.propagator.inject(carrier, context=self.trace.set_span_in_context(span))
        return carrier.get("traceparent")

    def _failed(self, span, error):
        kind = "killed" if isinstance(error, (lease.KillPending, lease.KilledMidTurn)) \
            else type(error).__name__
        said = first_line(keys.redact(str(error)), 200)
        span.set_attribute("error.type", kind)
        span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, said or kind))


def _exporter(name):
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter  # (an optional extra: otel)
        return ConsoleSpanExporter(out=sys.stderr)     # stdout is the turn's
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # (an optional extra: otel)
        OTLPSpanExporter)
    return OTLPSpanExporter()       # its endpoint, headers, timeout: the standard variables


def _warnings(warn):
    """The SDK's logger, given a handler that says each of its errors in one line (its
    retries, which it logs as warnings, it does not: a collector out of reach is one
    line); the logger and the handler."""
    import logging  # (start-up: 2.4 ms, only when tracing)

    class Errors(logging.Handler):
        def emit(self, record):
            said = keys.redact(record.getMessage()).strip().splitlines()
            warn(f"tracing: {said[0] if said else record.levelname}")
    logger, handler = logging.getLogger("opentelemetry"), Errors(logging.ERROR)
    logger.addHandler(handler)
    return logger, handler


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
                                            "result": _text(m.get("content") or "")}]}
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
