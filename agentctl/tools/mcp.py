"""MCP servers as the operator configures them (agent-run(1), MCP servers), and what
each offers, kept between turns so that a turn starts no server it does not call.

The configuration is the file other MCP clients write, {"mcpServers": {NAME: ENTRY}}
(Claude Desktop's, Cursor's; VS Code's {"servers": {NAME: ENTRY}} too):
- a stdio server: {"command", "args", "env", "cwd"}, and for its sandbox "ro", "net"
  (the hosts it may reach: a list of patterns, agentctl.hosts; true: every public host);
- a Streamable HTTP server: {"url", "headers"} or {"type": "http", ...};
- an SSE server (the older transport): {"type": "sse", "url", "headers"}.
`${VAR}` and `${VAR:-default}` (VS Code's `${env:VAR}`) in the command, args, env, url
and headers take their value from the environment when a server is started (a token is
never stored); VS Code's `${input:NAME}`, which asks its user, is refused.

An entry that is wrong breaks its own server only: it is skipped with a warning that
says why, as is every server when the file can't be read. A server's tools are
listed once and kept in the cache (paths.mcp_cache), keyed by its entry as written
and, for stdio, by the identity of its command's file: a changed entry or a new
program lists again. The session with a running server is mcpsession.py's.
"""

import hashlib
import json
import os
import re
import shutil
import time

from agentctl import jsonin, paths
from agentctl.errors import UsageError
from agentctl.ids import TOOL_NAME_RULE, is_tool_name
from agentctl.text import cut

TRANSPORTS = {"stdio": "stdio", "http": "http", "streamable-http": "http",
              "streamablehttp": "http", "sse": "sse"}
VARIABLE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
ASKED = re.compile(r"\$\{input:([^}]*)\}")       # VS Code's: asks its user


class Entry:
    """One configured server: its name, transport (stdio, http or sse) and entry."""

    def __init__(self, name, spec, transport):
        self.name, self.spec, self.transport = name, spec, transport

    def key(self, environment=None):
        """What its cached tool list is valid for: the entry as written (no value of a
        variable in it: a changed token lists nothing new) and, for stdio, the
        command's file, by path, size and modification time."""
        identity = ""
        if self.transport == "stdio":
            command = expand(self.spec["command"], environment)[0]
            found = shutil.which(command, path=(environment or os.environ).get("PATH")) \
                if os.sep not in command else command
            try:
                st = os.stat(found) if found else None
            except OSError:
                st = None
            identity = f"{found}:{st.st_size}:{st.st_mtime_ns}" if st else f"{command}:?"
        text = json.dumps([self.name, self.spec, identity], sort_keys=True)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def filled(self, environment=None):
        """The entry with its variables filled in from `environment`: {"argv", "env"}
        for stdio (env: only the entry's own), {"url", "headers"} else; a ValueError
        naming the first variable that is not set and has no default."""
        spec, missing, found = self.spec, [], {}

        def fill(text):
            value, more = expand(text, environment)
            missing.extend(more)
            return value
        if self.transport == "stdio":
            found["argv"] = [fill(w) for w in [spec["command"], *spec.get("args", [])]]
            found["env"] = {k: fill(v) for k, v in (spec.get("env") or {}).items()}
        else:
            found["url"] = fill(spec["url"])
            found["headers"] = {k: fill(v) for k, v in (spec.get("headers") or {}).items()}
        if missing:
            raise ValueError(f"${{{missing[0]}}} is not set (its configuration takes it from "
                             "the environment)")
        return found

    def secrets(self, environment=None):
        """The values its headers and env take from the environment: never shown."""
        found = []
        for field in ("headers", "env"):
            for value in (self.spec.get(field) or {}).values():
                for match in VARIABLE.finditer(value):
                    given = (environment or os.environ).get(match.group(1))
                    if given and len(given) >= 4:
                        found.append(given)
        return found


def expand(text, environment=None):
    """`text` with ${VAR} and ${VAR:-default} filled in; (text, names of variables that
    are not set and have no default)."""
    environment = os.environ if environment is None else environment
    missing = []

    def value(match):
        name, default = match.group(1), match.group(2)
        if name in environment:
            return environment[name]
        if default is not None:
            return default
        missing.append(name)
        return ""
    return VARIABLE.sub(value, text), missing


def hosts(spec):
    """The hosts a stdio server's entry gives it ("net": a list of patterns, or true for
    every public host, false or none for none), checked: ValueError says what is wrong."""
    given = spec.get("net", False)
    if isinstance(given, bool):
        return ["*"] if given else []
    if not isinstance(given, list) or not all(_strings(p) for p in given):
        raise ValueError('"net" is a list of hosts (["pypi.org", "*.github.com:443"]), or '
                         'true for every public host')
    from agentctl import hosts as rules  # (start-up: 2 ms, only for a list of hosts)
    try:
        return [rules.pattern(p).text for p in given]
    except UsageError as e:
        raise ValueError(f'"net": {str(e).removeprefix("bad net: ")}') from None


def _strings(value):
    return isinstance(value, str)


def _check(name, spec):
    """The entry's transport, or why it is wrong (a ValueError)."""
    if not isinstance(spec, dict):
        raise ValueError("an entry is an object")
    kind = spec.get("type")
    if kind is not None and (not isinstance(kind, str) or kind.lower() not in TRANSPORTS):
        raise ValueError(f"unknown type {kind!r} (stdio, http or sse)")
    transport = TRANSPORTS[kind.lower()] if kind else ("stdio" if "command" in spec else
                                                       "http" if "url" in spec else None)
    if transport is None:
        raise ValueError('want a "command" (stdio) or a "url" (Streamable HTTP, or SSE with '
                         '"type": "sse")')
    if transport == "stdio":
        if not _strings(spec.get("command")) or not spec["command"]:
            raise ValueError('a stdio server wants "command" (text)')
        if not isinstance(spec.get("args", []), list) or not all(map(_strings, spec.get("args", []))):
            raise ValueError('"args" is a list of texts')
        ro = spec.get("ro", [])
        if not isinstance(ro, list) or not all(_strings(p) and os.path.isabs(p) for p in ro):
            raise ValueError('"ro" is a list of absolute paths')
        hosts(spec)
        if "cwd" in spec and not (_strings(spec["cwd"]) and os.path.isabs(spec["cwd"])):
            raise ValueError('"cwd" is an absolute path')
    else:
        url = spec.get("url")
        if not _strings(url) or not url.startswith(("http://", "https://", "${")):
            raise ValueError('"url" is an http:// or https:// URL')
    for field in ("env", "headers"):
        value = spec.get(field, {})
        if not isinstance(value, dict) or not all(map(_strings, value.values())):
            raise ValueError(f'"{field}" is an object of texts')
    for text in [spec.get("command") or "", spec.get("url") or "", *spec.get("args", []),
                 *spec.get("env", {}).values(), *spec.get("headers", {}).values()]:
        asked = ASKED.search(text) if _strings(text) else None
        if asked:
            raise ValueError(f"${{input:{asked.group(1)}}} asks VS Code's user, which "
                             f"agentctl can't: take it from the environment (${{VAR}})")
    return transport


def servers(warnings):
    """{NAME: Entry} of the configuration; none when there is no file. What can't be
    read is a warning (in `warnings`), and only what is wrong is left out."""
    path = paths.mcp_config()
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(jsonin.MAX_BYTES + 1)
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        warnings.append(f"{path}: can't read the MCP configuration: "
                        f"{getattr(e, 'strerror', None) or e}: no MCP server is offered")
        return {}
    try:
        config = jsonin.loads(text)
    except jsonin.JSONError as e:
        warnings.append(f"{path}: not JSON: {e}: no MCP server is offered")
        return {}
    found = None
    if isinstance(config, dict):        # VS Code's form where there is no other
        found = config.get("mcpServers", config.get("servers"))
    if not isinstance(found, dict):
        warnings.append(f'{path}: want {{"mcpServers": {{NAME: {{...}}}}}} (or VS Code\'s '
                        '{"servers": ...}): no MCP server is offered')
        return {}
    entries = {}
    for name, spec in found.items():
        try:
            if not is_tool_name(name) or "__" in name:
                raise ValueError(f"a name is {TOOL_NAME_RULE} (no __)")
            entries[name] = Entry(name, spec, _check(name, spec))
        except ValueError as e:
            warnings.append(f"MCP server {cut(name, 64)!r} ({path}): {e}: skipped")
    return entries


# -- the tools each server offers, kept between turns --------------------------------------

def cached(entry, environment=None):
    """The tools `entry` offered when it was last listed, [(name, description, schema)],
    or None when its entry or program has changed since, or it never was."""
    found = _load(paths.mcp_cache()).get(entry.key(environment))
    if not isinstance(found, list):
        return None
    return [tuple(t) for t in found]


def remember(entry, tools, environment=None):
    """Keep `tools` as what `entry` offers."""
    known = _load(paths.mcp_cache())
    known[entry.key(environment)] = [list(t) for t in tools]
    _store(paths.mcp_cache(), known)


# -- a Streamable HTTP server's session, kept for its agent's next turn ---------------------

SESSION_SECONDS = 24 * 3600     # a session unused this long is forgotten
TOUCH_SECONDS = 3600            # its use written down at most this often


def session(entry, environment):
    """The session `entry`'s server gave this agent ($AGENT_ID) on an earlier turn and
    that was used within SESSION_SECONDS, to be resumed ({"session", "version", ...}),
    or None."""
    found = _load(paths.mcp_sessions()).get(_session_key(entry, environment))
    if not _fresh(found, time.time()) or not isinstance(found.get("session"), str) or \
            not isinstance(found.get("version"), str):
        return None
    return found


def keep_session(entry, environment, kept):
    """Keep `kept` (None: forget it) as the agent's session with `entry`'s server, its
    use written down (at most every TOUCH_SECONDS); the sessions unused for
    SESSION_SECONDS forgotten (a session is the agent's alone: the file is its user's
    alone)."""
    path, key, now = paths.mcp_sessions(), _session_key(entry, environment), time.time()
    loaded = _load(path)
    known = {k: v for k, v in loaded.items() if _fresh(v, now)}
    was = known.get(key)
    if kept and was and was.get("session") == kept["session"] and \
            now - was["at"] < TOUCH_SECONDS:
        return      # (as it was, and used lately: nothing written)
    if kept:
        known[key] = {**kept, "at": now}
    else:
        known.pop(key, None)
    if known != loaded:
        _store(path, known)


def _fresh(found, now):
    """Whether a kept session was used within SESSION_SECONDS."""
    return isinstance(found, dict) and isinstance(found.get("at"), (int, float)) and \
        now - found["at"] < SESSION_SECONDS


def _session_key(entry, environment):
    return f"{entry.key(environment)}:{(environment or {}).get('AGENT_ID', '')}"


def _store(path, known):
    """`known` written to `path` whole, then renamed (a reader never sees half of it),
    its user's alone."""
    import tempfile  # (start-up: 0.9 ms, only to remember what a server said)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, scratch = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".mcp.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(known, f)
        os.replace(scratch, path)
    except OSError:
        pass        # a cache that can't be written: asked again next time


def _load(path):
    try:
        with open(path, encoding="utf-8") as f:
            found = jsonin.loads(f.read(jsonin.MAX_BYTES * 16), max_bytes=jsonin.MAX_BYTES * 16)
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return found if isinstance(found, dict) else {}
