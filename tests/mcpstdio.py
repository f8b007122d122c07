"""An MCP server started over stdio by a test (a launcher such as npx or uvx, before agentctl
runs it), spoken to as a client does, one JSON-RPC message a line, each answer awaited
with a ceiling: the cheapest proof that what was installed runs and speaks MCP."""

import json
import os
import selectors
import signal
import subprocess
import time

import pytest

from .conftest import PATIENCE


class Stdio:
    """An MCP server started as `argv` in `env` (its own session: a launcher's children
    go with it), its stderr in the file `log`; request() sends a JSON-RPC request and
    returns the answer's result, waiting `timeout` seconds at most."""

    def __init__(self, argv, env, log):
        self.log = log
        with open(log, "wb") as stderr:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=stderr,
                                         start_new_session=True)
        self.buffer = b""
        self.ids = iter(range(1, 10 ** 6))

    def send(self, message):
        self.proc.stdin.write(json.dumps(dict(message, jsonrpc="2.0")).encode() + b"\n")
        self.proc.stdin.flush()

    def notify(self, method, params=None):
        self.send({"method": method, **({"params": params} if params is not None else {})})

    def request(self, method, params=None, timeout=PATIENCE):
        number = next(self.ids)
        self.send({"id": number, "method": method, "params": params or {}})
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                line, newline, rest = self.buffer.partition(b"\n")
                if newline:
                    self.buffer = rest
                    answer = json.loads(line)
                    if answer.get("id") == number:
                        if "error" in answer:
                            raise AssertionError(f"{method}: {answer['error']}: {self.stderr()}")
                        return answer["result"]
                    continue            # (a notification, a request of the server's)
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    pytest.fail(f"waited {timeout:g} s for the answer to {method}: "
                                f"{self.stderr()}", pytrace=False)
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    pytest.fail(f"the server ended before answering {method} "
                                f"({self.proc.wait()}): {self.stderr()}", pytrace=False)
                self.buffer += chunk

    def initialize(self, timeout=PATIENCE):
        """The handshake: the server's answer to initialize (its serverInfo ...)."""
        result = self.request("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "agentctl-tests", "version": "0"}}, timeout)
        self.notify("notifications/initialized")
        return result

    def stderr(self):
        with open(self.log, "rb") as f:
            return f.read().decode("utf-8", "replace")[-2000:]

    def close(self, timeout=PATIENCE):
        """Its stdin closed, as a client leaving: its exit status, or None when it had
        to be killed. What it left in its session is killed."""
        self.proc.stdin.close()
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            status = None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc.stdout.close()
        return status

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.stdin.closed:
            return
        self.close()
