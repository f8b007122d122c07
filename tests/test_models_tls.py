"""A model call over TLS (models/transport.py): the server verified against certifi's bundle,
or the file or directory REQUESTS_CA_BUNDLE (else CURL_CA_BUNDLE) names, as requests did; a
server that isn't trusted, or not for its name, fails in one line (69). The fake API speaks
TLS here with a certificate made for the test by openssl(1)."""

import os
import shutil
import ssl
import subprocess

import pytest

from agentctl.errors import UsageError
from agentctl.models import ModelError
from tests.fakeapi import FakeAPI, Server, ask, fakeapi  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl(1)")


def certificate(directory, name, san):
    """(certificate file, key file) of a new self-signed certificate for `san`."""
    cert, key = os.path.join(directory, f"{name}.pem"), os.path.join(directory, f"{name}.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    f"/CN={name}", "-addext", f"subjectAltName={san}", "-keyout", key,
                    "-out", cert], check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """Two certificates: one for 127.0.0.1, one for another name; and a directory of
    certificates named by their hash (as OpenSSL's c_rehash lays one out) holding the
    first."""
    directory = str(tmp_path_factory.mktemp("tls"))
    good = certificate(directory, "local", "IP:127.0.0.1")
    other = certificate(directory, "other", "DNS:other.example")
    hashed = os.path.join(directory, "hashed")
    os.mkdir(hashed)
    digest = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", good[0]], check=True,
                            capture_output=True, text=True).stdout.strip()
    shutil.copy(good[0], os.path.join(hashed, f"{digest}.0"))
    return {"good": good, "other": other, "hashed": hashed}


def tls_api(monkeypatch, cert, key):
    """A fake API that speaks TLS with this certificate, the providers pointed at it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    class TLSServer(Server):
        def get_request(self):
            sock, address = super().get_request()
            return context.wrap_socket(sock, server_side=True), address

    api = FakeAPI(server_class=TLSServer)
    api.url = api.url.replace("http://", "https://")
    monkeypatch.setenv("OPENAI_BASE_URL", api.url + "/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    return api


@pytest.fixture
def served(fakeapi, monkeypatch, certificates):
    api = tls_api(monkeypatch, *certificates["good"])
    yield api
    api.close()
    assert not api.violations and not api.errors


def test_a_server_certifi_does_not_trust_fails_in_one_line(served):
    with pytest.raises(ModelError) as caught:
        ask("openai:gpt-test")
    host = served.url.removeprefix("https://")
    assert str(caught.value) == f"model API error: openai: TLS failure with {host}"
    assert caught.value.code == 69
    assert served.requests == []


@pytest.mark.parametrize("variable", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_server_the_variables_certificates_trust_is_called(served, monkeypatch, certificates,
                                                             variable, stream):
    monkeypatch.setenv(variable, certificates["good"][0])
    served.reply("over TLS").reply("again")
    assert ask("anthropic:claude-test", stream)[0].text == "over TLS"
    assert ask("openai:gpt-test", stream)[0].text == "again"


def test_requests_ca_bundle_comes_before_curl_ca_bundle(served, monkeypatch, certificates):
    monkeypatch.setenv("CURL_CA_BUNDLE", certificates["good"][0])
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", certificates["other"][0])
    with pytest.raises(ModelError, match="TLS failure"):
        ask("openai:gpt-test")


def test_a_directory_of_hashed_certificates_is_trusted_too(served, monkeypatch, certificates):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", certificates["hashed"])
    served.reply("from the directory")
    assert ask("openai:gpt-test")[0].text == "from the directory"


def test_a_trusted_certificate_of_another_name_fails(fakeapi, monkeypatch, certificates):
    api = tls_api(monkeypatch, *certificates["other"])
    try:
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", certificates["other"][0])
        with pytest.raises(ModelError, match="^model API error: openai: TLS failure with "):
            ask("openai:gpt-test")
        assert api.requests == []
    finally:
        api.close()


def test_a_bundle_that_holds_no_certificate_is_a_tls_failure(served, monkeypatch, tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("no certificate here\n")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(garbage))
    with pytest.raises(ModelError, match="^model API error: openai: TLS failure with "):
        ask("openai:gpt-test")


def test_a_bundle_variable_naming_nothing_is_a_usage_error(served, monkeypatch, tmp_path):
    monkeypatch.setenv("CURL_CA_BUNDLE", str(tmp_path / "nothing.pem"))
    with pytest.raises(UsageError) as caught:
        ask("openai:gpt-test")
    assert str(caught.value) == ("CURL_CA_BUNDLE must name a file or directory of "
                                 f"certificates, not {str(tmp_path / 'nothing.pem')!r}")
    assert caught.value.code == 2
