"""A real MCP server, written with the official SDK, for the tests: started by
agent-run through the same configuration a user writes (stdio)."""

import os
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")


@server.tool(description="Add two numbers.")
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(description="Say who and where the server is.")
def whoami() -> str:
    return f"agent={os.environ.get('AGENT_ID')} cwd={os.getcwd()} " \
           f"key={'OPENAI_API_KEY' in os.environ}"


@server.tool(description="Fail on purpose.")
def broken() -> str:
    raise ValueError("it broke")


@server.tool(description="Sleep, then say so.")
def nap(seconds: float) -> str:
    time.sleep(seconds)
    return "rested"


@server.tool(name="a_tool_whose_name_is_far_too_long_for_any_provider_to_take_it",
             description="Too long a name once prefixed.")
def long_name() -> str:
    return "never offered"


if __name__ == "__main__":
    if os.environ.get("MCP_STARTS"):         # counts the starts, for the tests
        with open(os.environ["MCP_STARTS"], "a") as f:
            f.write("start\n")
    server.run()
