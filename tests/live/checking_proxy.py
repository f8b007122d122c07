"""make test-live's schema checks: a proxy on 127.0.0.1 between agentctl and the real
server. Every request body is checked against the official SDKs' request types and the
APIs' rules (tests/fakechecks.py's request_problem), then passed on; the answer, plain or
streamed, comes back as the server sent it.

    python -m tests.live.checking_proxy UPSTREAM PORTFILE LOG

It writes the port it listens on to PORTFILE, and a line per request to LOG: "ok PATH"
or "problem PATH: what".
"""

import json
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.fakechecks import Schemas, request_problem

PASSED = ("Content-Type", "Authorization", "x-api-key", "anthropic-version", "Accept")


class Proxy(BaseHTTPRequestHandler):
    upstream = log = None

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.forward(None)

    def do_POST(self):
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        flavour = "anthropic" if self.path.endswith("/messages") else "openai"
        try:
            problem = request_problem(flavour, json.loads(data))
        except ValueError as e:
            problem = f"not JSON: {e}"
        with open(self.log, "a") as f:
            f.write(f"problem {self.path}: {problem}\n" if problem else f"ok {self.path}\n")
        self.forward(data)

    def forward(self, data):
        headers = {k: self.headers[k] for k in PASSED if self.headers.get(k)}
        request = urllib.request.Request(self.upstream + self.path, data=data, headers=headers,
                                         method=self.command)
        try:
            answer = urllib.request.urlopen(request, timeout=300)
        except urllib.error.HTTPError as e:
            answer = e
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
        self.send_header("Connection", "close")
        self.end_headers()
        while True:                 # as it comes: a stream's events are not held back
            chunk = answer.read1(65536) if hasattr(answer, "read1") else answer.read()
            if not chunk:
                break
            self.wfile.write(chunk)
            self.wfile.flush()


class Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """A client that went away (agentctl timed out, or was killed) is expected:
        no traceback for it. Anything else is printed, as socketserver does."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def main(upstream, port_file, log):
    Schemas.start()
    Proxy.upstream, Proxy.log = upstream.rstrip("/"), log
    server = Server(("127.0.0.1", 0), Proxy)
    with open(port_file, "w") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main(*sys.argv[1:])
