"""OpenTelemetry as agent-run makes and sends it without the SDK (agentctl/turn/
telemetry.py, agentctl/turn/otlp.py): what it makes of spans and measurements is,
message for message, what the official SDK and its protobuf encoder make of the same
(any attributes); the standard variables read as the specification has them; a
transient refusal tried again, over a socket of its own or through urllib."""

import pytest
from hypothesis import given, settings, strategies as st

from agentctl import __version__
from agentctl.turn import otlp as wire, telemetry as model

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
common = pytest.importorskip("opentelemetry.exporter.otlp.proto.common.trace_encoder")
from opentelemetry import trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics  # noqa: E402
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (  # noqa: E402
    ExportMetricsServiceRequest)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest)
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import (  # noqa: E402
    AggregationTemporality, InMemoryMetricReader)
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter)
from opentelemetry.sdk.trace.id_generator import IdGenerator  # noqa: E402

from .otlp import otlp  # noqa: E402,F401 (a fixture)

INT64 = st.integers(-2 ** 63, 2 ** 63 - 1)
SCALARS = st.one_of(st.text(max_size=20), st.booleans(), INT64,
                    st.floats(allow_nan=False), st.binary(max_size=8))
VALUES = st.one_of(SCALARS, *(st.lists(s, max_size=4) for s in (
    st.text(max_size=8), st.booleans(), INT64, st.floats(allow_nan=False))))
ATTRIBUTES = st.dictionaries(st.text(min_size=1, max_size=12), VALUES, max_size=5)
CAUSE = "00-5b8aa5a2d2c872e8321cf37308d69df2-051581bf3cb55c13-01"


class Given(IdGenerator):
    """The SDK's ids: those agentctl's spans drew."""

    def __init__(self, root, *others):
        self.traces = [root.context.trace_id]
        self.spans = [s.context.span_id for s in (root, *others)]

    def generate_trace_id(self):
        return self.traces.pop(0)

    def generate_span_id(self):
        return self.spans.pop(0)


def ours_and_the_sdks_spans(attributes, child_attributes, failed):
    made = model.Telemetry({"traces": ("otlp",)}, print)
    root = made.span("invoke_agent a", "internal", attributes,
                     links=[made.cause(CAUSE)])
    child = made.span("chat m", "client", child_attributes, parent=root)
    if failed:
        child.fail(failed)
    child.end()
    root.end()
    sdk = sdk_trace.TracerProvider(resource=Resource(made.resource), shutdown_on_exit=False,
                                   id_generator=Given(root, child))
    exporter = InMemorySpanExporter()
    sdk.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = sdk.get_tracer(*made.scope)
    cause = made.cause(CAUSE)
    their_root = tracer.start_span(
        "invoke_agent a", kind=trace.SpanKind.INTERNAL, attributes=attributes,
        start_time=root.start, context=trace.set_span_in_context(trace.INVALID_SPAN),
        links=[trace.Link(trace.SpanContext(cause.trace_id, cause.span_id, True,
                                            trace.TraceFlags(1)))])
    their_child = tracer.start_span("chat m", kind=trace.SpanKind.CLIENT,
                                    attributes=child_attributes, start_time=child.start,
                                    context=trace.set_span_in_context(their_root))
    if failed:
        their_child.set_status(trace.Status(trace.StatusCode.ERROR, failed))
    their_child.end(end_time=child.end_time)
    their_root.end(end_time=root.end_time)
    return made, exporter.get_finished_spans()


@settings(max_examples=150)
@given(ATTRIBUTES, ATTRIBUTES, st.text(max_size=20))
def test_spans_are_what_the_sdk_makes_of_the_same(attributes, child_attributes, failed):
    made, theirs = ours_and_the_sdks_spans(attributes, child_attributes, failed)
    ours = ExportTraceServiceRequest.FromString(
        wire.spans(made.resource, made.scope, made.spans))
    assert ours == common.encode_spans(theirs)


def untimed(request):
    """The request with every point's times zeroed (the two were made at two times)."""
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in getattr(metric, metric.WhichOneof("data")).data_points:
                    point.start_time_unix_nano = point.time_unix_nano = 0
    return request


@settings(max_examples=60)
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from("abc"), st.sampled_from(
    ["x", "y", 1, True, 1.0]), max_size=2), st.integers(0, 10 ** 9), st.floats(0, 1e4),
    st.floats(0, 100)), min_size=1, max_size=6))
def test_measurements_are_what_the_sdk_makes_of_the_same(measurements):
    made = model.Telemetry({"metrics": ("otlp",)}, print)
    reader = InMemoryMetricReader(preferred_temporality={
        Counter: AggregationTemporality.DELTA, Histogram: AggregationTemporality.DELTA})
    sdk = MeterProvider(metric_readers=[reader], resource=Resource(made.resource),
                        shutdown_on_exit=False)
    meter = sdk.get_meter(*made.scope)
    instruments = {}
    for name, (bounds, unit, description) in model.INSTRUMENTS.items():
        instruments[name] = meter.create_counter(name, unit, description) if bounds is None \
            else meter.create_histogram(name, unit, description,
                                        explicit_bucket_boundaries_advisory=list(bounds))
    for attributes, tokens, dollars, seconds in measurements:
        for name, value in (("gen_ai.client.token.usage", tokens),     # INSTRUMENTS' order:
                            ("gen_ai.client.operation.duration", seconds),  # the SDK's is
                            ("agentctl.cost", dollars)):                    # the first use's
            made.record(name, value, attributes)
            (instruments[name].add if name == "agentctl.cost" else
             instruments[name].record)(value, attributes)
    ours = ExportMetricsServiceRequest.FromString(
        wire.metrics(made.resource, made.scope, made.metrics()))
    assert untimed(ours) == untimed(encode_metrics(reader.get_metrics_data()))


def test_the_resource_is_the_variables_then_agentctl():
    assert model.resource({"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,"
                                                       "team=a%2Cb,bad,service.name=x",
                           "OTEL_SERVICE_NAME": "agents"}) == {
        "telemetry.sdk.name": "agentctl", "telemetry.sdk.language": "python",
        "telemetry.sdk.version": __version__, "service.name": "agents",
        "service.version": __version__, "deployment.environment": "prod", "team": "a,b"}
    assert model.resource({})["service.name"] == "agentctl"


@pytest.mark.parametrize("sampler, argument, sampled", [
    ("", "", True), ("parentbased_always_on", "", True), ("always_off", "", False),
    ("parentbased_always_off", "", False), ("traceidratio", "0.5", [True, False]),
    ("parentbased_traceidratio", "0", False), ("traceidratio", "1", True),
])
def test_a_root_is_sampled_as_the_standard_samplers_say(sampler, argument, sampled):
    environ = {"OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": argument}
    low, high = 1, (1 << 128) - 1      # the ratio looks at the trace id's low 64 bits
    said = [model.root_sampled(low, environ), model.root_sampled(high, environ)]
    assert said == (sampled if isinstance(sampled, list) else [sampled, sampled])


def test_a_traceparent_is_read_strictly():
    context = model.Context.parse(CAUSE)
    assert (context.trace_id, context.span_id, context.sampled, context.remote) == (
        0x5B8AA5A2D2C872E8321CF37308D69DF2, 0x051581BF3CB55C13, True, True)
    assert context.traceparent() == CAUSE
    for bad in (None, "", "01-" + CAUSE[3:], CAUSE[:-1], CAUSE.replace("5b8a", "5b8g"),
                "00-" + "0" * 32 + CAUSE[35:]):
        assert model.Context.parse(bad) is None


@pytest.mark.parametrize("environ, url", [
    ({}, "http://localhost:4318/v1/traces"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318/"},
     "https://collector:4318/v1/traces"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/base",
      "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/as/it/is"}, "http://t:1/as/it/is"),
])
def test_the_endpoint_is_the_signals_else_the_general_ones_with_its_path(environ, url):
    assert wire.endpoint("traces", environ) == url


def test_headers_and_timeout_are_read_as_the_specification_writes_them():
    environ = {"OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b%3D,Bad, x=1=2 ,=no",
               "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "only=metrics",
               "OTEL_EXPORTER_OTLP_TIMEOUT": "2500"}
    assert wire.headers("traces", environ) == {"api-key": "a b=", "x": "1=2"}
    assert wire.headers("metrics", environ) == {"only": "metrics"}
    assert wire.timeout("traces", environ) == 2.5              # milliseconds
    assert wire.timeout("traces", {}) == 10.0
    assert wire.timeout("traces", {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "soon"}) is None


@pytest.mark.parametrize("through", ["socket", "urllib"])
def test_a_transient_refusal_is_tried_again(otlp, through):  # noqa: F811
    made, _ = ours_and_the_sdks_spans({"a": 1}, {}, "")
    body = wire.spans(made.resource, made.scope, made.spans)
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
               "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20t0ken"}
    if through == "urllib":     # a proxy variable: urllib posts, and honours no_proxy
        environ.update(http_proxy="http://127.0.0.1:1", no_proxy="127.0.0.1")
    otlp.refuse = [503]             # the first request is answered 503, the next taken
    assert wire.post("traces", body, environ) is None
    assert otlp.requests == 1 and len(otlp.spans) == 2
    assert otlp.headers[-1]["authorization"] == "Bearer t0ken"
    # refused for good: said at once
    otlp.refuse = [400]
    assert wire.post("traces", body, environ) == (otlp.url, "HTTP 400 Bad Request")


@pytest.mark.parametrize("environ, failure", [
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"},
     ("", "OTEL_EXPORTER_OTLP_TIMEOUT=soon: not a number of milliseconds")),
    ({"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "br"},
     ("", "OTEL_EXPORTER_OTLP_COMPRESSION=br: not supported (gzip or none)")),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:secret@collector:4318",
      "OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"},
     ("https://collector:4318", "the certificates (/nonexistent/ca.pem): "
                                "No such file or directory")),
    ({"OTEL_EXPORTER_OTLP_HEADERS": "x=a%0D%0Ab"},
     ("http://localhost:4318", "OTEL_EXPORTER_OTLP_HEADERS: a line break in a header")),
])
def test_a_variable_that_cant_be_used_is_said_and_nothing_sent(environ, failure):
    assert wire.post("traces", b"", environ) == failure
