"""An OTLP/HTTP trace receiver on 127.0.0.1, for the tracing tests: it takes what an
OpenTelemetry exporter posts to /v1/traces (a protobuf ExportTraceServiceRequest,
gzip'd or not), decodes it with the opentelemetry-proto package and keeps each span
as a plain dict:

    {"name", "trace", "span", "parent" (hex, "" for a root), "kind" (INTERNAL, CLIENT ...),
     "attributes" {key: value}, "status" (UNSET, OK, ERROR), "message", "resource" {...},
     "start", "end" (ns)}

Test modules import the fixture: `from tests.otlp import otlp`. It points the standard
variables at the receiver (OTEL_EXPORTER_OTLP_ENDPOINT).
"""

import gzip
import threading
from http.server import ThreadingHTTPServer

import pytest

from . import localhttp

PATH = "/v1/traces"


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


class Receiver(localhttp.LocalServer):
    def __init__(self):
        self.spans, self.requests, self.errors = [], 0, []
        self.lock = threading.Lock()
        # (no daemon threads: close() waits for the spans being posted)
        super().__init__(Handler, ThreadingHTTPServer)

    def take(self, body):
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest)
        from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    spans.append({
                        "name": s.name, "trace": s.trace_id.hex(), "span": s.span_id.hex(),
                        "parent": s.parent_span_id.hex(),
                        "kind": Span.SpanKind.Name(s.kind).removeprefix("SPAN_KIND_"),
                        "attributes": attributes(s.attributes),
                        "status": Status.StatusCode.Name(s.status.code).removeprefix(
                            "STATUS_CODE_"),
                        "message": s.status.message, "resource": resource,
                        "scope": scope_spans.scope.name,
                        "start": s.start_time_unix_nano, "end": s.end_time_unix_nano})
        with self.lock:
            self.requests += 1
            self.spans.extend(spans)

    def named(self, prefix):
        """The spans whose name starts with `prefix`, in the order they started."""
        with self.lock:
            return sorted((s for s in self.spans if s["name"].startswith(prefix)),
                          key=lambda s: s["start"])


class Handler(localhttp.Handler):
    def cut_short(self, receiver):
        receiver.errors.append("a request whose body was cut short")

    def post(self, receiver, body):
        try:
            if self.path != PATH:
                raise ValueError(f"posted to {self.path}, not {PATH}")
            if self.headers.get("Content-Type") != "application/x-protobuf":
                raise ValueError(f"content type {self.headers.get('Content-Type')}")
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            receiver.take(body)
        except Exception as e:     # kept: the fixture fails the test with it
            receiver.errors.append(repr(e))
            return self.answer(400)
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceResponse)
        self.answer(200, ExportTraceServiceResponse().SerializeToString(),
                    "application/x-protobuf")


@pytest.fixture
def otlp(monkeypatch):
    """A running receiver, with the standard variables pointing OTLP/HTTP at it."""
    receiver = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    yield receiver
    receiver.close()
    assert not receiver.errors, f"the receiver refused what it was sent: {receiver.errors}"
