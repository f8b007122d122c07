"""What the tests' HTTP servers on 127.0.0.1 share (fakeapi.py, limitedapi.py, otlp.py):
a server on a port of its own, served by a thread until close(), whose handlers print
nothing and find the object that owns the server as self.server.owner. And a free port,
for a server started on its own (PostgreSQL's, an MCP server's)."""

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port():
    """A port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server(ThreadingHTTPServer):
    """A server whose handler threads never keep the test's process alive."""
    daemon_threads = True


class LocalServer:
    """Serves `handler` on 127.0.0.1 at self.url, from a thread, until close()."""

    def __init__(self, handler, server_class=Server):
        self.closed = False
        self.sockets = []           # the connections the handlers were given
        self.server = server_class(("127.0.0.1", 0), handler)
        self.server.owner = self
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.closed = True
        self.server.shutdown()
        for sock in self.sockets:       # wake handler threads parked on keep-alive connections
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.server.server_close()


class Handler(BaseHTTPRequestHandler):
    """Answers each POST with post(owner, body), a subclass's."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.server.owner.sockets.append(self.connection)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if len(body) < length:      # the client went away in the middle of its request
            self.close_connection = True
            return self.cut_short(self.server.owner)
        self.post(self.server.owner, body)

    def cut_short(self, owner):
        """A request whose client went away before it had sent all its body: no answer."""

    def answer(self, status, data=b"", kind=None, headers=(), cut=False):
        """A response of `data` (bytes) of content type `kind`, with `headers`; with `cut`
        only its first half is sent, the length said being the whole's."""
        self.send_response(status)
        if kind is not None:
            self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data[:len(data) // 2] if cut else data)
        self.wfile.flush()
