"""Which external tools exist, and which of them an agent may use: the one answer
that agent-fork and the fork tool (what a grant may name) and a turn's toolset ask.

Precedence on a clash of names: built-in, then program, then MCP; each clash is a
warning. No MCP server is started here: a server's tools are named SERVER__TOOL, so
whether an agent reaches a server is known from its grants alone.
"""

from agentctl.ids import TOOL_NAME_RULE, is_tool_name
from agentctl.ops import grants
from agentctl.text import cut
from agentctl.tools import mcp, programs


class Catalog:
    """The external tools that exist now: the program tools on the tool path and the
    MCP servers configured (tools.mcp.Entry, by name). What can't be read is a warning,
    in `warnings`: it leaves out what is wrong, and nothing else."""

    def __init__(self, warnings=None):
        self.warnings = [] if warnings is None else warnings
        self.programs = programs.discover(self.warnings)
        self.servers = mcp.servers(self.warnings)

    def names(self):
        """What a grant may name: (program tool names, MCP server names)."""
        return list(self.programs), list(self.servers)

    def unmatched(self, patterns):
        """The grant patterns that match no tool that exists now (a warning: a tool
        may be installed later)."""
        return grants.unmatched(patterns, self.programs, self.servers)

    def usable(self, conn, agent_id, taken=()):
        """What the agent may use of it; `taken` are names that win over these (the
        built-in tools)."""
        return Usable(self, grants.Allowance(conn, agent_id), taken)


class Usable:
    """An agent's share of a catalog: the program tools its grants permit, and the
    MCP servers whose tools they could reach."""

    def __init__(self, catalog, allowance, taken):
        self.allowance, self.warnings, self.taken = allowance, catalog.warnings, set(taken)
        self.programs = {}
        for name, program in catalog.programs.items():
            if not allowance.permits(name):
                continue
            if name in self.taken:
                self.warnings.append(f"tool {name} ({program.path}): a built-in tool has "
                                     "this name and wins")
                continue
            self.programs[name] = program
        self.servers = {name: spec for name, spec in catalog.servers.items()
                        if allowance.reaches(name)}

    def mcp_name(self, server, tool):
        """The name an MCP server's tool is offered under, or None (with a warning
        where the tool is lost to a clash or a name the providers refuse)."""
        name = f"{server}__{tool}"
        if not is_tool_name(name):
            self.warnings.append(f"MCP tool {cut(name, 80)!r}: a tool's name is "
                                 f"{TOOL_NAME_RULE}: skipped")
        elif not self.allowance.permits(name, server):
            return None
        elif name in self.taken or name in self.programs:
            self.warnings.append(f"MCP tool {name}: a "
                                 f"{'built-in' if name in self.taken else 'program'} "
                                 "tool has this name and wins")
        else:
            return name
        return None
