"""An OTLP/HTTP receiver on 127.0.0.1, for the tracing tests: it takes what an
OpenTelemetry exporter posts to /v1/traces and /v1/metrics (a protobuf
ExportTraceServiceRequest or ExportMetricsServiceRequest, gzip'd or not), decodes it
with the opentelemetry-proto package and keeps each span and each data point of a
metric as a plain dict:

    spans: {"name", "trace", "span", "parent" (hex, "" for a root), "kind" (INTERNAL,
     CLIENT ...), "attributes" {key: value}, "status" (UNSET, OK, ERROR), "message",
     "resource" {...}, "start", "end" (ns), "links" [{"trace", "span", "attributes"}]}
    points: {"metric", "unit", "type" (histogram, sum, gauge), "temporality" (DELTA,
     CUMULATIVE), "attributes" {key: value}, "resource" {...}, and "value" (a sum's or a
     gauge's) or "count", "sum", "bounds" and "counts" (a histogram's)}

Test modules import the fixture: `from tests.otlp import otlp`. It points the standard
variables at the receiver (OTEL_EXPORTER_OTLP_ENDPOINT).
"""

import gzip
import threading
from http.server import ThreadingHTTPServer

import pytest

from . import localhttp

PATHS = ("/v1/traces", "/v1/metrics")


def value(any_value):
    """An AnyValue as Python: a string, bool, int, float, bytes or a list of them."""
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in any_value.kvlist_value.values}
    return getattr(any_value, kind)


def attributes(pairs):
    return {kv.key: value(kv.value) for kv in pairs}


def scoped(resources, scopes, items):
    """(its resource's attributes, its scope, the item) for each item (span, metric) of
    a request's resources (resource_spans, resource_metrics)."""
    for held in resources:
        resource = attributes(held.resource.attributes)
        for scope in getattr(held, scopes):
            for item in getattr(scope, items):
                yield resource, scope.scope, item


class Receiver(localhttp.LocalServer):
    def __init__(self):
        self.spans, self.requests, self.errors = [], 0, []
        self.points, self.metric_requests = [], 0
        self.refuse = []        # the statuses the next requests are answered with, one each
        self.headers = []       # each request's headers, their names in lower case
        self.lock = threading.Lock()
        # (no daemon threads: close() waits for the spans being posted)
        super().__init__(Handler, ThreadingHTTPServer)

    def take(self, body):
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest)
        from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
        request = ExportTraceServiceRequest.FromString(body)
        spans = [{"name": s.name, "trace": s.trace_id.hex(), "span": s.span_id.hex(),
                  "parent": s.parent_span_id.hex(),
                  "kind": Span.SpanKind.Name(s.kind).removeprefix("SPAN_KIND_"),
                  "attributes": attributes(s.attributes),
                  "status": Status.StatusCode.Name(s.status.code).removeprefix("STATUS_CODE_"),
                  "message": s.status.message, "resource": resource, "scope": scope.name,
                  "start": s.start_time_unix_nano, "end": s.end_time_unix_nano,
                  "links": [{"trace": link.trace_id.hex(), "span": link.span_id.hex(),
                             "attributes": attributes(link.attributes)} for link in s.links]}
                 for resource, scope, s in scoped(request.resource_spans, "scope_spans",
                                                  "spans")]
        with self.lock:
            self.requests += 1
            self.spans.extend(spans)

    def take_metrics(self, body):
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest)
        from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality
        request = ExportMetricsServiceRequest.FromString(body)
        points = []
        for resource, _, m in scoped(request.resource_metrics, "scope_metrics", "metrics"):
            kind = m.WhichOneof("data")
            data = getattr(m, kind)
            temporality = AggregationTemporality.Name(getattr(data, "aggregation_temporality", 0))
            for p in data.data_points:
                point = {"metric": m.name, "unit": m.unit, "type": kind,
                         "temporality": temporality.removeprefix("AGGREGATION_TEMPORALITY_"),
                         "attributes": attributes(p.attributes), "resource": resource}
                if kind == "histogram":
                    point.update(count=p.count, sum=p.sum, bounds=list(p.explicit_bounds),
                                 counts=list(p.bucket_counts))
                else:
                    point["value"] = getattr(p, p.WhichOneof("value"))
                points.append(point)
        with self.lock:
            self.metric_requests += 1
            self.points.extend(points)

    def measured(self, metric, wanted=()):
        """The points of `metric` whose attributes hold those of `wanted` (a dict)."""
        wanted = dict(wanted)
        with self.lock:
            return [p for p in self.points if p["metric"] == metric and
                    all(p["attributes"].get(k) == v for k, v in wanted.items())]

    def named(self, prefix):
        """The spans whose name starts with `prefix`, in the order they started."""
        with self.lock:
            return sorted((s for s in self.spans if s["name"].startswith(prefix)),
                          key=lambda s: s["start"])


class Handler(localhttp.Handler):
    def cut_short(self, receiver):
        receiver.errors.append("a request whose body was cut short")

    def post(self, receiver, body):
        with receiver.lock:
            receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
            refused = receiver.refuse.pop(0) if receiver.refuse else None
        if refused:
            return self.answer(refused)
        try:
            if self.path not in PATHS:
                raise ValueError(f"posted to {self.path}, not one of {PATHS}")
            if self.headers.get("Content-Type") != "application/x-protobuf":
                raise ValueError(f"content type {self.headers.get('Content-Type')}")
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            (receiver.take if self.path == PATHS[0] else receiver.take_metrics)(body)
        except Exception as e:     # kept: the fixture fails the test with it
            receiver.errors.append(repr(e))
            return self.answer(400)
        # An empty response: ExportTraceServiceResponse's and ExportMetricsServiceResponse's
        self.answer(200, b"", "application/x-protobuf")


@pytest.fixture
def otlp(monkeypatch):
    """A running receiver, with the standard variables pointing OTLP/HTTP at it."""
    receiver = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    yield receiver
    receiver.close()
    assert not receiver.errors, f"the receiver refused what it was sent: {receiver.errors}"
