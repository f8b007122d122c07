"""The sandbox's way out, as the bytes go (agentctl(7), NETWORK): a call's network is
made before its sandbox, and its listener handed to the egress proxy, which accepts
each connection and reads and writes it itself (one copy) until the call's bwrap has
ended; egress takes from a hand-over nothing but a listening TCP socket, a standard
error to write a line to, a pidfd and a watch; the bytes each way are counted where
they cross; the tool in its own network is as it would be without one."""

import array
import errno
import inspect
import json
import os
import select
import signal
import socket
import subprocess
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
    yield server, server.socket_for(f"127.0.0.1:{sink[0]}", None)
    server.close()


def hand(path, *fds, data=b"\0"):
    """As a call's stage does (netns.Stage.enter): `data` with `fds` over the socket at
    `path`; what the proxy answers (b"": it closed it, taken or refused)."""
    with socket.socket(socket.AF_UNIX) as door:
        door.connect(path)
        door.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                               array.array("i", fds).tobytes())] if fds else [])
        return answer(door)


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


def network(path, pid=None):
    """A call's network handed to the egress proxy at `path` as a stage hands it: a
    listener on this loopback, a pipe for its standard error, a pidfd of process `pid`
    (this one's: it lasts the test). (the listener's address, the pipe's read end)."""
    listener = socket.create_server(("127.0.0.1", 0))
    r, w = os.pipe()
    pidfd = os.pidfd_open(pid or os.getpid())
    assert hand(path, listener.fileno(), w, pidfd) == b""
    for fd in (w, pidfd):
        os.close(fd)
    address = listener.getsockname()
    listener.close()            # (the proxy's copy listens on)
    return address, r


def test_a_connection_to_a_calls_listener_is_served_and_its_bytes_counted_each_way(
        proxy, sink):
    """A call's listener handed over as a stage hands it: egress accepts each
    connection itself, reads the head from it and splices between it and the host, the
    end of each way passed on."""
    server, path = proxy
    address, r = network(path)
    os.close(r)
    assert tunnel(lambda: socket.create_connection(address), sink[0]) == RECEIVED
    assert sink[1] == [SENT]
    record, = wait_until(server.drain, "the connection's record")
    assert (record["outcome"], record["sent"], record["received"]) == \
        ("allowed", SENT, RECEIVED), record


def test_a_refusal_is_a_line_on_the_standard_error_handed_over(proxy, sink):
    server, path = proxy
    address, r = network(path)
    with socket.create_connection(address) as c:
        c.sendall(b"CONNECT 192.0.2.1:443 HTTP/1.1\r\n\r\n")
        assert answer(c).startswith(b"HTTP/1.1 403"), "refused"
    os.set_blocking(r, False)
    line = wait_until(lambda: os.read(r, 4096), "the refusal's line")
    os.close(r)
    assert line == (f"agentctl: net: refused 192.0.2.1:443: not in its list (127.0.0.1:"
                    f"{sink[0]}); the grant\n").encode(), line


def test_a_calls_network_ends_with_its_bwrap(proxy, sink):
    """Once the process whose pidfd was handed over has ended, its listener is closed
    (a connection is refused) and its standard error let go (the pipe ends): the
    call's output ends when the call does."""
    server, path = proxy
    held = subprocess.Popen(["sleep", "600"])
    try:
        address, r = network(path, held.pid)
        with socket.create_connection(address) as c:
            c.sendall(f"CONNECT 127.0.0.1:{sink[0]} HTTP/1.1\r\n\r\n".encode())
            assert answer(c).startswith(b"HTTP/1.1 200")
    finally:
        held.kill()
        held.wait()
    assert said(r) == b""

    def refused():
        try:
            socket.create_connection(address, 5).close()
        except ConnectionRefusedError:
            return True
    wait_until(refused, "the listener closed")


def test_closing_the_proxy_ends_each_calls_network(tmp_path, sink):
    """A turn's end closes the proxy: each call's listener is shut down, and its
    thread (which polls it, and alone closes it) ends and lets go of what the call
    handed over, though the call's process lives on."""
    (tmp_path / "net").mkdir()
    server = egress.Server(str(tmp_path / "net"), lambda *a: "")
    address, r = network(server.socket_for(f"127.0.0.1:{sink[0]}", None))
    wait_until(lambda: server.networks, "the network served")
    server.close()
    assert said(r) == b""
    wait_until(lambda: not any(t.name == "agentctl-egress-call" for t in threading.enumerate()),
               "the call's thread ended")


def test_connections_past_the_most_at_once_are_closed(proxy, sink):
    """Connections held open count against the most at once (here 2): one more is
    closed unserved, and one is served again once a slot is free."""
    server, path = proxy
    server.slots = threading.BoundedSemaphore(2)
    address, r = network(path)
    os.close(r)
    held = []
    for _ in range(2):
        c = socket.create_connection(address)
        c.sendall(f"CONNECT 127.0.0.1:{sink[0]} HTTP/1.1\r\n\r\n".encode())
        assert answer(c).startswith(b"HTTP/1.1 200"), "a connection within the most"
        held.append(c)
    with socket.create_connection(address) as refused:
        refused.sendall(f"CONNECT 127.0.0.1:{sink[0]} HTTP/1.1\r\n\r\n".encode())
        assert answer(refused) == b""
    held.pop().close()
    wait_until(server.drain, "the closed connection's record")
    assert tunnel(lambda: socket.create_connection(address), sink[0]) == RECEIVED
    held[0].close()


def not_listening(kind, keep):
    """A descriptor of `kind` that is not a listening TCP socket; what must live as
    long as the test goes in `keep`."""
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
    if kind == "connected":
        listening = socket.create_server(("127.0.0.1", 0))
        keep.append(listening)
        return socket.create_connection(listening.getsockname()).detach()
    unix = socket.socket(socket.AF_UNIX)     # ("unix": a listening one, not TCP)
    unix.bind(b"\0agentctl-test-not-tcp-%d" % os.getpid())
    unix.listen()
    return unix.detach()


@pytest.mark.parametrize("kind", ["pipe", "file", "udp", "unconnected", "connected", "unix"])
def test_egress_takes_for_a_listener_nothing_but_a_listening_tcp_socket(proxy, kind):
    """What is handed as a call's listener is checked by its socket options: anything
    else is closed unused with what came with it, and nothing is served."""
    server, path = proxy
    keep = []
    given = not_listening(kind, keep)
    r, w = os.pipe()
    pidfd = os.pidfd_open(os.getpid())
    assert hand(path, given, w, pidfd) == b""
    for fd in (given, w, pidfd):
        os.close(fd)
    assert said(r) == b""           # (its standard error closed at once, unwritten)
    assert server.drain() == [] and not server.networks
    for kept in keep:
        kept.close() if hasattr(kept, "close") else os.close(kept)


def test_egress_takes_no_network_without_its_pidfd(proxy):
    """Without a pidfd (here a pipe in its place) there is no knowing when the call
    ends: nothing is taken."""
    server, path = proxy
    listener = socket.create_server(("127.0.0.1", 0))
    r, w = os.pipe()
    assert hand(path, listener.fileno(), w, w) == b""
    os.close(w)
    assert said(r) == b"" and not server.networks
    listener.close()


def test_a_request_written_on_the_socket_itself_is_not_served(proxy, sink):
    """Without descriptors, the egress proxy answers nothing and connects to nothing."""
    server, path = proxy
    request = f"\0CONNECT 127.0.0.1:{sink[0]} HTTP/1.1\r\n\r\n".encode()
    assert hand(path, data=request) == b""
    assert server.drain() == [] and sink[1] == []


def test_a_descriptor_past_the_fourth_is_closed_unused(proxy):
    """A stage hands four descriptors at most (its listener, its standard error, its
    pidfd, its watch): one more, and all are closed unused."""
    server, path = proxy
    pipes = [os.pipe() for _ in range(5)]
    assert hand(path, *[w for _, w in pipes]) == b""
    for _, w in pipes:
        os.close(w)
    assert [said(r) for r, _ in pipes] == [b""] * 5
    assert server.drain() == [] and not server.networks


def test_the_bytes_through_the_calls_network_are_counted_each_way(world, tmp_path, sink):  # noqa: F811
    """In the sandbox, through its real network: what the tool sent and read, exactly,
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


def test_the_calls_network_is_its_own_loopback_with_the_proxys_listener(world, tmp_path):  # noqa: F811
    """Made before bwrap, the call's network holds its loopback alone, and on it one
    socket: the listener the proxy serves, which the tool can't take over."""
    needs("bwrap", "bubblewrap")
    code = ("import socket\n"
            "print([l.split(':')[0].strip() for l in open('/proc/net/dev') if ':' in l])\n"
            "print([l.split()[1:4:2] for l in list(open('/proc/net/tcp'))[1:]])\n"
            "s = socket.socket()\n"
            "try:\n"
            "    s.bind(('127.0.0.1', 3128)); s.listen(); print('bound')\n"
            "except OSError as e:\n"
            "    print('taken', e.errno)\n")
    (tmp_path / "work" / "look.py").write_text(code)
    result = attempt(world, tmp_path, f"{PYTHON} look.py", "--net", "127.0.0.1:9")
    assert result == f"['lo']\n[['0100007F:0C38', '0A']]\ntaken {errno.EADDRINUSE}\n", result


def test_a_call_given_hosts_lives_as_long_as_its_tool(world, tmp_path):  # noqa: F811
    """As root, the thread of agent-run that made the call's network and started its
    bwrap stays its parent until it ends: bwrap dies with its parent (a thread's end
    is that, to --die-with-parent), so a thread gone at once would kill the call."""
    needs("bwrap", "bubblewrap")
    result = attempt(world, tmp_path, "sleep 1; echo still here", "--net", "127.0.0.1:9")
    assert result == "still here\n", result


def test_the_tool_in_its_network_has_its_signals_as_without_it(world, tmp_path):  # noqa: F811
    """Python ignores SIGPIPE and SIGXFSZ at its start; the tool agent-run starts gets
    them back (a `yes | head` ends, a file over its limit stops the writer), given hosts
    (its network made first, in the process that becomes bwrap) as without."""
    needs("bwrap", "bubblewrap")
    body = "grep -E '^Sig(Ign|Blk)' /proc/self/status"
    behind = attempt(world, tmp_path, body, "--net", "127.0.0.1:9", name="behind")
    alone = attempt(world, tmp_path, body, name="alone")
    ignored = int(alone.split("SigIgn:")[1].split()[0], 16)
    assert not ignored & (1 << signal.SIGPIPE - 1 | 1 << signal.SIGXFSZ - 1), alone
    assert behind == alone


NOBODY_TOOL = f"""#!/usr/bin/python3
import socket, sys
SENT, RECEIVED = {SENT}, {RECEIVED}
{inspect.getsource(tunnel).replace("assert head", "assert head.startswith(b'HTTP') or head")}
say = lambda *words: print(*words, file=sys.stderr, flush=True)
say('read', tunnel(lambda: socket.create_connection(('127.0.0.1', 3128)), PORT))
with socket.create_connection(('127.0.0.1', 3128)) as c:
    c.sendall(b'CONNECT 192.0.2.1:443 HTTP/1.1\\r\\n\\r\\n')
    say(c.recv(100).split(b'\\r\\n')[0].decode())
try:
    socket.create_connection(('192.0.2.1', 80), 5)
except OSError as e:
    say('direct', e.errno)
with open('/proc/net/dev') as f:
    say('interfaces', [line.split(':')[0].strip() for line in f if ':' in line])
sys.exit(3)     # (a failed call's result is its standard error: what it said)
"""

NOBODY_NET = """
import json, os, sys
sys.path[:0] = [{root!r}]     # agentctl, and pyseccomp
from agentctl.tools import calls, programs, sandbox
tool = os.path.join({work!r}, "tool")
with open(tool, "w") as f:
    f.write({body!r})
os.chmod(tool, 0o755)
box = sandbox.Sandbox({{"cwd": {work!r}, "ro": None, "net": "127.0.0.1:{port}",
                       "limits": None, "rw": None, "env": None, "name": "a", "id": "a"}},
                      {{"PATH": "/usr/bin:/bin"}})
program = programs.Program("t", tool, {{"description": "", "parameters": {{}}}})
call = calls.Call(program, "{{}}", {{}}, {work!r}, sandbox=box)
try:
    call.wait(lambda: None)
except calls.ToolFailed as e:
    print(json.dumps(str(e)))
print(json.dumps(box.connections(settle=10)))
box.close()
"""


def test_a_call_given_hosts_as_a_user_other_than_root(sink):
    """Not root: the call's network is made in a user namespace of its own (which maps
    its user alone), bwrap's nested in it; the egress proxy, in agent-run, serves its
    listener and answers its watch (reading the memory of a process in that nested
    namespace); the tool sees its own loopback alone."""
    from .test_sandbox_procs import as_nobody
    port, got = sink
    out = as_nobody(NOBODY_NET, port=port, body=NOBODY_TOOL.replace("PORT", str(port)))
    result, connections = [json.loads(line) for line in out.splitlines()[-2:]]
    assert got == [SENT], out
    lines = result.removeprefix("exit status 3: ").splitlines()
    assert [line.split(":")[:3] for line in lines] == [
        [f"read {RECEIVED}"], ["agentctl", " net", " refused 192.0.2.1"],
        ["HTTP/1.1 403 Forbidden"], ["agentctl", " net", " refused a connection to 192.0.2.1"],
        [f"direct {errno.ENETUNREACH}"], ["interfaces ['lo']"]], result
    assert "not in its list (127.0.0.1:" in lines[1] and "proxy alone" in lines[3], result
    assert sorted(c["outcome"] for c in connections) == ["allowed", "refused"], connections
    allowed, = [c for c in connections if c["outcome"] == "allowed"]
    assert (allowed["sent"], allowed["received"]) == (SENT, RECEIVED), allowed


def test_a_network_that_cant_be_made_is_a_line_and_no_call(proxy, monkeypatch):
    """Where the kernel refuses the call's namespaces, the process that was to become
    bwrap says why on its standard error and ends (71): the tool never runs, and the
    call's error names the fix."""
    from agentctl.tools import bwrap, netns
    server, path = proxy
    monkeypatch.setattr(netns, "CLONE_NEWNET", 0x1)     # (a flag unshare refuses)
    stage = netns.Stage(path)
    try:
        ran = subprocess.run(["echo", "ran"], capture_output=True, text=True,
                             preexec_fn=stage.enter)
    finally:
        stage.close()
    assert (ran.returncode, ran.stdout) == (netns.FAILED, ""), ran
    assert ran.stderr == "agentctl: net: can't make the call's network namespace: unshare: " \
        "Invalid argument\n", ran.stderr
    assert bwrap.explain(ran.stderr).endswith("allow user namespaces (sysctl "
                                              "user.max_user_namespaces, kernel."
                                              "unprivileged_userns_clone, or AppArmor's "
                                              "restriction of them)")
    assert not server.networks


def test_no_finalizer_waits_under_the_filter_before_the_watch_is_handed(proxy):
    """As root, a thread of agent-run makes the call's network and runs under the
    watch's filter: a finalizer the collector ran there that sends would hang it
    while no one can answer, before the watch is handed over (the collector is off
    then) or after the proxy let go of it while the thread still held a copy (it
    holds none once handed: the kernel then says ENOSYS)."""
    from agentctl.tools import netns
    if os.geteuid() != 0:
        pytest.skip("as root alone a thread makes the network")
    server, path = proxy
    ends = socket.socketpair()
    ends[0].setblocking(False)      # (a full buffer is an error, not a wait: the collector
                                    # runs the finalizers left at the end, and none reads;
                                    # the filter's wait, were it there, comes before)

    class Cycle:
        def __init__(self):
            self.me = self

        def __del__(self):
            try:
                ends[0].sendmsg([b"x"])
            except OSError:     # (ENOSYS once the proxy let go of the watch: no hang;
                pass            # EAGAIN once the buffer is full)

    def start():
        for _ in range(5000):       # (enough for the collector to run, were it on)
            Cycle()
        return subprocess.Popen(["true"])
    stage = netns.Stage(path)
    made = {}
    thread = threading.Thread(target=lambda: made.update(proc=stage.spawned(start, 2)),
                              daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the thread that makes the network hung"
    stage.close()
    made["proc"].wait()
    import gc
    gc.collect()
    ends[0].close()
    ends[1].close()
