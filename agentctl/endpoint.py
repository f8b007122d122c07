"""Where a model call goes: a provider's base URL and key from the environment,
checked, and the endpoint's name, by which every run that shares the database
knows it (agentctl(5), endpoints): the base URL without the credentials it may
hold, and a fingerprint of the key, never the key.

Kept free of requests: agent-run --all names the endpoint of each agent it may
run before it starts any run.
"""

import hashlib
import os
import re
from urllib.parse import urlsplit, urlunsplit

from .. import modelspec
from ..errors import UsageError

VISIBLE_ASCII = re.compile(r"[!-~]*")
FINGERPRINT = 12        # hex digits of the SHA-256 of the credentials


def base_url(variable, default):
    """The API's base URL from `variable`, checked, without a trailing slash."""
    url = os.environ.get(variable, "").strip() or default
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        # The value itself is not shown: a URL may carry credentials.
        raise UsageError(f"{variable} must be an http:// or https:// URL")
    return url.rstrip("/")


def api_key(variable, url, spec):
    """The key from `variable`; a local server (llama-server, Ollama) may need none."""
    key = os.environ.get(variable, "").strip()
    if not key and modelspec.locality(url) != "loopback":
        raise UsageError(f"{variable} is not set (needed by model {spec})")
    if not VISIBLE_ASCII.fullmatch(key):
        # A header can't carry it (or would carry other bytes than meant): say so now, not as an
        # encoding error (70) or a connection fault (75). The value is not shown.
        raise UsageError(f"{variable} must be printable ASCII without spaces "
                         "(it is sent in an HTTP header)")
    return key


def where(url):
    """host:port of url, for messages: never the userinfo, path or query, which may hold secrets."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname


class Identity:
    """An endpoint as the database names it: `name` is `url`#FINGERPRINT (or #- for a
    call without credentials), `url` the base URL without a user, password, query or
    fragment, `provider` the API it speaks (openai, anthropic)."""

    def __init__(self, provider, url, key):
        parts = urlsplit(url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        netloc = f"{host}:{parts.port}" if parts.port else host
        self.provider = provider
        self.url = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        secret = "\n".join(x for x in (key, parts.username or "", parts.password or "",
                                       parts.query) if x)
        self.name = f"{self.url}#{fingerprint(secret) if secret else '-'}"

    def __repr__(self):
        return f"<endpoint {self.name}>"


def fingerprint(secret):
    return hashlib.sha256(secret.encode()).hexdigest()[:FINGERPRINT]
