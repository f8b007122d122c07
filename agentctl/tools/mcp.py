"""Tools from MCP servers (agentctl(7), TOOLS): the servers a turn's grants reach are
started (stdio), their tools listed and offered as NAME__TOOL, called, and stopped
when the turn ends. The official `mcp` SDK, an optional extra, is imported here only.

The SDK is asynchronous; the turn is not. The servers live in an event loop of their
own, in a thread, each in one task from start to stop (anyio's scopes must be left
by the task that entered them); the turn's calls are sent to that loop.
"""

import os

from agentctl import jsonin, paths, voice
from agentctl.errors import UsageError
from agentctl.tools.calls import POLL, ToolFailed

START_SECONDS = 30.0


def servers():
    """{NAME: {"command", "args", "env"}} from the configuration, as other MCP clients
    write it ({"mcpServers": {...}}); none when there is no file."""
    path = paths.mcp_config()
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(jsonin.MAX_BYTES + 1)
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: can't read the MCP configuration: {e}") from None
    try:
        config = jsonin.loads(text)
    except jsonin.JSONError as e:
        raise UsageError(f"{path}: not JSON: {e}") from None
    found = config.get("mcpServers") if isinstance(config, dict) else None
    if not isinstance(found, dict):
        raise UsageError(f'{path}: want {{"mcpServers": {{NAME: {{"command": ...}}}}}}')
    for name, spec in found.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("command"), str) or \
                not isinstance(spec.get("args", []), list) or \
                not all(isinstance(a, str) for a in spec.get("args", [])) or \
                not isinstance(spec.get("env", {}), dict) or \
                not isinstance(spec.get("ro", []), list) or \
                not all(isinstance(p, str) and os.path.isabs(p) for p in spec.get("ro", [])) \
                or not isinstance(spec.get("net", False), bool):
            raise UsageError(f"{path}: server {name!r}: want command (text), args (a list "
                             "of texts), env (an object), and for its sandbox ro (a list "
                             "of absolute paths) and net (true or false)")
    return found


def server_names():
    """The names of the servers configured; none when the configuration can't be read
    (a turn says why: a fork need not)."""
    try:
        return list(servers())
    except UsageError:
        return []


def _sdk():
    try:
        import mcp  # noqa: F401
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client
    except ImportError:
        raise UsageError("MCP tools need the mcp extra: pip install 'agentctl[mcp]'") from None
    return ClientSession, StdioServerParameters, stdio_client


class Servers:
    """The MCP servers of one turn."""

    def __init__(self):
        import asyncio
        import threading
        self.asyncio = asyncio
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.sessions, self.stops, self.tasks = {}, {}, {}
        self.groups = []        # the pids cgroups of sandboxed servers (root's)

    def _run(self, coroutine, timeout):
        future = self.asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout)

    def start(self, name, spec, cwd, environment, sandbox=None):
        """Start server `name` (in `sandbox` unless None); its tools: [(name,
        description, input schema)]."""
        ClientSession, Parameters, stdio_client = _sdk()
        ready = self.asyncio.run_coroutine_threadsafe(self._ready_event(), self.loop).result()
        argv = [spec["command"], *spec.get("args", [])]
        if sandbox is not None:
            environment = sandbox.environment
            argv, group = sandbox.wrap(argv, per_call=False, ro=spec.get("ro", []),
                                       net=spec.get("net") is True)
            if group is not None:
                self.groups.append(group)
        params = Parameters(command=argv[0], args=argv[1:],
                            env={**environment, **{k: str(v) for k, v in
                                                   spec.get("env", {}).items()}}, cwd=cwd)

        async def serve():
            stop = self.asyncio.Event()
            self.stops[name] = stop
            try:
                with open(os.devnull, "w") as quiet:
                    async with stdio_client(params, errlog=quiet) as (read, write):
                        async with ClientSession(read, write) as session:
                            await session.initialize()
                            self.sessions[name] = session
                            ready.set()
                            await stop.wait()
            except BaseException as e:     # said by start(), which waits for `ready`
                self.sessions[name] = e
                ready.set()

        self.tasks[name] = self.asyncio.run_coroutine_threadsafe(serve(), self.loop)
        self._run(ready.wait(), START_SECONDS)
        session = self.sessions.get(name)
        if isinstance(session, BaseException) or session is None:
            raise UsageError(f"MCP server {name}: can't start it: "
                             f"{session or 'no answer'}") from None
        listed = self._run(session.list_tools(), START_SECONDS)
        return [(t.name, t.description or "", t.input_schema) for t in listed.tools]

    async def _ready_event(self):
        return self.asyncio.Event()

    def call(self, server, tool, arguments, timeout, poll):
        """The text of a call's result; ToolFailed for an error result or a timeout.
        `poll` is asked every POLL seconds while the call runs: what it raises (a
        KILL) gives the call up and is raised."""
        import concurrent.futures
        import time
        session = self.sessions[server]
        future = self.asyncio.run_coroutine_threadsafe(session.call_tool(tool, arguments),
                                                       self.loop)
        deadline = time.monotonic() + timeout
        while not future.done():
            left = deadline - time.monotonic()
            if left <= 0:
                future.cancel()
                raise ToolFailed(voice.timed_out(timeout))
            concurrent.futures.wait([future], min(POLL, left))
            if not future.done():
                try:
                    poll()
                except BaseException:
                    future.cancel()
                    raise
        try:
            result = future.result()
        except Exception as e:
            raise ToolFailed(f"{type(e).__name__}: {e}") from None
        text = "\n".join(getattr(c, "text", "") or voice.mcp_content(getattr(c, "type", "content"))
                         for c in result.content)
        if getattr(result, "is_error", False):
            raise ToolFailed(text or voice.MCP_FAILED)
        return text

    def close(self):
        for stop in self.stops.values():
            self.loop.call_soon_threadsafe(stop.set)
        for task in self.tasks.values():
            try:
                task.result(10)
            except Exception:
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        for group in self.groups:
            group.remove()
