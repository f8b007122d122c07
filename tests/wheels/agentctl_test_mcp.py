"""agentctl-test-mcp: the package that tests/registries.py builds into a wheel and serves
from its Python package index, for uvx to install as a user's configuration names it:
{"command": "uvx", "args": ["agentctl-test-mcp"]}. Its console script serves two tools
over stdio with the official MCP SDK, which comes from the same index."""

import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("agentctl-test-mcp")


@server.tool(description="Add two numbers.")
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(description="Say which Python runs the server, and from where.")
def where() -> str:
    return f"python={sys.executable} module={os.path.abspath(__file__)}"


def main():
    print("agentctl-test-mcp: serving over stdio", file=sys.stderr, flush=True)
    server.run()


if __name__ == "__main__":
    main()
