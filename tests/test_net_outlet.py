"""The sandbox's way out, as the bytes go (agentctl(7), NETWORK): the outlet hands each
connection it accepts to the egress proxy, which reads and writes it itself (one
copy); egress takes from the sandbox nothing but a TCP connection and a standard
error to write a line to; the bytes each way are counted where they cross; the tool
behind the outlet is as it would be without one."""

import array
import inspect
import os
import select
import signal
import socket
import sys
import threading

import pytest

from agentctl.tools import egress

from .conftest import needs, wait_until
from .test_net import net_events
from .test_sandbox import attempt, world  # noqa: F401 (fixture)

PYTHON = sys.executable
SENT, RECEIVED = 3 * 1024 * 1024 + 17, 5 * 1024 * 1024 + 3     # (many splices each way)


@pytest.fixture
def sink():
    """A host on 127.0.0.1 that reads what it is sent to its end, then answers RECEIVED
    bytes and closes: its port, and the counts of what it read."""
    listener = socket.create_server(("127.0.0.1", 0))
    got = []

    def serve(conn):
        with conn:
            total = 0
            while chunk := conn.recv(1 << 16):
                total += len(chunk)
            got.append(total)
            try:
                conn.sendall(b"y" * RECEIVED)
            except OSError:     # (a client gone: the most-at-once test closes them)
                pass

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1], got
    listener.close()


def tunnel(connect, port):
    """Through a proxy reached by `connect()`: CONNECT to 127.0.0.1:`port`, send SENT
    bytes (the first ones with the head), end the sending, read to the end: the bytes
    read after the proxy's answer."""
    with connect() as c:
        c.settimeout(60)
        c.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode() + b"x" * SENT)
        c.shutdown(socket.SHUT_WR)
        data = bytearray()
        while chunk := c.recv(1 << 16):
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return len(body)


@pytest.fixture
def proxy(tmp_path, sink):
    """An egress proxy whose list names the sink, and the path of its socket."""
    (tmp_path / "net").mkdir()
    server = egress.Server(str(tmp_path / "net"), lambda *a: "the grant")
    directory, inside = server.socket_for(f"127.0.0.1:{sink[0]}", None)
    yield server, os.path.join(directory, egress.SOCKET)
    server.close()


def hand(path, *fds, data=b"\0"):
    """As the outlet does (outlet.hand_over): `data` with `fds` over the socket at `path`."""
    with socket.socket(socket.AF_UNIX) as door:
        door.connect(path)
        try:
            door.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                   array.array("i", fds).tobytes())] if fds else [])
        except (BrokenPipeError, ConnectionResetError):
            return b""              # (closed at once: no slot free)
        return answer(door)         # (b"": egress closed it, taken or refused)


def said(r):
    """What the pipe `r` carries until its end (every writer closed; 60 s at most), and
    `r` closed."""
    data = b""
    try:
        while select.select([r], [], [], 60)[0]:
            more = os.read(r, 4096)
            if not more:
                return data
            data += more
        raise AssertionError(f"the pipe did not end within 60 s: {data!r}")
    finally:
        os.close(r)


def answer(sock):
    """What `sock` reads next: b"" when its other end is closed, read or not."""
    sock.settimeout(60)
    try:
        return sock.recv(100)
    except ConnectionResetError:    # (closed with what it didn't read)
        return b""


def handed(path):
    """A connection made to a stand-in for the outlet, which hands it over to the
    egress proxy at `path` as the outlet does: the tool's end."""
    with socket.create_server(("127.0.0.1", 0)) as front:
        c = socket.create_connection(front.getsockname())
        accepted, _ = front.accept()
    r, w = os.pipe()
    assert hand(path, accepted.fileno(), w) == b""
    accepted.close()
    os.close(w)
    os.close(r)
    return c


def test_a_connection_handed_over_is_served_and_its_bytes_counted_each_way(proxy, sink):
    """A TCP connection handed over as the outlet hands it: egress reads the head from
    it and splices between it and the host, the end of each way passed on."""
    server, path = proxy
    assert tunnel(lambda: handed(path), sink[0]) == RECEIVED
    assert sink[1] == [SENT]
    record, = wait_until(server.drain, "the connection's record")
    assert (record["outcome"], record["sent"], record["received"]) == \
        ("allowed", SENT, RECEIVED), record


def test_connections_past_the_most_at_once_are_closed(proxy, sink):
    """Connections held open count against the most at once (here 2): one more is
    closed unserved, and one is served again once a slot is free."""
    server, path = proxy
    server.slots = threading.BoundedSemaphore(2)
    held = []
    for _ in range(2):
        c = handed(path)
        c.sendall(f"CONNECT 127.0.0.1:{sink[0]} HTTP/1.1\r\n\r\n".encode())
        assert answer(c).startswith(b"HTTP/1.1 200"), "a connection within the most"
        held.append(c)
    with handed(path) as refused:
        refused.sendall(f"CONNECT 127.0.0.1:{sink[0]} HTTP/1.1\r\n\r\n".encode())
        assert answer(refused) == b""
    held.pop().close()
    wait_until(server.drain, "the closed connection's record")
    assert tunnel(lambda: handed(path), sink[0]) == RECEIVED
    held[0].close()


def not_tcp(kind, keep):
    """A descriptor of `kind` that is not a TCP connection; what must live as long as
    the test goes in `keep`."""
    if kind == "pipe":
        r, w = os.pipe()
        keep.append(w)
        return r
    if kind == "file":
        return os.open(os.devnull, os.O_RDWR)
    if kind == "udp":
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM).detach()
    if kind == "unconnected":
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM).detach()
    if kind == "listening":
        listening = socket.create_server(("127.0.0.1", 0))
        keep.append(listening)
        return os.dup(listening.fileno())
    ends = socket.socketpair()      # ("unix": a stream, with a request waiting on it)
    keep.append(ends[0])
    ends[0].sendall(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n")
    return ends[1].detach()


@pytest.mark.parametrize("kind", ["pipe", "file", "udp", "unconnected", "listening", "unix"])
def test_egress_takes_nothing_from_the_sandbox_but_a_tcp_connection(proxy, kind):
    """A tool may reach the socket itself and hand anything over: a descriptor that is
    not a TCP connection (checked by its socket options) is closed unused, with a line
    on the standard error handed with it, and no connection is made."""
    server, path = proxy
    keep = []
    given = not_tcp(kind, keep)
    r, w = os.pipe()
    assert hand(path, given, w) == b""
    os.close(given)
    os.close(w)
    assert said(r) == (b"agentctl: net: refused: what was handed to the egress proxy is "
                       b"not a TCP connection\n")
    if kind == "unix":      # (egress closed its end, never answering the request)
        assert answer(keep[0]) == b""
    assert server.drain() == []
    for kept in keep:
        kept.close() if hasattr(kept, "close") else os.close(kept)


def test_a_request_written_on_the_socket_itself_is_not_served(proxy, sink):
    """Without a connection handed over (as before the outlet handed connections over),
    the egress proxy answers nothing and connects to nothing."""
    server, path = proxy
    request = f"\0CONNECT 127.0.0.1:{sink[0]} HTTP/1.1\r\n\r\n".encode()
    assert hand(path, data=request) == b""
    assert server.drain() == [] and sink[1] == []


def test_a_descriptor_past_the_second_is_closed_unused(proxy):
    """The first descriptor is the connection (here not one: refused), the second the
    standard error (the line), and the rest are closed at once."""
    server, path = proxy
    pipes = [os.pipe() for _ in range(5)]
    assert hand(path, *[w for _, w in pipes]) == b""
    for _, w in pipes:
        os.close(w)
    line = b"agentctl: net: refused: what was handed to the egress proxy is not a TCP " \
        b"connection\n"
    assert [said(r) for r, _ in pipes] == [b"", line, b"", b"", b""]
    assert server.drain() == []


def test_the_bytes_through_the_outlet_are_counted_each_way(world, tmp_path, sink):  # noqa: F811
    """In the sandbox, through the real outlet: what the tool sent and read, exactly,
    in the net event."""
    needs("bwrap", "bubblewrap")
    port, got = sink
    script = tmp_path / "work" / "tunnel.py"
    script.write_text(
        f"import socket\nSENT, RECEIVED = {SENT}, {RECEIVED}\n{inspect.getsource(tunnel)}"
        f"print('read', tunnel(lambda: socket.create_connection(('127.0.0.1', 3128)), {port}))\n")
    script.chmod(0o644)
    result = attempt(world, tmp_path, f"{PYTHON} {script}", "--net", f"127.0.0.1:{port}")
    assert result == f"read {RECEIVED}\n", result
    assert got == [SENT]
    event, = net_events("a")
    assert (event["data"]["sent"], event["data"]["received"]) == (SENT, RECEIVED), event


def test_the_tool_behind_the_outlet_has_its_signals_as_without_it(world, tmp_path):  # noqa: F811
    """Python ignores SIGPIPE and SIGXFSZ at its start; the tool it starts gets them
    back (a `yes | head` ends, a file over its limit stops the writer), as a tool
    started without the network does."""
    needs("bwrap", "bubblewrap")
    body = "grep -E '^Sig(Ign|Blk)' /proc/self/status"
    behind = attempt(world, tmp_path, body, "--net", "127.0.0.1:9", name="behind")
    alone = attempt(world, tmp_path, body, name="alone")
    ignored = int(alone.split("SigIgn:")[1].split()[0], 16)
    assert not ignored & (1 << signal.SIGPIPE - 1 | 1 << signal.SIGXFSZ - 1), alone
    assert behind == alone
