"""External tools (agentctl(7), TOOLS): programs on the tool path (programs.py, run by
calls.py), MCP servers (mcp.py), which exist and which an agent may use (catalog.py),
and what the tools shipped with agentctl share (confine.py)."""
