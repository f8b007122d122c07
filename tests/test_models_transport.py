"""The model calls' transport (models/transport.py, urllib3 itself where requests was): the
request requests sent, the proxy it chose, the faults and their lines, gzip, and one pool of
connections for the process. TLS and its certificates: test_models_tls.py."""

import base64
import importlib.util
import socket
import threading
from urllib.parse import urlsplit

import pytest

import agentctl
from agentctl.errors import TempFail
from agentctl.models import get_model, transport
from tests.conftest import wait_until
from tests.fakeapi import (ANTHROPIC_KEY, HELLO, MODELS, OPENAI_KEY, FakeAPI, Handler, ask,
                           fakeapi)  # noqa: F401 (a fixture)

both = pytest.mark.parametrize("spec", MODELS)
streamed = pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def base_urls(monkeypatch, url):
    monkeypatch.setenv("OPENAI_BASE_URL", url + "/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)


# -- the request, as requests sent it ------------------------------------------------------------

@both
@pytest.mark.parametrize("userinfo", ["", "me:s%3Acret@"], ids=["plain", "userinfo"])
def test_a_request_is_the_one_requests_sent_but_for_its_user_agent(fakeapi, monkeypatch,
                                                                   spec, userinfo):
    import requests
    base = fakeapi.url.replace("://", f"://{userinfo}")
    base_urls(monkeypatch, base)
    fakeapi.reply("ours")
    assert ask(spec)[0].text == "ours"
    ours = fakeapi.last
    headers = ({"Content-Type": "application/json", "Authorization": f"Bearer {OPENAI_KEY}"}
               if spec.startswith("openai") else
               {"Content-Type": "application/json", "anthropic-version": "2023-06-01",
                "x-api-key": ANTHROPIC_KEY})
    fakeapi.reply("theirs")
    url = base + ("/v1/chat/completions" if spec.startswith("openai") else "/v1/messages")
    requests.post(url, json=ours["body"], headers=headers, timeout=30).close()
    theirs = fakeapi.last
    assert ours["path"] == theirs["path"] and ours["body"] == theirs["body"]
    assert theirs["headers"].pop("user-agent").startswith("python-requests/")
    assert ours["headers"].pop("user-agent") == f"agentctl/{agentctl.__version__}"
    assert ours["headers"] == theirs["headers"]      # content-length: the same bytes too
    if userinfo:        # in place of the key's header, as requests had it
        assert ours["headers"]["authorization"] == basic("me", "s:cret")


# -- the proxy, as requests chose it -------------------------------------------------------------

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD")
ENVIRONMENTS = [
    {},
    {"HTTPS_PROXY": "http://upper:1"},
    {"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:1"},
    {"HTTP_PROXY": "http://plain:1", "HTTPS_PROXY": "http://tls:1"},
    {"ALL_PROXY": "http://all:1"},
    {"all_proxy": "socks5://all:1", "HTTP_PROXY": "http://plain:1"},
    {"HTTPS_PROXY": "10.0.0.1:3128"},               # no scheme: http
    {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "example.com"},
    {"HTTPS_PROXY": "http://p:1", "NO_PROXY": ".example.com"},
    {"HTTPS_PROXY": "http://p:1", "no_proxy": "api.example.com:8443", "NO_PROXY": "*"},
    {"HTTPS_PROXY": "http://p:1", "HTTP_PROXY": "http://p:2", "NO_PROXY": "*"},
    {"HTTP_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8, other.org"},
    {"HTTP_PROXY": "http://p:1", "NO_PROXY": "10.1.2.3,127.0.0.0/33,127.0.0.1/x"},
    {"HTTP_PROXY": "http://p:1", "NO_PROXY": "localhost,::1"},
    {"HTTP_PROXY": "http://p:1", "http_proxy": "", "NO_PROXY": "xample.com"},
    {"HTTP_PROXY": "http://p:1", "REQUEST_METHOD": "GET"},     # CGI: HTTP_PROXY is not read
]
URLS = ["https://api.example.com/v1", "https://api.example.com:8443/v1",
        "https://sub.api.example.com", "https://notexample.com", "http://10.1.2.3:8080/v1",
        "http://10.200.0.1", "http://127.0.0.1:8000", "http://localhost:8000",
        "http://[::1]:8000/v1", "http://other.org"]


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_the_proxy_of_a_call_is_the_one_requests_chose(monkeypatch, environment):
    from requests.utils import get_environ_proxies, prepend_scheme_if_needed, select_proxy
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    for url in URLS:
        theirs = select_proxy(url, get_environ_proxies(url))
        theirs = theirs and prepend_scheme_if_needed(theirs, "http")
        assert (url, transport.proxy_for(url)) == (url, theirs)


def test_a_proxy_variable_without_a_scheme_is_http_for_a_name_too(monkeypatch):
    """(requests read NAME:PORT as a URL of scheme NAME, which no proxy speaks)"""
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "proxy.example:3128")
    assert transport.proxy_for("https://api.example.com/v1") == "http://proxy.example:3128"


class ProxyHandler(Handler):
    """A forward proxy as the client sees one: it answers an absolute URL's POST itself, as
    the fake API, and refuses to open a tunnel (CONNECT), noting what it was asked."""

    def do_POST(self):
        self.server.owner.asked.append(("POST", self.path,
                                        self.headers.get("Proxy-Authorization")))
        self.path = urlsplit(self.path).path
        super().do_POST()

    def do_CONNECT(self):
        self.server.owner.asked.append(("CONNECT", self.path,
                                        self.headers.get("Proxy-Authorization")))
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.close_connection = True


@pytest.fixture
def proxy(fakeapi, monkeypatch):
    server = FakeAPI(handler_class=ProxyHandler)
    server.asked = []
    for name in ("NO_PROXY", "no_proxy"):       # none for 127.0.0.1, as the fixture has it
        monkeypatch.delenv(name, raising=False)
    yield server
    server.close()


def test_a_call_goes_through_the_proxy_with_its_user(fakeapi, proxy, monkeypatch):
    monkeypatch.setenv("http_proxy", proxy.url.replace("://", "://me:pa%20ss@"))
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")      # lower case first
    proxy.reply("proxied")
    assert ask("openai:gpt-test")[0].text == "proxied"
    assert proxy.asked == [("POST", fakeapi.url + "/v1/chat/completions", basic("me", "pa ss"))]
    assert fakeapi.requests == []
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")                 # now straight to the API
    fakeapi.reply("straight")
    assert ask("openai:gpt-test")[0].text == "straight"
    assert len(proxy.asked) == 1


def test_an_https_call_tunnels_through_its_proxy(fakeapi, proxy, monkeypatch):
    monkeypatch.setenv("AGENTCTL_RETRY_TRIES", "1")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.example:8443/v1")
    monkeypatch.setenv("HTTPS_PROXY", proxy.url.replace("://", "://me:secret@"))
    with pytest.raises(TempFail) as caught:
        ask("openai:gpt-test")
    assert str(caught.value) == ("model API unavailable: openai: cannot reach "
                                 "api.example:8443 (ProxyError) after 1 try")
    assert proxy.asked == [("CONNECT", "api.example:8443", basic("me", "secret"))]


@pytest.mark.parametrize("value, why", [
    ("socks5://127.0.0.1:9", "a SOCKS proxy needs PySocks, the socks extra"),
    ("ftp://127.0.0.1:9", "ProxySchemeUnknown"),
    ("http://", "a proxy URL without a host"),
])
def test_a_proxy_no_call_can_go_through_is_a_fault_of_the_connection(fakeapi, monkeypatch,
                                                                     value, why):
    if value.startswith("socks") and importlib.util.find_spec("socks"):
        pytest.skip("PySocks is installed here")
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.setenv("AGENTCTL_RETRY_TRIES", "1")
    monkeypatch.setenv("HTTP_PROXY", value)
    with pytest.raises(TempFail) as caught:
        ask("openai:gpt-test")
    host = fakeapi.url.removeprefix("http://")
    assert str(caught.value) == (f"model API unavailable: openai: cannot reach {host} ({why}) "
                                 "after 1 try")
    assert (caught.value.code, caught.value.kind) == (75, "unreachable")


# -- faults: the lines and kinds they had under requests ------------------------------------------

def refused_port():
    with socket.socket() as sock:       # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@both
@pytest.mark.parametrize("behaviour, said, kind", [
    ({"cut_after": 3}, "response from {host} cut off", "unreachable"),
    ({"drop": True}, "connection to {host} dropped", "unreachable"),
    ({"delay": 3}, "no answer from {host} within AGENTCTL_HTTP_TIMEOUT=1 s", "timeout"),
    ({"gzip": True, "body": b"not gzip at all"}, "cannot reach {host} (DecodeError)",
     "unreachable"),
    ({"malformed": True}, "malformed response (not JSON)", "unavailable"),
    (None, "cannot connect to {host}", "unreachable"),
], ids=["cut", "dropped", "read-timeout", "bad-gzip", "malformed", "refused"])
@streamed
def test_each_fault_of_a_call_says_what_happened(fakeapi, monkeypatch, spec, behaviour, said,
                                                 kind, stream):
    monkeypatch.setenv("AGENTCTL_RETRY_TRIES", "1")
    monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "1")
    host = fakeapi.url.removeprefix("http://")
    if behaviour is None:
        host = f"127.0.0.1:{refused_port()}"
        base_urls(monkeypatch, f"http://{host}")
    else:
        fakeapi.reply("Hello there, this will go wrong", **behaviour)
    with pytest.raises(TempFail) as caught:
        ask(spec, stream)
    provider = spec.split(":")[0]
    assert str(caught.value) == (f"model API unavailable: {provider}: "
                                 f"{said.format(host=host)} after 1 try")
    assert (caught.value.code, caught.value.kind) == (75, kind)


def test_a_connection_not_accepted_in_time_is_a_connect_timeout(fakeapi, monkeypatch):
    monkeypatch.setenv("AGENTCTL_RETRY_TRIES", "1")
    monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "0.5")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        host = "127.0.0.1:%d" % server.getsockname()[1]
        waiting = []        # connections that fill the queue of those not yet accepted
        try:
            for _ in range(8):
                client = socket.socket()
                client.settimeout(1)      # (a connection to 127.0.0.1 takes far less)
                waiting.append(client)
                client.connect(server.getsockname())
        except (TimeoutError, socket.timeout):
            pass            # the queue is full: the next connection waits too
        else:
            pytest.skip("this kernel accepts every connection at once")
        base_urls(monkeypatch, f"http://{host}")
        with pytest.raises(TempFail) as caught:
            ask("openai:gpt-test")
        for client in waiting:
            client.close()
    assert str(caught.value) == (f"model API unavailable: openai: cannot connect to {host} "
                                 "after 1 try")
    assert caught.value.kind == "unreachable"


# -- the body: gzip, and the headers that say the limits --------------------------------------------

@both
@streamed
def test_a_gzipped_reply_is_read_and_a_stream_still_streams(fakeapi, spec, stream):
    fakeapi.reply("Hello, world! How are you today?", gzip=True)
    reply, chunks = ask(spec, stream)
    assert reply.text == "Hello, world! How are you today?"
    assert chunks == (["Hello, worl", "d! How are ", "you today?"] if stream else [])
    assert "gzip" in fakeapi.last["headers"]["accept-encoding"].split(", ")


# -- one pool of connections for the process ------------------------------------------------------

@both
@streamed
def test_the_models_of_a_process_share_its_kept_alive_connections(fakeapi, spec, stream):
    """As agent-run --all's turns do, each with a model of its own (ask() makes one)."""
    fakeapi.reply("first").reply("second")
    assert ask(spec, stream)[0].text == "first"
    assert ask(spec, stream)[0].text == "second"
    assert len(fakeapi.sockets) == 1


def test_calls_at_once_take_a_connection_each_and_keep_them(fakeapi):
    held = threading.Event()
    fakeapi.reply("slow", hold=held).reply("quick").reply("third")
    model = get_model("openai:gpt-test")
    texts = []
    slow = threading.Thread(target=lambda: texts.append(model.complete(list(HELLO), []).text))
    slow.start()
    try:
        wait_until(lambda: fakeapi.requests, "the first call")
        texts.append(model.complete(list(HELLO), []).text)
    finally:
        held.set()
        slow.join(60)
    assert texts == ["quick", "slow"]
    assert model.complete(list(HELLO), []).text == "third"
    assert len(fakeapi.sockets) == 2
