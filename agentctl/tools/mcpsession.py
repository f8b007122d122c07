"""The MCP servers a turn talks to, through the official `mcp` SDK (an optional extra,
imported here only): each started when the turn first needs it, a stdio one in its
agent's sandbox, and stopped when the turn ends.

The SDK is asynchronous; the turn is not. The servers live in an event loop of their
own, in a thread, each in one task from start to stop (anyio's scopes must be left by
the task that entered them); the turn's requests are sent to that loop. The SDK
negotiates the protocol: the stateless revision (2026-07-28) where the server speaks
it, else the initialize handshake of the revisions before.

A server that can't be started, or dies, is one line that names it, says why, and
ends with the last lines of its standard error, which is kept whole in a file
(paths.mcp_log); it fails its own tools, not the turn.
"""

import os
import threading
import time

from agentctl import __version__, keys, paths, voice
from agentctl.tools import launchers, mcp, mcpreasons
from agentctl.tools.calls import POLL, ToolFailed
from agentctl.tools.handles import Stderr
from agentctl.tools.sandbox import Unavailable

START_SECONDS = 30.0
LIST_SECONDS = 30.0
MAX_IMAGE = 5 << 20     # base64 characters of an image passed on (the providers' limits)


class Failed(Exception):
    """A server could not be started or reached: the one-line reason names it."""


def agentctl():
    """Who the client is, said to each server (initialize, or each request's _meta)."""
    from mcp.types import Implementation  # (an optional extra: mcp)
    return Implementation(name="agentctl", version=__version__)


def _sdk():
    try:
        from mcp import StdioServerParameters  # (an optional extra: mcp)
        from mcp.client.client import Client  # (an optional extra: mcp)
    except ImportError:
        raise Failed("MCP tools need the mcp extra: from agentctl's checkout, "
                     "make install EXTRAS=mcp (or pip install '.[mcp]')") from None
    return Client, StdioServerParameters


class Servers:
    """The MCP servers of one turn. `sandbox()` gives the sandbox a stdio server runs
    in (None: an unconfined agent's), made at the first start that needs it. `warn`
    says a server's failure during a call, once a run (agent-run's standard error):
    the tools of a server listed on an earlier turn are offered without starting it,
    so nobody but the model would see it fail."""

    def __init__(self, cwd, environment, sandbox=lambda: None, warn=None):
        self.cwd, self.environment, self.sandbox = cwd, environment, sandbox
        self.warn, self.said = warn, set()
        self.took = {}
        self.offline = {}           # launchers kept to their cache: their registry's hosts
        self.loop = None        # made with the first server: a turn that starts none
        self.clients, self.stops, self.tasks, self.failed = {}, {}, {}, {}
        self.changed = set()        # servers that said their list of tools changed
        self.entries = {}
        self.refused = {}           # servers that refused a request: (status, what to do)
        self.groups = []            # the sandboxes of servers (tools/sandbox.Prepared)

    def _start_loop(self):
        """The event loop the servers live in, in a thread of its own (asyncio and the
        SDK are imported only for a turn that starts a server)."""
        if self.loop is None:
            import asyncio  # (start-up: 21 ms, only for a turn that starts a server)
            self.asyncio = asyncio
            self.loop = asyncio.new_event_loop()
            self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
            self.thread.start()

    def _run(self, coroutine, timeout):
        future = self.asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout)

    # -- starting ----------------------------------------------------------------------------

    def client(self, entry):
        """The running client of `entry`, started now if it is not yet; Failed when it
        can't be (once a turn: a server that failed is not started again)."""
        if entry.name in self.failed:
            raise Failed(self.failed[entry.name])
        if entry.name in self.clients:
            return self.clients[entry.name]
        self.entries[entry.name] = entry
        self._start_loop()
        log = paths.mcp_log(entry.name)
        try:
            transport = self._transport(entry, log)
            client = self._start(entry, transport)
        except Failed as e:
            self.failed[entry.name] = str(e)
            raise
        except Exception as e:      # anything the SDK or a transport says
            self.failed[entry.name] = self._why(entry, e, log)
            raise Failed(self.failed[entry.name]) from None
        self.clients[entry.name] = client
        return client

    def _transport(self, entry, log):
        """The SDK transport that reaches `entry` (for stdio: a process, its standard
        error into `log`)."""
        spec, environment = entry.spec, self.environment
        try:
            filled = entry.filled(environment)
        except ValueError as e:
            raise Failed(f"MCP server {entry.name}: {e}") from None
        if entry.transport == "sse":
            from mcp.client.sse import sse_client  # (an optional extra: mcp)
            return sse_client(filled["url"], headers=filled["headers"])
        if entry.transport == "http":
            from mcp.client.streamable_http import streamable_http_client  # (an optional extra: mcp)
            from mcp.shared._httpx_utils import create_mcp_http_client  # (an optional extra: mcp)
            http = create_mcp_http_client(filled["headers"])
            refused = self.refused

            async def seen(response):       # the SDK keeps an HTTP status to itself
                if response.status_code in (401, 403):
                    refused[entry.name] = (response.status_code,
                                           response.headers.get("www-authenticate", ""))
            http.event_hooks["response"].append(seen)
            return streamable_http_client(filled["url"], http_client=http)
        _, Parameters = _sdk()
        argv, env = filled["argv"], {**environment, **filled["env"]}
        sandbox = self.sandbox()
        if sandbox is not None:
            launched, hosts = launchers.given(argv[0], environment, paths.home())
            net = mcp.hosts(spec) if "net" in spec else hosts
            if launched and not sandbox.reaches(hosts, net):
                launched.update(launchers.offline(argv[0]))
                self.offline[entry.name] = hosts
            try:
                prepared = sandbox.wrap(        # (its status at the end of its stderr)
                    argv, status_fd=Stderr("-"), per_call=False, ro=spec.get("ro", []),
                    who=entry.name, net=net,
                    own=(paths.mcp_own(entry.name), launchers.CACHE) if launched else None)
            except Unavailable as e:
                raise Failed(f"MCP server {entry.name}: not started: {e}") from None
            self.groups.append(prepared)        # (closed when the servers are)
            argv = prepared.launcher()
            env = {**sandbox.environment, **prepared.env, **launched, **filled["env"]}
        os.makedirs(os.path.dirname(log), exist_ok=True)
        errlog = open(log, "w", encoding="utf-8", errors="replace")
        from mcp.client.stdio import stdio_client  # (an optional extra: mcp)
        return _Closing(stdio_client(Parameters(command=argv[0], args=argv[1:], env=env,
                                                cwd=spec.get("cwd") or self.cwd),
                                     errlog=errlog), errlog)

    def _start(self, entry, transport):
        Client, _ = _sdk()
        ready = self.asyncio.run_coroutine_threadsafe(self._event(), self.loop).result()
        changed = self.changed
        box = {}

        async def note(message):
            """A change said on the connection, as servers of the protocols before
            2026-07-28 say it."""
            root = getattr(message, "root", message)
            if type(root).__name__ == "ToolListChangedNotification":
                changed.add(entry.name)

        async def listen(client, acked):
            """A change said on a subscriptions/listen stream, the only way a server of
            2026-07-28 says it (open before the first call: a change is not replayed)."""
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    acked.set()
                    async for _ in subscription:
                        changed.add(entry.name)
            except Exception:   # an earlier protocol (its changes come to note()), a refusal
                pass
            finally:
                acked.set()

        async def serve():
            stop = self.asyncio.Event()
            self.stops[entry.name] = stop
            try:
                async with Client(transport, mode="auto", message_handler=note,
                                  cache=None, client_info=agentctl()) as client:
                    box["client"] = client
                    acked = self.asyncio.Event()
                    listening = self.asyncio.ensure_future(listen(client, acked))
                    await acked.wait()
                    ready.set()
                    await stop.wait()
                    listening.cancel()
                    await self.asyncio.gather(listening, return_exceptions=True)
            except BaseException as e:     # said by the caller, which waits for `ready`
                box["error"] = e
                ready.set()

        self.tasks[entry.name] = self.asyncio.run_coroutine_threadsafe(serve(), self.loop)
        try:
            self._run(ready.wait(), START_SECONDS)
        except Exception:
            raise Failed(f"MCP server {entry.name}: no answer in {START_SECONDS:g} s") from None
        if "error" in box:
            raise box["error"]
        return box["client"]

    async def _event(self):
        return self.asyncio.Event()

    def _why(self, entry, error, log):
        """One line: the server, the reason, the last lines of its standard error."""
        reason = mcpreasons.reason(mcpreasons.Refused(*self.refused[entry.name])
                                   if entry.name in self.refused else error, entry)
        status = mcpreasons.exit_status(log) if entry.transport == "stdio" else None
        if status is not None and reason.startswith(mcpreasons.EXITED_EARLY):
            reason = f"it exited with status {status} before it answered"
        line = f"MCP server {entry.name}: can't start it: {reason}"
        if entry.transport == "stdio":
            tail = mcpreasons.tail(log)
            line += f"; its stderr ({log}): {' | '.join(tail)}" if tail else \
                f" (it wrote nothing on stderr: {log})"
            if entry.name in self.offline:
                wanted = ", ".join(f'"{h}"' for h in self.offline[entry.name])
                line += (f"; its \"net\" leaves its registry out, so it ran from its cache "
                         f"alone: {wanted} in its \"net\" would let it download")
            hidden = mcpreasons.hidden(tail) if self.sandbox() is not None else None
            if hidden is not None:
                line += (f"; its sandbox shows it none of {hidden}: \"ro\": [\"{hidden}\"] "
                         "in its entry would")
        for secret in entry.secrets(self.environment):
            line = line.replace(secret, "***")
        return keys.redact(line)

    # -- what it offers, and calls ---------------------------------------------------------

    def tools(self, entry):
        """What `entry` offers, listed now (and kept for the next turns); the seconds
        its first listing this run took, with its start, in took[name]."""
        started = time.monotonic()
        try:
            client = self.client(entry)
            try:
                listed = self._run(client.list_tools(), LIST_SECONDS)
            except Exception as e:
                raise Failed(f"MCP server {entry.name}: can't list its tools: "
                             f"{mcpreasons.reason(e, entry)}") from None
        finally:
            self.took.setdefault(entry.name, round(time.monotonic() - started, 2))
        found = [(t.name, t.description or "", t.input_schema) for t in listed.tools]
        mcp.remember(entry, found, self.environment)
        return found

    def call(self, entry, tool, arguments, timeout, poll):
        """(text, parts) of a call's result: parts are what is not text (images), as
        voice.media renders them. ToolFailed for an error result, a timeout, a server
        that can't be started, or a tool it no longer has (its list is taken again for
        the next turn). `poll` is asked every POLL seconds while the call runs: what it
        raises (a KILL) gives the call up and is raised."""
        import concurrent.futures  # (start-up: 3 ms, only for an MCP tool's call)
        try:
            client = self.client(entry)
        except Failed as e:
            raise self._fails(str(e)) from None
        future = self.asyncio.run_coroutine_threadsafe(client.call_tool(tool, arguments),
                                                       self.loop)
        deadline = time.monotonic() + timeout
        while not future.done():
            left = deadline - time.monotonic()
            if left <= 0:
                future.cancel()
                raise self._fails(f"MCP server {entry.name}: {tool}: no result in "
                                  f"{timeout:g} s", voice.timed_out(timeout))
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
            reason = mcpreasons.reason(e, entry)
            if "unknown tool" in reason.lower() and tool not in self._names(entry):
                raise self._fails(voice.mcp_tool_gone(entry.name, tool)) from None
            raise self._fails(f"MCP server {entry.name}: {tool}: {reason}") from None
        text, parts = content(result.content)
        if getattr(result, "is_error", False):
            if "unknown tool" in text.lower() and tool not in self._names(entry):
                raise self._fails(voice.mcp_tool_gone(entry.name, tool))
            raise ToolFailed(text or voice.MCP_FAILED)     # the tool's own error: its result
        return text, parts

    def _fails(self, line, text=None):
        """The ToolFailed of a server's failure (`text` for the model, else `line`),
        `line` said once a run."""
        if self.warn is not None and line not in self.said:
            self.said.add(line)
            self.warn(keys.redact(line))
        return ToolFailed(text or line)

    def _names(self, entry):
        """The names of the tools `entry` offers now (listed again, and kept)."""
        try:
            return [t[0] for t in self.tools(entry)]
        except Failed:
            return []

    def close(self):
        """List again what said its list changed, then stop every server."""
        if self.loop is None:
            return
        for name in list(self.changed):
            if name in self.clients:
                try:
                    self.tools(self.entries[name])
                except Failed:
                    pass
        for stop in self.stops.values():
            self.loop.call_soon_threadsafe(stop.set)
        for task in self.tasks.values():
            try:
                task.result(10)
            except Exception:
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        for prepared in self.groups:
            prepared.close()


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


def content(parts):
    """(text, media) of an MCP result's content: text, a text resource and a link as
    text; an image (or an image resource) up to MAX_IMAGE as a part the provider is given
    as an image; anything else (audio, a larger image, a binary resource) as a note of
    what it was."""
    texts, media = [], []
    for c in parts:
        kind = getattr(c, "type", "content")
        if kind == "text":
            texts.append(c.text)
        elif kind == "image" and len(c.data) <= MAX_IMAGE:
            media.append({"type": "image", "mime": c.mime_type, "data": c.data})
            texts.append(voice.media_note("image", c.mime_type, c.data))
        elif kind == "resource":
            res = c.resource
            if getattr(res, "text", None) is not None:
                texts.append(voice.mcp_resource(str(res.uri), res.text))
            elif (getattr(res, "mime_type", None) or "").startswith("image/") \
                    and len(res.blob) <= MAX_IMAGE:
                media.append({"type": "image", "mime": res.mime_type, "data": res.blob})
                texts.append(voice.media_note("image", res.mime_type, res.blob))
            else:
                texts.append(voice.media_note("resource " + str(res.uri),
                                              getattr(res, "mime_type", None),
                                              getattr(res, "blob", "")))
        elif kind == "resource_link":
            texts.append(voice.mcp_link(str(c.uri), getattr(c, "name", None)))
        else:
            texts.append(voice.media_note(kind, getattr(c, "mime_type", None),
                                          getattr(c, "data", "")))
    return "\n".join(texts), media
