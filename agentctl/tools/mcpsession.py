"""The MCP servers a turn talks to: each started when the turn first needs it, a stdio
one in its agent's sandbox, and stopped when the turn ends. agentctl speaks MCP itself
(mcpwire.py: the handshake's revisions, over stdio and Streamable HTTP); the official
SDK (mcpsdk.py, an optional extra) only for the SSE transport and a server of the
2026-07-28 revision alone. A Streamable HTTP server's session is kept for the agent's
next turn (where the server gives one), which resumes it without a new handshake.

A server that can't be started, or dies, is one line that names it, says why, and
ends with the last lines of its standard error, which is kept whole in a file
(paths.mcp_log); it fails its own tools, not the turn.
"""

import json
import os
import time

from agentctl import keys, paths, voice
from agentctl.tools import launchers, mcp, mcphttp, mcpreasons, mcptasks, mcpwire
from agentctl.tools.calls import POLL, ToolFailed
from agentctl.tools.handles import Stderr
from agentctl.tools.sandbox import Unavailable

START_SECONDS = 30.0
LIST_SECONDS = 30.0
MAX_IMAGE = 5 << 20     # base64 characters of an image passed on (the providers' limits)
MAX_QUESTION = 32 << 10     # characters of a server's question (its message and form)


class Failed(Exception):
    """A server could not be started or reached: the one-line reason names it."""


class Elicited(Exception):
    """During a call, the server asked a question (elicitation/create: `params`) that
    the call had no answer for: it was told "cancel", and the call is to be made again
    once the question is answered (ops/elicitation.py)."""

    def __init__(self, server, params):
        super().__init__(f"MCP server {server} asks a question")
        self.server, self.params = server, params


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
        self.sessions, self.failed = {}, {}
        self.changed = set()        # servers that said their list of tools changed
        self.entries = {}
        self.groups = []            # the sandboxes of servers (tools/sandbox.Prepared)
        self.answering = None       # the call's answers to give, the questions asked
        self.listed = {}            # server -> its tools as it listed them this run

    # -- starting ----------------------------------------------------------------------------

    def client(self, entry):
        """The running session of `entry`, started now if it is not yet; Failed when it
        can't be (once a turn: a server that failed is not started again)."""
        if entry.name in self.failed:
            raise Failed(self.failed[entry.name])
        if entry.name in self.sessions:
            return self.sessions[entry.name]
        self.entries[entry.name] = entry
        log = paths.mcp_log(entry.name)
        try:
            session = self._open(entry, log)
        except Failed as e:
            self.failed[entry.name] = str(e)
            raise
        except Exception as e:      # anything a transport or the server says
            self.failed[entry.name] = self._why(entry, e, log)
            raise Failed(self.failed[entry.name]) from None
        self.sessions[entry.name] = session
        return session

    def _open(self, entry, log):
        """A session with `entry`, its handshake made (for stdio: a process, its
        standard error into `log`)."""
        try:
            filled = entry.filled(self.environment)
        except ValueError as e:
            raise Failed(f"MCP server {entry.name}: {e}") from None
        changed = lambda: self.changed.add(entry.name)  # noqa: E731
        if entry.transport == "sse":
            return self._sdk(entry, lambda sdk: sdk.sse(filled["url"], filled["headers"],
                                                        changed))
        if entry.transport == "http":
            session = mcphttp.Http(filled["url"], filled["headers"], changed,
                                   kept=mcp.session(entry, self.environment))
            session.elicit = self._elicit
            try:
                session.handshake(START_SECONDS)
                return session
            except mcpwire.Modern:
                return self._sdk(entry, lambda sdk: sdk.http(filled["url"],
                                                             filled["headers"], changed))
        argv, env, cwd = self._stdio(entry, filled)
        os.makedirs(os.path.dirname(log), exist_ok=True)
        with open(log, "w", encoding="utf-8", errors="replace") as errlog:
            session = mcpwire.Stdio(argv, env, cwd, errlog, changed)
        session.elicit = self._elicit
        try:
            session.handshake(START_SECONDS)
            return session
        except mcpwire.Modern:
            session.close()
        return self._sdk(entry, lambda sdk: sdk.stdio(argv, env, cwd, log, changed))

    def _sdk(self, entry, made):
        """A session through the SDK, `made(mcpsdk)`, its handshake made."""
        from agentctl.tools import mcpsdk  # (start-up: 2 ms, only for a server the SDK speaks to)
        try:
            session = made(mcpsdk)
        except mcpsdk.Missing as e:
            raise Failed(f"MCP server {entry.name}: {e}") from None
        try:
            session.handshake(START_SECONDS)
        except BaseException:
            session.close()
            raise
        return session

    def _stdio(self, entry, filled):
        """(argv, env, cwd) of a stdio server: in its agent's sandbox, unless unconfined."""
        spec, environment = entry.spec, self.environment
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
        return argv, env, spec.get("cwd") or self.cwd

    def _why(self, entry, error, log):
        """One line: the server, the reason, the last lines of its standard error."""
        reason = mcpreasons.reason(error, entry)
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
            session = self.client(entry)
            try:
                listed = session.list_tools(LIST_SECONDS)
            except Exception as e:
                raise Failed(f"MCP server {entry.name}: can't list its tools: "
                             f"{mcpreasons.reason(e, entry)}") from None
        finally:
            self.took.setdefault(entry.name, round(time.monotonic() - started, 2))
        self.listed[entry.name] = listed
        found = [(t["name"], _text(t.get("description")), t.get("inputSchema") or {})
                 for t in listed]
        mcp.remember(entry, found, self.environment)
        return found

    def call(self, entry, tool, arguments, timeout, poll, answers=()):
        """(text, parts) of a call's result: parts are what is not text (images), as
        voice.media renders them. ToolFailed for an error result, a timeout, a server
        that can't be started, or a tool it no longer has (its list is taken again for
        the next turn). `poll` is asked every POLL seconds while the call runs: what it
        raises (a KILL) gives the call up and is raised. `answers`, to the server's
        questions (elicitation/create) in the order it asks them; one it asks beyond
        them is Elicited."""
        try:
            session = self.client(entry)
        except Failed as e:
            raise self._fails(str(e)) from None
        task = mcptasks.TTL_SECONDS if self._tasks(entry, session, tool) else None
        self.answering = {"answers": list(answers), "asked": []}
        try:
            result = session.call_tool(tool, arguments, timeout, poll, POLL, task)
            if task is not None and isinstance(result.get("task"), dict):
                result = mcptasks.awaited(session, entry.name, result["task"], timeout, poll,
                                          POLL, keep=isinstance(session, mcphttp.Http))
        except BaseException as e:
            self._asked(entry)
            raise self._failed(entry, tool, e, timeout) from None
        self._asked(entry)
        return self._result(entry, tool, result)

    def resume(self, entry, tool, stored, timeout, poll):
        """(text, parts) of the call whose task `stored` (mcptasks.Waits.stored's) an
        earlier run left: polled again at once (Waits again while it runs)."""
        try:
            session = self.client(entry)
        except Failed as e:
            raise self._fails(str(e)) from None
        try:
            result = mcptasks.awaited(session, entry.name, stored, timeout, poll, POLL,
                                      keep=isinstance(session, mcphttp.Http), resumed=True)
        except BaseException as e:
            raise self._failed(entry, tool, e, timeout) from None
        return self._result(entry, tool, result)

    def _tasks(self, entry, session, tool):
        """Whether the call is to be made a task: the server makes tasks of calls, and
        its listing (taken now, when this run has none) says the tool may be one."""
        if not session.tasks():
            return False
        if entry.name not in self.listed:
            try:
                self.tools(entry)
            except Failed:
                return False
        return mcptasks.support(self.listed.get(entry.name, ()), tool)

    def _failed(self, entry, tool, error, timeout):
        """What a call's failure `error` becomes: itself when it is not the server's
        (a KILL, a task kept), else the ToolFailed said once a run."""
        if isinstance(error, mcptasks.Waits) or not isinstance(error, Exception):
            return error
        if isinstance(error, TimeoutError):
            return self._fails(f"MCP server {entry.name}: {tool}: no result in {timeout:g} s",
                               voice.timed_out(timeout))
        reason = mcpreasons.reason(error, entry)
        if "unknown tool" in reason.lower() and tool not in self._names(entry):
            return self._fails(voice.mcp_tool_gone(entry.name, tool))
        return self._fails(f"MCP server {entry.name}: {tool}: {reason}")

    def _result(self, entry, tool, result):
        text, parts = content(result.get("content"))
        if result.get("isError"):
            if "unknown tool" in text.lower() and tool not in self._names(entry):
                raise self._fails(voice.mcp_tool_gone(entry.name, tool))
            raise ToolFailed(text or voice.MCP_FAILED)     # the tool's own error: its result
        return text, parts

    def _elicit(self, params):
        """The answer to a server's question: the call's next, else "cancel" and the
        question kept (Elicited, once the call has ended); outside a call, a URL to
        visit (which no one here would), or a question over MAX_QUESTION, "decline"."""
        answering = self.answering
        if answering is None or params.get("mode", "form") != "form" or \
                len(json.dumps(params)) > MAX_QUESTION:
            return {"action": "decline"}
        if answering["answers"]:
            return answering["answers"].pop(0)
        answering["asked"].append(params)
        return {"action": "cancel"}

    def _asked(self, entry):
        """Elicited, when the server asked what the call had no answer for."""
        asked, self.answering = self.answering["asked"], None
        if asked:
            raise Elicited(entry.name, asked[0])

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
        """List again what said its list changed, then stop every server: a Streamable
        HTTP server's session kept for the agent's next turn where it gave one."""
        for name in list(self.changed):
            if name in self.sessions:
                try:
                    self.tools(self.entries[name])
                except Failed:
                    pass
        for session in self.sessions.values():
            session.end()           # (all at once: each then ends while the others do)
        for name, session in self.sessions.items():
            kept = session.kept() if isinstance(session, mcphttp.Http) else None
            session.close(keep=kept is not None)
            if isinstance(session, mcphttp.Http):
                mcp.keep_session(self.entries[name], self.environment, kept)
        self.sessions = {}
        for prepared in self.groups:
            prepared.close()


def _text(value):
    return value if isinstance(value, str) else ""


def content(parts):
    """(text, media) of an MCP result's content (MCP's dicts): text, a text resource and
    a link as text; an image (or an image resource) up to MAX_IMAGE as a part the provider
    is given as an image; anything else (audio, a larger image, a binary resource) as a
    note of what it was."""
    texts, media = [], []
    for c in parts if isinstance(parts, list) else ():
        c = c if isinstance(c, dict) else {}
        kind = _text(c.get("type")) or "content"
        data, mime = _text(c.get("data")), c.get("mimeType")
        if kind == "text":
            texts.append(_text(c.get("text")))
        elif kind == "image" and len(data) <= MAX_IMAGE:
            media.append({"type": "image", "mime": mime, "data": data})
            texts.append(voice.media_note("image", mime, data))
        elif kind == "resource":
            res = c.get("resource") if isinstance(c.get("resource"), dict) else {}
            uri, mime, blob = str(res.get("uri", "")), res.get("mimeType"), _text(res.get("blob"))
            if isinstance(res.get("text"), str):
                texts.append(voice.mcp_resource(uri, res["text"]))
            elif _text(mime).startswith("image/") and len(blob) <= MAX_IMAGE:
                media.append({"type": "image", "mime": mime, "data": blob})
                texts.append(voice.media_note("image", mime, blob))
            else:
                texts.append(voice.media_note("resource " + uri, mime, blob))
        elif kind == "resource_link":
            texts.append(voice.mcp_link(str(c.get("uri", "")), c.get("name")))
        else:
            texts.append(voice.media_note(kind, mime, data))
    return "\n".join(texts), media
