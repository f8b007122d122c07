"""Package launchers as MCP servers' commands (agent-run(1), MCP servers): an entry
pasted as its README gives it (`npx -y @modelcontextprotocol/server-everything`,
`uvx mcp-server-fetch`, `pipx run ...`, `bunx ...`) runs in its sandbox with what the
launcher needs and nothing more:

- its package cache: a directory of that server's own under agentctl's cache,
  writable by it alone (bound at CACHE in its sandbox), so that a package is
  downloaded once and not on every start;
- its configuration as the operator has it in the environment (npm_config_*; UV_*,
  PIP_* and PIPX_*), ~/.npmrc's registry= too (its sandbox has another home), but
  its cache;
- its registry: the one configured (npm_config_registry or ~/.npmrc's registry=;
  UV_DEFAULT_INDEX, UV_INDEX_URL, PIP_INDEX_URL and the extra indexes), else the
  public one; unless its entry names its own "net", its hosts alone in its network
  list (through the egress proxy, as every host); where its list leaves them out,
  its cache alone (OFFLINE).

A table of launchers and two of registries; no I/O but reading ~/.npmrc.
"""

import os
import urllib.parse

from agentctl.text import host_port

CACHE = "/run/agentctl-cache"       # a server's own cache, in its sandbox

NPM, PYPI = "npm", "pypi"
# launcher (the command's file name) -> (its registry's kind, {variable: where in CACHE})
LAUNCHERS = {
    "npx": (NPM, {"npm_config_cache": "npm"}),
    "npm": (NPM, {"npm_config_cache": "npm"}),
    "bunx": (NPM, {"BUN_INSTALL_CACHE_DIR": "bun"}),
    "bun": (NPM, {"BUN_INSTALL_CACHE_DIR": "bun"}),
    "uvx": (PYPI, {"UV_CACHE_DIR": "uv"}),
    "uv": (PYPI, {"UV_CACHE_DIR": "uv"}),
    "pipx": (PYPI, {"PIPX_HOME": "pipx", "PIP_CACHE_DIR": "pip"}),
}
# the operator's configuration of a kind's launchers, passed on (by prefix, any case)
CONFIG = {NPM: ("npm_config_",), PYPI: ("uv_", "pip_", "pipx_")}
# the variables that name a registry, each of whose hosts the launcher may reach
REGISTRY = {NPM: ("npm_config_registry",),
            PYPI: ("uv_default_index", "uv_index_url", "uv_index", "uv_extra_index_url",
                   "pip_index_url", "pip_extra_index_url")}
PUBLIC = {NPM: ["registry.npmjs.org"], PYPI: ["pypi.org", "files.pythonhosted.org"]}
# what makes a launcher use its cache alone, for a server whose list leaves its registry
# out: what it has cached starts at once, and what it has not fails at once (instead of
# retrying a registry it can't reach until the start's time is up)
OFFLINE = {NPM: {"npm_config_offline": "true"}, PYPI: {"UV_OFFLINE": "1", "PIP_NO_INDEX": "1"}}


def of(command):
    """The launcher `command` is (its registry's kind, its cache variables), or None."""
    return LAUNCHERS.get(os.path.basename(command))


def given(command, environment, home):
    """(environment, hosts) a server whose command is `command` gets as a launcher:
    the operator's configuration of it and its cache's variables, and its registry's
    hosts; ({}, []) for another command."""
    found = of(command)
    if found is None:
        return {}, []
    kind, caches = found
    env = {name: value for name, value in environment.items()
           if name.lower().startswith(CONFIG[kind]) and value}
    urls = [url.partition("=")[2] if "=" in url.split("://")[0] else url   # (NAME=URL)
            for name, value in env.items() if name.lower() in REGISTRY[kind]
            for url in value.split()]
    env.update({name: f"{CACHE}/{where}" for name, where in caches.items()})
    if kind == NPM and not urls:
        configured = npmrc(os.path.join(home, ".npmrc"))
        if configured:
            env["npm_config_registry"] = configured
            urls.append(configured)
    hosts = [host for host in map(host_of, urls) if host] or list(PUBLIC[kind])
    return env, hosts


def offline(command):
    """The variables that keep launcher `command` to its cache (OFFLINE)."""
    return dict(OFFLINE[of(command)[0]])


def npmrc(path):
    """The registry= of an .npmrc, or None (a scope's registry is the scope's alone)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition("=")
                if sep and key.strip() == "registry" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return None


def host_of(url):
    """The host pattern (agentctl.hosts) of a registry's URL: its host, with the
    port when the URL names one; None for what is not an http(s) URL."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return host_port(parts.hostname, port)
