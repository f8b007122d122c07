"""OpenTelemetry's spans and metrics as one run of agent-run makes them (agent-run(1),
TRACING): the parts of the data model a turn uses (spans with links and a status;
histograms with explicit buckets, and sums), the W3C trace context, the standard
samplers and resource variables; all sent when the run ends, over OTLP/HTTP
(turn/otlp.py) or as JSON on standard error (console).

Not the OpenTelemetry SDK: importing it (its metrics part above all) would cost an
offline turn half as much again, and an API's a third more, where a run's exporting is
to cost at most a fifth (bench/otel.py). tests/test_otlp.py holds what this makes, as
OTLP, to what the SDK makes of the same spans and measurements.
"""

import bisect
import json
import os
import random
import re
import sys
import time
from urllib.parse import unquote

from agentctl import __version__

# OTLP's numbers for a span's kind and a status's code
KINDS = {"internal": 1, "client": 3}
UNSET, ERROR = 0, 2
DELTA, CUMULATIVE = 1, 2
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# The conventions' bucket boundaries (gen-ai-metrics.md): tokens, and seconds.
TOKEN_BUCKETS = tuple(4 ** i for i in range(14))
DURATION_BUCKETS = tuple(round(0.01 * 2 ** i, 2) for i in range(14))
# What a run measures: name -> (histogram's boundaries or None for a sum, unit,
# description)
INSTRUMENTS = {
    "gen_ai.client.token.usage": (TOKEN_BUCKETS, "{token}",
                                  "Number of input and output tokens used."),
    "gen_ai.client.operation.duration": (DURATION_BUCKETS, "s", "GenAI operation duration."),
    "agentctl.cost": (None, "USD", "What the model calls cost, in US dollars (priced calls "
                                   "only)."),
}
TEMPORALITY = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"


class Context:
    """A span's place in a trace: its trace and span ids, whether it is sampled, and
    whether it came from elsewhere (a traceparent read)."""

    def __init__(self, trace_id, span_id, sampled, remote=False):
        self.trace_id, self.span_id, self.sampled, self.remote = \
            trace_id, span_id, sampled, remote

    @classmethod
    def parse(cls, traceparent):
        """The context of a W3C traceparent, or None for one that is none."""
        found = TRACEPARENT.fullmatch((traceparent or "").strip().lower())
        if not found or not int(found[1], 16) or not int(found[2], 16):
            return None
        return cls(int(found[1], 16), int(found[2], 16), bool(int(found[3], 16) & 1), True)

    def traceparent(self):
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{'01' if self.sampled else '00'}"


class Span:
    """A span of the run: kept when it ends, if it is sampled."""

    def __init__(self, telemetry, name, kind, context, parent, attributes, links):
        self.telemetry, self.name, self.kind = telemetry, name, kind
        self.context, self.parent, self.links = context, parent, links
        self.attributes = dict(attributes)
        self.start, self.end_time = time.time_ns(), None
        self.status = (UNSET, "")

    def set_attribute(self, key, value):
        self.attributes[key] = value

    def set_attributes(self, attributes):
        self.attributes.update(attributes)

    def fail(self, description):
        self.status = (ERROR, description)

    def end(self):
        if self.end_time is None:
            self.end_time = time.time_ns()
            if self.context.sampled:
                self.telemetry.spans.append(self)


class Telemetry:
    """The spans and measurements of one run, and their export (export(): once, when
    the run ends). `chosen`: {signal: exporter names}, as turn/tracing.py reads them."""

    def __init__(self, chosen, warn):
        self.chosen, self.warn = chosen, warn
        self.resource = resource()
        self.scope = ("agentctl", __version__)
        self.started = time.time_ns()
        self.spans, self.measured = [], {}

    def span(self, name, kind, attributes, parent=None, links=()):
        """A span of `kind` (internal, client), under `parent` (a Span) or the root of
        a new trace, linked to the Contexts `links`."""
        if parent is not None:
            trace_id, sampled = parent.context.trace_id, parent.context.sampled
        else:
            trace_id = random.getrandbits(128) or 1
            sampled = "traces" in self.chosen and root_sampled(trace_id)
        context = Context(trace_id, random.getrandbits(64) or 1, sampled)
        return Span(self, name, KINDS[kind], context, parent and parent.context, attributes,
                    links)

    @staticmethod
    def cause(traceparent):
        """The Context of a W3C traceparent (what caused a turn), or None."""
        return Context.parse(traceparent)

    def record(self, name, value, attributes):
        """A measurement of instrument `name` (INSTRUMENTS), aggregated for its
        attributes: a histogram's count, sum, least, most and buckets, or a sum."""
        if "metrics" not in self.chosen:
            return
        bounds = INSTRUMENTS[name][0]
        # (a value's type too: true and 1 are two attribute values, as 1 and 1.0 are)
        key = (name, frozenset((k, type(v), v) for k, v in attributes.items()))
        if bounds is None:
            kept = self.measured.setdefault(key, [dict(attributes), 0])
            kept[1] += value
            return
        kept = self.measured.setdefault(key, [dict(attributes),
                                              [0, 0, value, value, [0] * (len(bounds) + 1)]])
        point = kept[1]
        point[0] += 1
        point[1] += value
        point[2], point[3] = min(point[2], value), max(point[3], value)
        point[4][bisect.bisect_left(bounds, value)] += 1

    def metrics(self):
        """The measurements as the metrics OTLP sends: [(name, unit, description,
        bounds or None, temporality, [(attributes, start, time, value or (count, sum,
        least, most, bucket counts))])], in the order of INSTRUMENTS."""
        now = time.time_ns()
        temporality = CUMULATIVE if os.environ.get(TEMPORALITY, "").strip().lower() == \
            "cumulative" else DELTA
        made = []
        for name, (bounds, unit, description) in INSTRUMENTS.items():
            points = [(attributes, self.started, now, value)
                      for (measured, _), (attributes, value) in self.measured.items()
                      if measured == name]
            if points:
                made.append((name, unit, description, bounds, temporality, points))
        return made

    def export(self):
        """Send what the run holds, at once: agent-run is about to exit. A failure is
        said in one line (one for both signals when a collector is out of reach)."""
        failures = {}
        metrics = self.metrics()
        for signal, held in (("traces", self.spans), ("metrics", metrics)):
            for name in self.chosen.get(signal, ()):
                if held and name == "console":
                    _console(signal, held, self.resource)
                elif held:
                    from agentctl.turn import otlp  # (start-up: 4 ms, only to export over OTLP)
                    encoded = otlp.spans(self.resource, self.scope, held) \
                        if signal == "traces" else otlp.metrics(self.resource, self.scope, held)
                    failure = otlp.post(signal, encoded)
                    if failure:
                        failures.setdefault(failure, []).append(signal)
        self.spans, self.measured = [], {}
        for (where, why), signals in failures.items():
            self.warn(f"tracing: {' and '.join(signals)} not exported: "
                      f"{f'{where}: {why}' if where else why}")


def root_sampled(trace_id, environ=None):
    """Whether a trace begun here is sampled: OTEL_TRACES_SAMPLER (always_on,
    always_off, traceidratio, or their parentbased_ forms, the same for a root; by
    default parentbased_always_on) and OTEL_TRACES_SAMPLER_ARG (the ratio), as the
    specification has them."""
    environ = os.environ if environ is None else environ
    name = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower().removeprefix("parentbased_")
    if name == "always_off":
        return False
    if name == "traceidratio":
        try:
            ratio = min(max(float(environ.get("OTEL_TRACES_SAMPLER_ARG", "1")), 0.0), 1.0)
        except ValueError:
            ratio = 1.0
        return trace_id & (2 ** 64 - 1) < round(ratio * 2 ** 64)
    return True


def resource(environ=None):
    """The resource's attributes: OTEL_RESOURCE_ATTRIBUTES (KEY=VALUE,..., each value
    percent-decoded), then OTEL_SERVICE_NAME, else the service agentctl; its version,
    and the telemetry's maker."""
    environ = os.environ if environ is None else environ
    attributes = {"telemetry.sdk.name": "agentctl", "telemetry.sdk.language": "python",
                  "telemetry.sdk.version": __version__, "service.name": "agentctl",
                  "service.version": __version__}
    for pair in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, equals, value = pair.partition("=")
        if equals and key.strip():
            attributes[key.strip()] = unquote(value.strip())
    if environ.get("OTEL_SERVICE_NAME", "").strip():
        attributes["service.name"] = environ["OTEL_SERVICE_NAME"].strip()
    return attributes


def _console(signal, held, attributes):
    """Each span, or each metric's point, as a line of JSON on standard error (standard
    output is the turn's): for a reader, not a format to parse."""
    lines = []
    if signal == "traces":
        for s in held:
            lines.append({"name": s.name, "trace_id": f"{s.context.trace_id:032x}",
                          "span_id": f"{s.context.span_id:016x}",
                          "parent_id": f"{s.parent.span_id:016x}" if s.parent else None,
                          "kind": {v: k.upper() for k, v in KINDS.items()}[s.kind],
                          "start": s.start, "end": s.end_time,
                          "status": {UNSET: "UNSET", ERROR: "ERROR"}[s.status[0]],
                          "message": s.status[1] or None, "attributes": s.attributes,
                          "links": [c.traceparent() for c in s.links],
                          "resource": attributes})
    else:
        for name, unit, _, bounds, _, points in held:
            for point_attributes, _, _, value in points:
                shown = value if bounds is None else dict(zip(
                    ("count", "sum", "min", "max", "bucket_counts"), value), bounds=bounds)
                lines.append({"metric": name, "unit": unit, "attributes": point_attributes,
                              "value": shown})
    sys.stderr.write("".join(json.dumps(line, ensure_ascii=False, default=list) + "\n"
                             for line in lines))
    sys.stderr.flush()
