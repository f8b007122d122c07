"""External tools (agentctl(7), TOOLS): programs on the tool path (programs.py, run by
calls.py), MCP servers (mcp.py; their sessions mcpsession.py, why one failed
mcpreasons.py, package launchers launchers.py), which exist and which an agent may use
(catalog.py), and what the tools shipped with agentctl share (confine.py). Every call
runs in the sandbox (agentctl(7), SANDBOX): its policy (sandbox.py), bubblewrap's
mechanics (bwrap.py), whom a call runs as and its limits (runas.py), the covers of
protected paths (cover.py), the handles a call binds (handles.py), the syscall
filter (seccomp.py), the network by host through the egress proxy (egress.py,
netns.py, netwatch.py), and the proxy through which a tool's agentctl programs
reach the database (proxy.py, forward.py)."""
