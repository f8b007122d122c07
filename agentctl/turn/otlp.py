"""OTLP/HTTP with protobuf, as agent-run sends its spans and metrics (agent-run(1),
TRACING): the messages of OpenTelemetry's protocol that a run's telemetry fills
(turn/telemetry.py: spans with their attributes, links and status; sums and
histograms), written here, and posted with the standard library where the standard
variables say (OTEL_EXPORTER_OTLP_*: the endpoint, headers, timeout, compression,
certificates).

Neither protobuf's runtime nor an HTTP client package is imported for it, and a plain
http:// collector with no proxy between is spoken to over a socket of the run's own:
urllib.request alone would cost an offline turn a fifth more (bench/otel.py). The field
numbers are opentelemetry-proto's (opentelemetry/proto/{common,resource,trace,
metrics}/v1/*.proto); tests/test_otlp.py holds what this writes to what the SDK's own
encoder writes of the same.
"""

import os
import random
import socket
import struct
import time
from urllib.parse import unquote, urlsplit

DEFAULT_ENDPOINT = "http://localhost:4318"
DEFAULT_TIMEOUT_MS = 10000
RETRIED = (429, 502, 503, 504)      # the specification's transient answers
# Span.flags and Link.flags: whether the context's remoteness is known, and is remote
HAS_IS_REMOTE, IS_REMOTE = 0x100, 0x200


# -- the wire format: protobuf's, for the fields OTLP uses ---------------------------------------

def _varint(n):
    n &= (1 << 64) - 1      # a negative int64 as protobuf writes it: ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(number, wire):
    return _varint(number << 3 | wire)


def _int(number, n):
    return _tag(number, 0) + _varint(n) if n else b""


def _fixed64(number, n):
    return _tag(number, 1) + struct.pack("<Q", n) if n else b""


def _fixed32(number, n):
    return _tag(number, 5) + struct.pack("<I", n) if n else b""


def _double(number, x, always=False):
    return _tag(number, 1) + struct.pack("<d", x) if x or always else b""


def _bytes(number, data, always=False):
    return _tag(number, 2) + _varint(len(data)) + data if data or always else b""


def _text(number, text):
    return _bytes(number, (text or "").encode("utf-8", "replace"))


def _any(value):
    """An AnyValue."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return _tag(2, 0) + _varint(int(value))
    if isinstance(value, int):
        return _tag(3, 0) + _varint(value)
    if isinstance(value, float):
        return _double(4, value, always=True)
    if isinstance(value, bytes):
        return _bytes(7, value, always=True)
    if isinstance(value, (list, tuple)):
        return _bytes(5, b"".join(_bytes(1, _any(v), always=True) for v in value), always=True)
    if isinstance(value, dict):
        return _bytes(6, _attributes(1, value), always=True)
    return _bytes(1, str(value).encode("utf-8", "replace"), always=True)


def _attributes(number, attributes):
    """Repeated KeyValue: key 1, value 2."""
    return b"".join(_bytes(number, _text(1, key) + _bytes(2, _any(value), always=True),
                           always=True)
                    for key, value in (attributes or {}).items())


def _resource_scope(resource, scope):
    """A Resource (attributes 1) and an InstrumentationScope (name 1, version 2)."""
    return _bytes(1, _attributes(1, resource), always=True), \
        _bytes(1, _text(1, scope[0]) + _text(2, scope[1]), always=True)


# -- spans: ExportTraceServiceRequest --------------------------------------------------------

def spans(resource, scope, made):
    """The request that carries the Spans `made` (turn/telemetry.py) of one resource
    (its attributes) and scope (name, version)."""
    encoded_resource, encoded_scope = _resource_scope(resource, scope)
    scoped = encoded_scope + b"".join(_bytes(2, _span(s), always=True) for s in made)
    return _bytes(1, encoded_resource + _bytes(2, scoped, always=True), always=True)


def _flags(context):
    return HAS_IS_REMOTE | (IS_REMOTE if context is not None and context.remote else 0)


def _span(span):
    context, parent = span.context, span.parent
    out = _bytes(1, context.trace_id.to_bytes(16, "big")) + \
        _bytes(2, context.span_id.to_bytes(8, "big"))
    if parent is not None:
        out += _bytes(4, parent.span_id.to_bytes(8, "big"))
    out += _text(5, span.name) + _int(6, span.kind) + _fixed64(7, span.start) + \
        _fixed64(8, span.end_time) + _attributes(9, span.attributes)
    for link in span.links:
        out += _bytes(13, _bytes(1, link.trace_id.to_bytes(16, "big")) +
                      _bytes(2, link.span_id.to_bytes(8, "big")) + _fixed32(6, _flags(link)),
                      always=True)
    code, message = span.status
    out += _bytes(15, _text(2, message) + _int(3, code), always=True)
    return out + _fixed32(16, _flags(parent))


# -- metrics: ExportMetricsServiceRequest ----------------------------------------------------

def metrics(resource, scope, made):
    """The request that carries the metrics `made` (Telemetry.metrics: name, unit,
    description, a histogram's bounds or None for a sum, temporality, points)."""
    encoded_resource, encoded_scope = _resource_scope(resource, scope)
    scoped = encoded_scope + b"".join(_bytes(2, _metric(*m), always=True) for m in made)
    return _bytes(1, encoded_resource + _bytes(2, scoped, always=True), always=True)


def _metric(name, unit, description, bounds, temporality, points):
    head = _text(1, name) + _text(2, description) + _text(3, unit)
    if bounds is None:      # a monotonic Sum (7): points 1, temporality 2, is_monotonic 3
        encoded = b"".join(_bytes(1, _number_point(*p), always=True) for p in points)
        return head + _bytes(7, encoded + _int(2, temporality) + _int(3, 1), always=True)
    encoded = b"".join(_bytes(1, _histogram_point(bounds, *p), always=True) for p in points)
    return head + _bytes(9, encoded + _int(2, temporality), always=True)


def _number_point(attributes, start, now, value):
    number = _tag(6, 1) + struct.pack("<q", value) if isinstance(value, int) else \
        _double(4, value, always=True)
    return _fixed64(2, start) + _fixed64(3, now) + number + _attributes(7, attributes)


def _histogram_point(bounds, attributes, start, now, value):
    count, total, least, most, buckets = value
    return _fixed64(2, start) + _fixed64(3, now) + _fixed64(4, count) + \
        _double(5, total, always=True) + \
        _bytes(6, b"".join(struct.pack("<Q", c) for c in buckets)) + \
        _bytes(7, b"".join(struct.pack("<d", b) for b in bounds)) + \
        _attributes(9, attributes) + _double(11, least, always=True) + \
        _double(12, most, always=True)


# -- posting -------------------------------------------------------------------------------------

def variable(signal, name, environ=None):
    """OTEL_EXPORTER_OTLP_{SIGNAL}_{NAME}, else OTEL_EXPORTER_OTLP_{NAME}, else ""."""
    environ = os.environ if environ is None else environ
    return (environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_{name}")
            or environ.get(f"OTEL_EXPORTER_OTLP_{name}") or "").strip()


def endpoint(signal, environ=None):
    """Where `signal` (traces, metrics) is posted: its own endpoint as it is, else the
    general one with /v1/SIGNAL, else the default collector's."""
    environ = os.environ if environ is None else environ
    own = (environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT") or "").strip()
    if own:
        return own
    base = (environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip() or DEFAULT_ENDPOINT
    return f"{base.rstrip('/')}/v1/{signal}"


def headers(signal, environ=None):
    """The headers the variables give (KEY=VALUE,..., each value percent-decoded); a
    pair without its = is left out."""
    found = {}
    for pair in variable(signal, "HEADERS", environ).split(","):
        key, equals, value = pair.partition("=")
        if equals and key.strip():
            found[key.strip().lower()] = unquote(value.strip())
    return found


def timeout(signal, environ=None):
    """The seconds a request may take, from milliseconds as the specification has them
    (10 s by default); None: the variable is no number."""
    given = variable(signal, "TIMEOUT", environ)
    try:
        ms = float(given) if given else DEFAULT_TIMEOUT_MS
    except ValueError:
        return None
    return ms / 1000 if ms > 0 else None


def post(signal, body, environ=None):
    """Send `body` (the request's protobuf) to `signal`'s endpoint; None when it was
    taken, else (where: the endpoint's scheme, host and port, or "" for a variable
    that is wrong; why, in a few words). Transient answers (429, 502, 503, 504, a read
    that timed out) are tried again, later each time, while the timeout lasts; a
    collector that refuses the connection is not."""
    environ = os.environ if environ is None else environ
    url, seconds = endpoint(signal, environ), timeout(signal, environ)
    if seconds is None:
        return "", f"OTEL_EXPORTER_OTLP_TIMEOUT={variable(signal, 'TIMEOUT', environ)}: " \
                   "not a number of milliseconds"
    sent = {"Content-Type": "application/x-protobuf", **headers(signal, environ)}
    compression = variable(signal, "COMPRESSION", environ).lower()
    if compression == "gzip":
        import gzip  # (start-up: 0.5 ms, only to compress what is exported)
        body, sent["Content-Encoding"] = gzip.compress(body), "gzip"
    elif compression not in ("", "none"):
        return "", f"OTEL_EXPORTER_OTLP_COMPRESSION={compression}: not supported (gzip or none)"
    where = url
    try:
        parts = urlsplit(url)       # what is said of the URL: never its credentials or path
        where = f"{parts.scheme}://{parts.hostname or ''}" + \
            (f":{parts.port}" if parts.port else "")
        if any(c in f"{k}{v}" for k, v in sent.items() for c in "\r\n"):
            raise ValueError("OTEL_EXPORTER_OTLP_HEADERS: a line break in a header")
        send = _by_socket if parts.scheme == "http" and not _proxied(environ) else \
            _by_urllib(signal, environ)
    except ValueError as e:      # a certificate unread, a URL that is none
        return where if where != url else "", str(e)
    deadline, pause = time.monotonic() + seconds, 0.5
    while True:
        try:
            status, reason, wait = send(url, body, sent, max(deadline - time.monotonic(), 0.001))
            if 200 <= status < 300:
                return None
            why, again = f"HTTP {status} {reason}".rstrip(), status in RETRIED
        except OSError as e:
            why = e.strerror or str(e) or type(e).__name__
            again, wait = isinstance(e, TimeoutError), None
        wait = wait if wait is not None else pause * (1 + random.random() / 5)
        if not again or time.monotonic() + wait >= deadline:
            return where, why
        time.sleep(wait)
        pause *= 2


def _proxied(environ):
    """Whether a proxy variable is set for plain HTTP (then urllib, which reads them,
    posts: it knows no_proxy's rules)."""
    return any(environ.get(name) for name in ("http_proxy", "HTTP_PROXY", "all_proxy",
                                              "ALL_PROXY"))


def _by_socket(url, body, sent, seconds):
    """POST over a connection of its own to a plain http:// URL: (status, reason,
    Retry-After's seconds or None); OSError when no answer came."""
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.netloc.rpartition("@")[2]
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n" \
           f"Content-Length: {len(body)}\r\n" + \
           "".join(f"{k}: {v}\r\n" for k, v in sent.items()) + "\r\n"
    with socket.create_connection((parts.hostname, parts.port or 80), timeout=seconds) as sock:
        sock.sendall(head.encode("latin-1", "replace") + body)
        answer = b""
        while len(answer) < 1 << 20:        # to its end (it is small), for a clean close
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    lines = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    words = lines[0].split(" ", 2)
    if len(words) < 2 or not words[0].startswith("HTTP/") or not words[1].isdigit():
        raise OSError(f"not an HTTP answer: {lines[0][:60]!r}" if answer else "no answer")
    fields = dict((k.strip().lower(), v.strip()) for k, _, v in
                  (line.partition(":") for line in lines[1:]))
    return int(words[1]), words[2] if len(words) > 2 else "", \
        _retry_after(fields.get("retry-after"))


def _by_urllib(signal, environ):
    """POST with urllib.request (https, or through a proxy), the certificates the
    variables name: the same answer as _by_socket's."""
    import ssl  # (start-up: 6 ms, only to export over https or through a proxy)
    import urllib.error  # (start-up: 0.3 ms, only to export over https or through a proxy)
    import urllib.request  # (start-up: 6 ms, only to export over https or through a proxy)
    handlers = ()
    ca = variable(signal, "CERTIFICATE", environ)
    certificate = variable(signal, "CLIENT_CERTIFICATE", environ)
    key = variable(signal, "CLIENT_KEY", environ)
    if ca or certificate:
        try:
            context = ssl.create_default_context(cafile=ca or None)
            if certificate:
                context.load_cert_chain(certificate, key or None)
        except OSError as e:        # ssl.SSLError too
            files = ", ".join(f for f in (ca, certificate, key) if f)
            raise ValueError(f"the certificates ({files}): "
                             f"{getattr(e, 'strerror', None) or e}") from None
        handlers = (urllib.request.HTTPSHandler(context=context),)
    opener = urllib.request.build_opener(*handlers)

    def send(url, body, sent, seconds):
        try:
            with opener.open(urllib.request.Request(url, body, sent, method="POST"),
                             timeout=seconds) as answer:
                answer.read()
                return answer.status, answer.reason, None
        except urllib.error.HTTPError as e:
            return e.code, e.reason, _retry_after(e.headers.get("Retry-After"))
        except urllib.error.URLError as e:
            reason = e.reason
            raise reason if isinstance(reason, OSError) else OSError(str(reason)) from None
    return send


def _retry_after(value):
    try:
        return max(float(value), 0.0)
    except (TypeError, ValueError):
        return None
