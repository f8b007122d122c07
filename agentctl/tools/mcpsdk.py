"""MCP through the official `mcp` SDK (an optional extra, imported here only), for what
mcpwire.py does not speak: the older SSE transport, and a server of the 2026-07-28
revision alone (the SDK negotiates it: server/discover, else the handshake). Its
sessions answer as mcpwire's do (list_tools, call_tool, close), with MCP's dicts.

The SDK is asynchronous; the turn is not. Its servers live in an event loop of their
own, in a thread, each in one task from start to stop (anyio's scopes must be left by
the task that entered them); the turn's requests are sent to that loop."""

import threading
import time

from agentctl import __version__
from agentctl.tools import mcpwire

_loop = None
_lock = threading.Lock()


class Missing(Exception):
    """The SDK is not installed: the message says how to install it."""


def _sdk():
    try:
        from mcp import StdioServerParameters  # (an optional extra: mcp)
        from mcp.client.client import Client  # (an optional extra: mcp)
    except ImportError:
        raise Missing("this server needs the mcp extra: from agentctl's checkout, "
                      "make install EXTRAS=mcp (or pip install '.[mcp]')") from None
    return Client, StdioServerParameters


def _event_loop():
    """The event loop the SDK's servers live in, in a thread of its own (made once)."""
    global _loop
    with _lock:
        if _loop is None:
            import asyncio  # (start-up: 21 ms, only for a server the SDK speaks to)
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, daemon=True).start()
    return _loop


def stdio(argv, env, cwd, log, changed):
    """A session with the process `argv` (mcpwire.Stdio's arguments), its standard error
    added to the file `log`."""
    _, Parameters = _sdk()
    from mcp.client.stdio import stdio_client  # (an optional extra: mcp)

    def transport():
        errlog = open(log, "a", encoding="utf-8", errors="replace")
        return _Closing(stdio_client(Parameters(command=argv[0], args=argv[1:], env=env,
                                                cwd=cwd), errlog=errlog), errlog)
    return Sdk(transport, changed)


def sse(url, headers, changed):
    """A session with the SSE server at `url`."""
    _sdk()
    from mcp.client.sse import sse_client  # (an optional extra: mcp)
    return Sdk(lambda: sse_client(url, headers=headers), changed)


def http(url, headers, changed):
    """A session with the Streamable HTTP server at `url` (one of 2026-07-28 alone); an
    HTTP refusal (401, 403), which the SDK keeps to itself, in its `refused`."""
    _sdk()
    from mcp.client.streamable_http import streamable_http_client  # (an optional extra: mcp)
    from mcp.shared._httpx_utils import create_mcp_http_client  # (an optional extra: mcp)

    def transport():
        client = create_mcp_http_client(headers)

        async def seen(response):
            if response.status_code in (401, 403):
                session.refused = mcpwire.Status(response.status_code,
                                                 response.headers.get("www-authenticate", ""))
        client.event_hooks["response"].append(seen)
        return streamable_http_client(url, http_client=client)
    session = Sdk(transport, changed)
    return session


class Sdk:
    """One server's session through the SDK, started by handshake()."""

    def __init__(self, transport, changed):
        self.transport, self.changed = transport, changed
        self.loop = _event_loop()
        self.client = self.stop = self.task = self.refused = None

    def _run(self, coroutine, timeout):
        import asyncio  # (start-up: 21 ms, only for a server the SDK speaks to)
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def handshake(self, timeout):
        import asyncio  # (start-up: 21 ms, only for a server the SDK speaks to)
        from mcp.types import Implementation  # (an optional extra: mcp)
        Client, _ = _sdk()
        box, changed = {}, self.changed

        async def note(message):
            """A change said on the connection, as the revisions before 2026-07-28 say it."""
            root = getattr(message, "root", message)
            if type(root).__name__ == "ToolListChangedNotification":
                changed()

        async def listen(client, acked):
            """A change said on a subscriptions/listen stream, the only way a server of
            2026-07-28 says it (open before the first call: a change is not replayed)."""
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    acked.set()
                    async for _ in subscription:
                        changed()
            except Exception:   # an earlier revision (its changes come to note()), a refusal
                pass
            finally:
                acked.set()

        async def serve():
            self.stop, ready = asyncio.Event(), box["ready"]
            try:
                async with Client(self.transport(), mode="auto", message_handler=note,
                                  cache=None, client_info=Implementation(
                                      name="agentctl", version=__version__)) as client:
                    box["client"] = client
                    acked = asyncio.Event()
                    listening = asyncio.ensure_future(listen(client, acked))
                    await acked.wait()
                    ready.set()
                    await self.stop.wait()
                    listening.cancel()
                    await asyncio.gather(listening, return_exceptions=True)
            except BaseException as e:     # said by the caller, which waits for `ready`
                box["error"] = e
                ready.set()

        async def event():
            return asyncio.Event()
        box["ready"] = self._run(event(), timeout)
        self.task = asyncio.run_coroutine_threadsafe(serve(), self.loop)
        try:
            self._run(box["ready"].wait(), timeout)
        except Exception:
            raise TimeoutError(f"no answer in {timeout:g} s") from None
        if "error" in box:
            raise self.refused or box["error"]
        self.client = box["client"]

    def list_tools(self, timeout):
        listed = self._run(self.client.list_tools(), timeout)
        return [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                for t in listed.tools]

    def call_tool(self, name, arguments, timeout, poll=None, poll_seconds=0.5, task=None):
        import asyncio  # (start-up: 21 ms, only for a server the SDK speaks to)
        import concurrent.futures  # (start-up: 3 ms, only for a server the SDK speaks to)
        future = asyncio.run_coroutine_threadsafe(self.client.call_tool(name, arguments),
                                                  self.loop)
        deadline = time.monotonic() + timeout
        while not future.done():
            left = deadline - time.monotonic()
            if left <= 0:
                future.cancel()
                raise TimeoutError(f"no answer in {timeout:g} s")
            concurrent.futures.wait([future], min(poll_seconds, left))
            if not future.done() and poll is not None:
                try:
                    poll()
                except BaseException:
                    future.cancel()
                    raise
        return future.result().model_dump(mode="json", by_alias=True, exclude_none=True)

    def end(self):
        pass

    def tasks(self):
        return False        # (made none: the SDK's calls wait for their result)

    def close(self, keep=False):
        if self.stop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)
        if self.task is not None:
            try:
                self.task.result(10)
            except Exception:
                pass


class _Closing:
    """A transport that closes a file (the server's stderr log) after it."""

    def __init__(self, transport, file):
        self.transport, self.file = transport, file

    async def __aenter__(self):
        return await self.transport.__aenter__()

    async def __aexit__(self, *exc):
        try:
            return await self.transport.__aexit__(*exc)
        finally:
            self.file.close()
