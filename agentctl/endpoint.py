"""Where a model call goes: a provider's base URL and key from the environment,
checked, and the endpoint's name, by which every run that shares the database
knows it (agentctl(5), endpoints): the base URL without the credentials it may
hold, and a fingerprint of the key, never the key.

Kept free of urllib3: agent-run --all names the endpoint of each agent it may
run before it starts any run.
"""

import hashlib
import os
import re
from urllib.parse import urlsplit, urlunsplit

from agentctl import modelspec
from agentctl.errors import UsageError
from agentctl.text import host_port

VISIBLE_ASCII = r"[!-~]*"     # a pattern as text: re compiles it at its first use
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
    if not re.fullmatch(VISIBLE_ASCII, key):
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
        netloc = host_port(parts.hostname or "", parts.port)
        self.provider = provider
        self.url = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        secret = "\n".join(x for x in (key, parts.username or "", parts.password or "",
                                       parts.query) if x)
        self.name = f"{self.url}#{fingerprint(secret) if secret else '-'}"

    def __repr__(self):
        return f"<endpoint {self.name}>"


def fingerprint(secret):
    return hashlib.sha256(secret.encode()).hexdigest()[:FINGERPRINT]


def identity_of(spec):
    """The endpoint a call of the model `spec` goes to, as this process's environment
    names it (an Identity), read as a call reads it, without importing the provider;
    None for a model that calls no API or one a run would refuse (no key, a bad URL)."""
    row = modelspec.BY_NAME.get(modelspec.provider(spec))
    if row is None or row.key is None:
        return None
    try:
        url = base_url(row.url_variable, row.url)
        return Identity(row.name, url, api_key(row.key, url, spec))
    except UsageError:
        return None


def setup(spec):
    """A fingerprint of what this process's environment gives the model `spec`: its name,
    its base URL and key (a fingerprint of them, never the key), a scripted model's file
    as it is now. A hold remembers it (ops/supervise.py): when it differs, what made the
    turn fail may be gone."""
    row = modelspec.BY_NAME.get(modelspec.provider(spec))
    parts = [spec or ""]
    if row is not None and row.key is not None:
        parts += [os.environ.get(row.url_variable, "").strip() or row.url,
                  os.environ.get(row.key, "").strip()]
    elif row is not None and row.name == "scripted":
        try:
            found = os.stat(spec.partition(":")[2])
            parts.append(f"{found.st_ino}:{found.st_size}:{found.st_mtime_ns}")
        except OSError as e:
            parts.append(e.__class__.__name__)
    return fingerprint("\n".join(parts))
