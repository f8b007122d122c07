"""What a provider's response says of its limits (models/limits.py): Retry-After and
retry-after-ms, OpenAI's x-ratelimit-* (Go durations), Anthropic's anthropic-ratelimit-*
(RFC 3339 times); and an endpoint's name (models/endpoint.py): its URL and a
fingerprint of its credentials, never the key."""

import pytest

from agentctl.models import limits
from agentctl.endpoint import Identity


class Headers(dict):
    """A response's headers, read without regard to case (as requests' are)."""

    def __init__(self, **given):
        super().__init__((k.replace("_", "-").lower(), v) for k, v in given.items())

    def get(self, name, default=None):
        return super().get(name.lower(), default)


@pytest.mark.parametrize("text, seconds", [
    ("1s", 1.0), ("6m0s", 360.0), ("12ms", 0.012), ("2m59.56s", 179.56), ("1h2m3s", 3723.0),
    ("250us", 0.00025), ("0.5", 0.5), ("2026-01-01T00:01:00Z", 60.0),
    ("2026-01-01T00:00:30.500+00:00", 30.5), ("soon", None), ("1x", None)])
def test_reset_times_in_the_providers_formats(text, seconds):
    now = 1767225600.0      # 2026-01-01T00:00:00Z
    assert limits.reset_seconds(text, now) == pytest.approx(seconds) if seconds is not None \
        else limits.reset_seconds(text, now) is None


def test_openai_and_anthropic_headers_are_read_alike():
    now = 1767225600.0
    said = limits.read(200, Headers(x_ratelimit_limit_requests="60",
                                    x_ratelimit_remaining_requests="3",
                                    x_ratelimit_reset_requests="57s",
                                    x_ratelimit_limit_tokens="150000",
                                    x_ratelimit_remaining_tokens="149984",
                                    x_ratelimit_reset_tokens="6m0s"), now)
    assert (said.requests.limit, said.requests.remaining, said.requests.reset) == (60, 3, 57.0)
    assert (said.tokens.limit, said.tokens.remaining, said.tokens.reset) == (150000, 149984, 360)
    said = limits.read(429, Headers(anthropic_ratelimit_requests_limit="50",
                                    anthropic_ratelimit_requests_remaining="0",
                                    anthropic_ratelimit_requests_reset="2026-01-01T00:00:02Z",
                                    anthropic_ratelimit_input_tokens_limit="40000",
                                    anthropic_ratelimit_input_tokens_remaining="39000",
                                    anthropic_ratelimit_input_tokens_reset="2026-01-01T00:01:00Z",
                                    anthropic_ratelimit_output_tokens_limit="8000",
                                    anthropic_ratelimit_output_tokens_remaining="100",
                                    anthropic_ratelimit_output_tokens_reset="2026-01-01T00:00:10Z",
                                    retry_after="2"), now)
    assert (said.status, said.retry_after) == (429, 2.0)
    assert (said.requests.remaining, said.requests.reset) == (0, 2.0)
    assert (said.tokens.limit, said.tokens.remaining, said.tokens.reset) == (8000, 100, 10.0)
    assert limits.read(200, Headers(retry_after="3", retry_after_ms="250"), now).retry_after \
        == 0.25
    assert limits.read(503, Headers(retry_after="Thu, 01 Jan 2026 00:00:05 GMT"), now
                       ).retry_after == 5.0
    assert limits.read(200, Headers(), now).requests is None


def test_an_endpoint_s_name_holds_a_fingerprint_of_its_credentials_not_them():
    one, other = (Identity("openai", "https://u:p@api.example/v1/?x=1", key).name
                  for key in ("k1", "k2"))
    assert one.startswith("https://api.example/v1#") and one != other
    assert "k1" not in one and "u:p" not in one and "x=1" not in one
    assert Identity("openai", "https://api.example/v1", "k1").name != one   # the user counts
    assert Identity("openai", "http://127.0.0.1:8080/v1/", "").name == "http://127.0.0.1:8080/v1#-"
    assert Identity("openai", "http://[::1]:8080/v1", "").url == "http://[::1]:8080/v1"
