"""The connection side of the API models' calls: urllib3, the library requests is built on,
used directly (a turn's start pays for urllib3 alone: requests adds some 20 ms of its own
modules), and set up from the environment as requests set itself up, so that every variable
keeps its meaning:

- a proxy from HTTPS_PROXY, HTTP_PROXY or ALL_PROXY (each read in lower case first), but
  for a host NO_PROXY names (a name, and the names under it; NAME:PORT; an IPv4 address or
  network; * for every host); a proxy URL's user and password go to the proxy as
  Proxy-Authorization; a SOCKS proxy needs PySocks (the socks extra);
- the certificates trusted: REQUESTS_CA_BUNDLE, else CURL_CA_BUNDLE (a file, or a
  directory of hashed certificates), else certifi's bundle;
- a base URL's user and password, as Basic authorization, in place of a key's header.

One pool of connections per process for each proxy and set of certificates: the calls of a
turn, and the turns of agent-run --all, reuse a kept-alive connection, and urllib3's pools
are thread-safe (each call at once takes a connection of its own). Nothing read from the
environment is kept: only the pools and the certificates loaded, by what they were made of.
"""

import importlib.util
import os
import socket
import struct
import threading
from base64 import b64encode
from urllib.parse import unquote, urlsplit

import urllib3
from urllib3.exceptions import SSLError

from .. import __version__
from ..errors import UsageError

HOSTS = 10              # hosts whose kept-alive connections a pool keeps (as requests did)
CONNECTIONS = 64        # kept alive to one host: as many as agent-run -j runs turns at once
CA_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
# What every request says beyond a provider's own headers, as requests said it (but for
# the name): the encodings urllib3 can undo (gzip, deflate; br, zstd when installed).
ENCODINGS = urllib3.util.make_headers(accept_encoding=True)["accept-encoding"]
HEADERS = {"User-Agent": f"agentctl/{__version__}",
           "Accept-Encoding": ", ".join(ENCODINGS.split(",")),
           "Accept": "*/*", "Connection": "keep-alive"}

_pools = {}             # (proxy URL or None, certificates or None) -> urllib3 PoolManager
_lock = threading.Lock()


class ProxyUnusable(Exception):
    """A proxy variable that names no proxy this transport can speak to: a fault of the
    connection, tried again as the others are (as it was under requests)."""


def open_post(url, data, headers, timeouts, method="POST"):
    """POST `data` (bytes; None for none) to `url` with `headers` (over HEADERS), or send
    it by `method`: the urllib3 response, its body unread (read it with its stream(), then
    give it back with done()). Raises urllib3's errors as urllib3 does (no retry: the
    caller retries), ProxyUnusable, and UsageError for a certificates variable that names
    nothing."""
    parts = urlsplit(url)
    headers = {**HEADERS, **headers}
    if parts.password is not None and (parts.username or parts.password):
        headers["Authorization"] = basic(unquote(parts.username), unquote(parts.password))
    if "@" in parts.netloc:
        url = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    proxy = proxy_for(url)
    # (a proxy spoken to over TLS is verified as a server is)
    tls = parts.scheme == "https" or (proxy or "").lower().startswith("https:")
    connect, read = timeouts
    return pools(proxy, trusted() if tls else None).urlopen(
        method, url, body=data, headers=headers, redirect=False, retries=False,
        preload_content=False, timeout=urllib3.Timeout(connect=connect, read=read))


def done(response):
    """Give a response's connection back: kept alive when its body was read to the end,
    else closed (another call can't follow on it)."""
    if not response.isclosed():
        response.close()
    response.release_conn()


def basic(user, password):
    return "Basic " + b64encode(f"{user}:{password}".encode("latin-1", "replace")).decode()


def pools(proxy, ca):
    """The PoolManager (a ProxyManager, through `proxy`) of this process for calls through
    `proxy` (None: straight) that trust the certificates at `ca` (None: plain HTTP)."""
    with _lock:
        manager = _pools.get((proxy, ca))
        if manager is None:
            settings = {"num_pools": HOSTS, "maxsize": CONNECTIONS, "block": False}
            if ca is not None:
                settings["ssl_context"] = tls_context(ca)
            manager = _pools[proxy, ca] = new_manager(proxy, settings)
    return manager


def new_manager(proxy, settings):
    if proxy is None:
        return urllib3.PoolManager(**settings)
    parts = urlsplit(proxy)
    if not parts.hostname:
        raise ProxyUnusable("a proxy URL without a host")
    if parts.scheme.lower().startswith("socks"):
        if importlib.util.find_spec("socks") is None:   # (urllib3 would warn, then fail)
            raise ProxyUnusable("a SOCKS proxy needs PySocks, the socks extra")
        from urllib3.contrib.socks import SOCKSProxyManager  # (an optional extra: socks)
        return SOCKSProxyManager(proxy, **settings)
    auth = {}
    if parts.username and parts.password is not None:
        auth["Proxy-Authorization"] = basic(unquote(parts.username), unquote(parts.password))
    if parts.scheme.lower() == "https":
        settings["proxy_ssl_context"] = settings["ssl_context"]
    return urllib3.ProxyManager(proxy, proxy_headers=auth, **settings)


def tls_context(ca):
    """An SSL context that verifies a server by the certificates at `ca` (a file, or a
    directory); urllib3's SSLError when they can't be loaded."""
    context = urllib3.util.create_urllib3_context()
    try:
        if os.path.isdir(ca):
            context.load_verify_locations(capath=ca)
        else:
            context.load_verify_locations(cafile=ca)
    except (OSError, ValueError) as exc:      # ssl.SSLError is an OSError
        raise SSLError(f"the certificates in {ca}: {exc}") from exc
    return context


# -- what the environment says ------------------------------------------------------------------

def trusted():
    """The certificates an https call trusts: the file or directory REQUESTS_CA_BUNDLE, else
    CURL_CA_BUNDLE names, else certifi's bundle. UsageError for a variable naming none."""
    for name in CA_VARIABLES:
        path = os.environ.get(name)
        if path:
            if not os.path.exists(path):
                raise UsageError(f"{name} must name a file or directory of certificates, "
                                 f"not {path!r}")
            return path
    import certifi  # (start-up: 0.3 ms, only for an https call)
    return certifi.where()


def proxy_for(url):
    """The proxy a call to `url` goes through (a URL), or None, as requests chose it: the
    scheme's variable, else ALL_PROXY's, unless NO_PROXY names the host."""
    if not any(value for name, value in os.environ.items()
               if name.lower().endswith("_proxy") and name.lower() != "no_proxy"):
        return None         # the usual case, without urllib.request's import
    import urllib.request  # (start-up: 1.5 ms, only with a proxy variable set)
    parts = urlsplit(url)
    host = parts.hostname
    if host is None or bypassed(host, parts.port):
        return None
    try:
        if urllib.request.proxy_bypass_environment(host):
            return None
    except (TypeError, socket.gaierror):
        pass
    proxies = urllib.request.getproxies_environment()
    for key in (f"{parts.scheme}://{host}", parts.scheme, f"all://{host}", "all"):
        if key in proxies:
            proxy = proxies[key]
            return proxy if "://" in proxy else "http://" + proxy
    return None


def bypassed(host, port):
    """Whether NO_PROXY (no_proxy first) names `host` (a URL's, lower case): for an IPv4
    address, that address or a network holding it (ADDRESS/BITS); for a name, that name,
    NAME:PORT, or a domain it is under (with or without its leading dot)."""
    listed = os.environ.get("no_proxy") or os.environ.get("NO_PROXY")
    entries = [e for e in (listed or "").replace(" ", "").split(",") if e]
    address = ipv4(host)
    if address is not None:
        return any(in_network(address, entry) if "/" in entry else entry == host
                   for entry in entries)
    with_port = f"{host}:{port}" if port else host
    for entry in entries:
        entry = entry.lstrip(".")
        if entry in (host, with_port) or host.endswith("." + entry) \
                or with_port.endswith("." + entry):
            return True
    return False


def ipv4(text):
    """An IPv4 address as a number (any form inet_aton reads), else None."""
    try:
        return struct.unpack("!L", socket.inet_aton(text))[0]
    except (OSError, ValueError):
        return None


def in_network(address, network):
    """Whether `address` (a number) is in `network`, ADDRESS/BITS with BITS 1 to 32."""
    base, _, bits = network.partition("/")
    try:
        bits = int(bits)
    except ValueError:
        return False
    start = ipv4(base)
    if start is None or not 1 <= bits <= 32:
        return False
    mask = (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF
    return address & mask == start & mask
