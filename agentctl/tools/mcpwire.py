"""MCP spoken by agentctl itself (agent-run(1), MCP servers): JSON-RPC 2.0 over a stdio
server's pipes (a message a line) or a Streamable HTTP server's POSTs (a JSON reply or an
SSE stream), after the initialize handshake of the revisions 2024-11-05 to 2025-11-25.
It asks what a turn asks (tools/list, tools/call, a call's cancel) and answers what a
server may ask of it: ping, and a form's elicitation (elicitation/create) where the
session has an `elicit` (its answer); anything else is not offered.

The official SDK does the same at a price no turn should pay: importing it takes
0.5-0.8 s of CPU (its pydantic models), before the server has started. The SDK stays
for what this does not speak: the older SSE transport, and a server of the 2026-07-28
revision alone (one that refuses the handshake: Modern), for which mcpsdk.py is used.

The standard library; Streamable HTTP in mcphttp.py.
"""

import itertools
import json
import os
import signal
import subprocess
import threading
import time

from agentctl import __version__

VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")   # newest first
CLIENT = {"name": "agentctl", "version": __version__}
INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")    # as the SDK's stdio
GRACE_SECONDS = 0.1     # for a stdio server to end once its input closes, before SIGTERM
STOP_SECONDS = 2.0      # for it to end after SIGTERM, before SIGKILL
NOT_OFFERED = -32601    # JSON-RPC: method not found


class Error(Exception):
    """The server's JSON-RPC error: its message (and code, data)."""

    def __init__(self, error):
        error = error if isinstance(error, dict) else {}
        super().__init__(str(error.get("message") or "an error without a message"))
        self.code, self.data = error.get("code"), error.get("data")


class Closed(Exception):
    """The server ended or closed its side before it answered."""

    def __init__(self):
        super().__init__("Connection closed")


class Modern(Exception):
    """The server refused the handshake: one of the 2026-07-28 revision alone (or not an
    MCP server): the SDK, which speaks that revision, is asked instead."""


class Status(Exception):
    """An HTTP server's answer that is not MCP's: `response` as mcpreasons reads it."""

    def __init__(self, status, authenticate=""):
        super().__init__(f"HTTP {status}")
        self.response = type("Response", (), {"status_code": status,
                                              "headers": {"www-authenticate": authenticate}})


class _Waiting:
    """One request's answer, to come."""

    def __init__(self):
        self.done = threading.Event()
        self.message = None

    def give(self, message):
        self.message = message
        self.done.set()


class Session:
    """A server's session: requests sent, their answers awaited (`poll()` asked every
    `poll_seconds` meanwhile: what it raises gives the request up), what the server
    sends meanwhile answered. `changed()` is called when it says its tools changed."""

    def __init__(self, changed=lambda: None):
        self.changed = changed
        self.elicit = None          # params -> the answer to the server's elicitation/create
        self.ids = itertools.count(1)
        self.waiting = {}
        self.lock = threading.Lock()
        self.version = None
        self.capabilities = {}      # the server's, from its handshake
        self.ended = False

    def handshake(self, timeout):
        """initialize, then notifications/initialized: the revision agreed (Modern if
        the server refuses it)."""
        try:
            result = self.request("initialize", {
                "protocolVersion": VERSIONS[0], "clientInfo": CLIENT,
                "capabilities": {"elicitation": {}} if self.elicit is not None else {}},
                timeout)
        except Error as e:
            raise Modern(str(e)) from None
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if version not in VERSIONS:
            raise Modern(f"it speaks protocol revision {version!r}")
        self.version = version
        capabilities = result.get("capabilities")
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}
        self.notify("notifications/initialized")

    def list_tools(self, timeout):
        """Every tool the server offers (each page of its list): dicts as MCP says them."""
        tools, cursor = [], None
        for _ in range(1000):
            result = self.request("tools/list", {"cursor": cursor} if cursor else {}, timeout)
            tools += [t for t in result.get("tools") or () if isinstance(t, dict)
                      and isinstance(t.get("name"), str)]
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return tools

    def call_tool(self, name, arguments, timeout, poll=None, poll_seconds=0.5, task=None):
        """The call's result; given `task` (its time to live, seconds), the call made a
        task (2025-11-25's tasks): the result may then be {"task": {...}}, the task the
        server made, whose result tasks/result gives once it is done."""
        params = {"name": name, "arguments": arguments}
        if task is not None:
            params["task"] = {"ttl": int(task * 1000)}
        return self.request("tools/call", params, timeout, poll, poll_seconds)

    def tasks(self):
        """Whether the server makes tasks of tool calls (its capabilities say so)."""
        tasks = self.capabilities.get("tasks")
        requests = tasks.get("requests") if isinstance(tasks, dict) else None
        tools = requests.get("tools") if isinstance(requests, dict) else None
        return isinstance(tools, dict) and "call" in tools

    def request(self, method, params, timeout, poll=None, poll_seconds=0.5):
        """The result of `method`; Error for the server's error, TimeoutError when
        none came in `timeout` seconds (the request then cancelled)."""
        number = next(self.ids)
        waiting = self.waiting[number] = _Waiting()
        deadline = time.monotonic() + timeout
        try:
            self._send({"jsonrpc": "2.0", "id": number, "method": method, "params": params},
                       waiting)
            while not waiting.done.wait(min(poll_seconds, max(0, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    self._cancel(number, "timed out")
                    raise TimeoutError(f"no answer in {timeout:g} s")
                if poll is not None:
                    try:
                        poll()
                    except BaseException:
                        self._cancel(number, "given up")
                        raise
        finally:
            self.waiting.pop(number, None)
        message = waiting.message
        if isinstance(message, BaseException):
            raise message
        if "error" in message:
            raise Error(message["error"])
        result = message.get("result")
        return result if isinstance(result, dict) else {}

    def notify(self, method, params=None):
        message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message, None)

    def _cancel(self, number, why):
        try:
            self.notify("notifications/cancelled", {"requestId": number, "reason": why})
        except Exception:
            pass        # (a server gone: nothing to cancel)

    def _received(self, message):
        """A message the server sent: an answer given to its request, a request of its
        own answered, a notification seen."""
        if not isinstance(message, dict):
            for each in message if isinstance(message, list) else ():
                self._received(each)
            return
        method = message.get("method")
        if method is None:
            waiting = self.waiting.get(message.get("id"))
            if waiting is not None:
                waiting.give(message)
        elif "id" in message:
            answer = {"jsonrpc": "2.0", "id": message["id"]}
            if method == "ping":
                answer["result"] = {}
            elif method == "elicitation/create" and self.elicit is not None:
                params = message.get("params")
                answer["result"] = self.elicit(params if isinstance(params, dict) else {})
            else:
                answer["error"] = {"code": NOT_OFFERED, "message": f"{method}: not offered "
                                   "by this client"}
            try:
                self._send(answer, None)
            except Exception:
                pass
        elif method == "notifications/tools/list_changed":
            self.changed()

    def _lost(self, error):
        """Every request still waiting ends with `error`."""
        self.ended = True
        for waiting in list(self.waiting.values()):
            waiting.give(error)


class Stdio(Session):
    """A server that is a process: `argv` started with `env` over INHERITED, in `cwd`, its
    standard error into the file `errlog`, in a session of its own (its group stopped
    with it)."""

    def __init__(self, argv, env, cwd, errlog, changed=lambda: None):
        super().__init__(changed)
        environment = {k: os.environ[k] for k in INHERITED if k in os.environ}
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=errlog, env={**environment, **env}, cwd=cwd,
                                     start_new_session=True)
        self.writing = threading.Lock()
        threading.Thread(target=self._read, name="agentctl-mcp", daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue        # (not a message: a server's stray print)
            self._received(message)
        self._lost(Closed())

    def _send(self, message, waiting):
        data = (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
        with self.writing:
            if self.ended:
                raise Closed()
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                raise Closed() from None

    def end(self):
        """Its input closed: the server's sign to end (close() waits for it)."""
        with self.writing:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def close(self, keep=False):
        """Its input closed; the process given GRACE_SECONDS to end, then its group
        SIGTERM, and STOP_SECONDS later SIGKILL."""
        self.end()
        for sig, seconds in ((None, GRACE_SECONDS), (signal.SIGTERM, STOP_SECONDS),
                             (signal.SIGKILL, STOP_SECONDS)):
            if sig is not None:
                try:
                    os.killpg(self.proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                self.proc.wait(seconds)
                break
            except subprocess.TimeoutExpired:
                continue
        self.proc.stdout.close()
