"""Grants (agentctl(7), TOOLS): which external tools an agent may use, and which of
its calls need approval. Patterns are shell globs over tool names (read_file,
*_file, github__*, *). A tool is offered only if it matches the patterns of the
agent and of every ancestor along forked_from (init holds none and limits
nothing), so grants only narrow down the tree; a fork that asks for a tool its
parent can't use is refused.

A pattern reaches an MCP server's tools (SERVER__TOOL) only when it names the
server (its text before the first wildcard starts with SERVER__), or is `*`, which
grants everything: `*_file` means program tools only, whatever servers are
configured later."""

import fnmatch
import re

from agentctl import settings
from agentctl.clock import parse_duration
from agentctl.errors import Refused, UsageError
from agentctl.ids import INIT_ID
from agentctl.store import registry

PATTERN = r"[A-Za-z0-9_*?\[\]!-]{1,128}"     # (compiled at its first use)
# The built-in tools (turn/builtin.py, which a test holds to this): every agent has
# them, whatever its grants; only --ask reaches them.
BUILT_IN = frozenset({"answer", "ask", "check_mail", "diff", "doc_get", "doc_ls", "doc_put",
                      "doc_rm", "exit", "fork", "kill", "merge", "ps", "read_mail", "send",
                      "sleep", "wait"})


def check(patterns, named, deadlines=False):
    """Patterns as given (--allow, --ask), checked, as stored; None when none was given.
    With `deadlines` (--ask) a pattern may end in :DURATION, the deadline of its
    requests (tool names have no colon). `named(pattern)`: how an error names it."""
    if not patterns:
        return None
    for p in patterns:
        glob, _, seconds = p.partition(":") if deadlines else (p, "", "")
        if not re.fullmatch(PATTERN, glob):
            raise UsageError(f"{named(p)}: a pattern is a glob over tool names "
                             "(letters, digits, _ -, and * ? [ ])")
        if seconds:
            parse_duration(seconds)         # a usage error when it is none
    return settings.listing(patterns)


def _split(pattern):
    glob, _, seconds = pattern.partition(":")
    return glob, parse_duration(seconds) if seconds else None


def matches(name, pats):
    return any(fnmatch.fnmatchcase(name, p) for p in pats)


class Allowance:
    """An agent's grants along its lineage, read once for a turn or a fork."""

    def __init__(self, conn, agent_id):
        line = [a for a in registry.lineage(conn, agent_id) if a["id"] != INIT_ID]
        self.operator = agent_id == INIT_ID
        self.allow = [settings.listed(a["allow"]) for a in line]
        self.ask = [_split(p) for a in line for p in settings.listed(a["ask"])]

    def permits(self, name, server=None):
        """Whether an external tool may be offered: every pattern list of the
        lineage matches it (the operator is limited by nothing); the tool of an MCP
        `server` only by patterns that name that server."""
        if server is None:
            return self.operator or all(matches(name, pats) for pats in self.allow)
        return self.operator or all(
            any(names_server(p, server) and fnmatch.fnmatchcase(name, p) for p in pats)
            for pats in self.allow)

    def reaches(self, server):
        """Whether some tool of MCP server `server` could be offered (every pattern
        list of the lineage has a pattern that names it)."""
        return self.operator or all(any(names_server(p, server) for p in pats)
                                    for pats in self.allow)

    def needs_approval(self, name):
        return any(fnmatch.fnmatchcase(name, glob) for glob, _ in self.ask)

    def ask_seconds(self, name):
        """The deadline its --ask grant gives a call of `name` (None: the default)."""
        return next((s for glob, s in self.ask if s and fnmatch.fnmatchcase(name, glob)), None)


def _literal(pattern):
    return re.split(r"[*?\[]", pattern, 1)[0]


def names_server(pattern, server):
    """Whether `pattern` may reach the tools of MCP server `server`."""
    return pattern == "*" or _literal(pattern).startswith(f"{server}__")


def unmatched(given, programs, servers):
    """The patterns of `given` that match no external tool that exists now: no program
    tool, and no configured MCP server they name (tools may be installed later, so
    this is a warning, not an error)."""
    return [p for p in given
            if not any(fnmatch.fnmatchcase(n, p.partition(":")[0]) for n in programs)
            and not any(names_server(p.partition(":")[0], s) for s in servers)]


def check_fork(conn, parent, allow, existing, servers=()):
    """Refuse a child's --allow that matches an existing program tool its parent
    can't use, or that names an MCP server (SERVER__...) none of whose tools its parent
    can use: asking for more is an error, not a silent no-op. (A server's tools are
    not listed here: that would start it.)"""
    if not allow:
        return
    mine = Allowance(conn, parent["id"])
    for pattern in settings.listed(allow):
        for server in servers:
            if _literal(pattern).startswith(f"{server}__") and not mine.reaches(server):
                raise Refused(f"--allow {pattern}: {registry.label(parent)} can't use the "
                              f"tools of MCP server {server}, so it can't grant them")
        denied = [name for name in existing
                  if fnmatch.fnmatchcase(name, pattern) and not mine.permits(name)]
        if denied:
            raise Refused(f"--allow {pattern}: {registry.label(parent)} can't use "
                          f"{', '.join(sorted(denied)[:3])}{', ...' if len(denied) > 3 else ''}"
                          ", so it can't grant it")
