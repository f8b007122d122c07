"""MCP over Streamable HTTP, as agentctl speaks it (mcpwire.py: the session, its
messages): each message POSTed, its answer a JSON reply or an SSE stream read as it
comes; the session the server gives (Mcp-Session-Id) sent with each, and kept for the
agent's next turn where the server allows it. models/transport.py's connections (its
proxies and certificates, as every HTTP call of agentctl's)."""

import json
import threading

from agentctl.tools.mcpwire import Closed, Modern, Session, Status


class Expired(Exception):
    """An HTTP server no longer knows the session named (404): a new one is made."""



class Http(Session):
    """A Streamable HTTP server at `url`, sent `headers` too. `kept`, a session the server
    gave an earlier turn ({"session", "version"}): used without a new handshake while the
    server knows it (else a new one is made); `keep`, the session left open at the end
    (kept() says it) rather than deleted."""

    def __init__(self, url, headers, changed=lambda: None, kept=None):
        super().__init__(changed)
        self.url, self.headers = url, dict(headers or {})
        self.session = (kept or {}).get("session")
        self.version = (kept or {}).get("version") if self.session else None
        capabilities = (kept or {}).get("capabilities") if self.session else None
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}
        self.resumed = self.session is not None

    def handshake(self, timeout):
        if not self.resumed:
            super().handshake(timeout)

    def request(self, method, params, timeout, poll=None, poll_seconds=0.5):
        try:
            return super().request(method, params, timeout, poll, poll_seconds)
        except Expired:
            if not self.resumed or method == "initialize":
                raise Status(404) from None
            self.resumed, self.session, self.version = False, None, None
            self.capabilities = {}
            super().handshake(timeout)      # (the server forgot it: a session anew)
            return super().request(method, params, timeout, poll, poll_seconds)

    def end(self):
        pass

    def kept(self):
        """What the next turn may resume, or None."""
        return {"session": self.session, "version": self.version,
                "capabilities": self.capabilities} if self.session else None

    def _send(self, message, waiting):
        """POSTed; its answer read in a thread of its own when one is awaited."""
        if waiting is None:
            response = self._post(message, None)
            _done(response)
            return
        threading.Thread(target=self._answer, args=(message, waiting), daemon=True,
                         name="agentctl-mcp").start()

    def _answer(self, message, waiting):
        try:
            response = self._post(message, waiting)
            try:
                kind = (response.headers.get("content-type") or "").split(";")[0].strip()
                if kind == "text/event-stream":
                    for data in _events(response):
                        self._received(data)
                        if waiting.done.is_set():
                            break
                else:
                    self._received(json.loads(response.read() or b"null"))
            finally:
                _done(response)
            if not waiting.done.is_set():
                waiting.give(Closed())
        except Exception as e:
            waiting.give(e)

    def _post(self, message, waiting):
        from agentctl.models import transport  # (start-up: 25 ms, only for an HTTP server's call)
        headers = {**self.headers, "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        if self.version:
            headers["MCP-Protocol-Version"] = self.version
        response = transport.open_post(self.url, json.dumps(message).encode(), headers,
                                       (10, 30 if waiting is None else 3600))
        status = response.status
        if status == 404 and self.session:
            _done(response)
            raise Expired()
        if status >= 300:
            _done(response)
            if message.get("method") == "initialize" and status in (400, 405, 406, 415):
                raise Modern(f"HTTP {status}")
            raise Status(status, response.headers.get("www-authenticate", ""))
        if message.get("method") == "initialize":
            self.session = response.headers.get("mcp-session-id") or None
        return response

    def close(self, keep=False):
        """The session deleted on the server, unless `keep`."""
        if self.session and not keep:
            from agentctl.models import transport  # (start-up: 25 ms, only for an HTTP server)
            try:
                _done(transport.open_post(self.url, None, {**self.headers,
                                                           "Mcp-Session-Id": self.session},
                                          (5, 5), method="DELETE"))
            except Exception:
                pass    # (a server gone: its session with it)


def _events(response):
    """The JSON of each SSE event's data in `response`, as it comes."""
    buffer, data = b"", []
    while True:
        chunk = response.read1(65536)
        if not chunk:
            return
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if not line:
                if data:
                    try:
                        yield json.loads(b"\n".join(data))
                    except ValueError:
                        pass
                data = []
            elif line.startswith(b"data:"):
                data.append(line[5:].removeprefix(b" "))


def _done(response):
    from agentctl.models import transport  # (start-up: 25 ms, only for an HTTP server)
    transport.done(response)
