"""The network's watch (agentctl/tools/netwatch.py; agentctl(7), NETWORK): what can't
go through the proxy (UDP, DNS, a direct connection, an abstract unix socket) is
refused with the line a refused host gets, and what can (its own loopback, the proxy)
goes on untouched. Here the watch is run around a program on the host, whose network
would let every one of these calls go: each line, and each errno, is the watch's."""

import errno
import os
import socket
import struct
import subprocess
import sys

from agentctl.tools import netwatch

from .conftest import ROOT

PROGRAM = r"""
import os, socket, sys
def attempt(what, call):
    try:
        call()
        print(what, "went")
    except OSError as e:
        print(what, e.errno)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
attempt("dns", lambda: u.sendto(b"x", ("192.0.2.1", 53)))
attempt("udp", lambda: u.sendto(b"x", ("192.0.2.1", 9999)))
attempt("local-udp", lambda: u.sendto(b"x", ("127.0.0.1", 9999)))
attempt("abstract", lambda: socket.socket(socket.AF_UNIX).connect("\0agentctl-test-none"))
held = socket.socket(socket.AF_UNIX)
name = "\0agentctl-test-held-%d" % os.getpid()
held.bind(name)
held.listen()
attempt("abstract-held", lambda: socket.socket(socket.AF_UNIX).connect(name))
t = socket.socket()
t.settimeout(5)
attempt("tcp", lambda: t.connect(("192.0.2.1", 80)))
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
c = socket.create_connection(s.getsockname())
attempt("local-tcp", lambda: c.sendall(b"hello"))
m = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
attempt("sendmsg", lambda: m.sendmsg([b"x"], [], 0, ("198.51.100.7", 123)))
"""


def test_what_cant_go_through_the_proxy_is_refused_with_a_line(tmp_path):
    script = tmp_path / "attempts.py"
    script.write_text(PROGRAM)
    ran = subprocess.run([sys.executable, "-m", "agentctl.tools.netwatch", sys.executable,
                          str(script)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    said = dict(line.split(" ", 1) for line in ran.stdout.splitlines())
    assert said == {"dns": str(errno.ENETUNREACH), "udp": str(errno.ENETUNREACH),
                    "local-udp": "went", "abstract": str(errno.ECONNREFUSED),
                    "abstract-held": "went", "tcp": str(errno.ENETUNREACH),
                    "local-tcp": "went", "sendmsg": str(errno.ENETUNREACH)}
    lines = ran.stderr.splitlines()
    assert lines == [
        "agentctl: net: refused DNS to 192.0.2.1:53: the sandbox has no DNS; its proxy "
        "resolves the names it is asked for (HTTPS_PROXY, HTTP_PROXY: its list: "
        "example.org)",
        "agentctl: net: refused a datagram (UDP) to 192.0.2.1:9999: the sandbox reaches "
        "hosts by name through its proxy alone (HTTPS_PROXY, HTTP_PROXY; its list: "
        "example.org), and no grant allows an address outside it",
        "agentctl: net: refused abstract socket @agentctl-test-none: the sandbox has none "
        "of its host's abstract sockets, and none of its own is named so",
        "agentctl: net: refused a connection to 192.0.2.1:80: the sandbox reaches hosts by "
        "name through its proxy alone (HTTPS_PROXY, HTTP_PROXY; its list: example.org), "
        "and no grant allows an address outside it",
        "agentctl: net: refused a datagram (UDP) to 198.51.100.7:123: the sandbox reaches "
        "hosts by name through its proxy alone (HTTPS_PROXY, HTTP_PROXY; its list: "
        "example.org), and no grant allows an address outside it"]


def inet(ip, port):
    return struct.pack("=H", socket.AF_INET) + struct.pack("!H", port) + \
        socket.inet_aton(ip) + bytes(8)


def inet6(ip, port):
    return struct.pack("=H", socket.AF_INET6) + struct.pack("!H", port) + bytes(4) + \
        socket.inet_pton(socket.AF_INET6, ip) + bytes(4)


def test_a_loopback_resolver_is_let_be_only_when_one_listens():
    nothing = lambda kind, key: False       # noqa: E731
    dns_here = lambda kind, key: kind == "udp" and key == 53     # noqa: E731
    assert netwatch.judge(inet("127.0.0.53", 53), "", True, nothing)[0] == errno.ECONNREFUSED
    assert netwatch.judge(inet("127.0.0.53", 53), "", True, dns_here) is None
    proxy = lambda kind, key: kind == "tcp" and key in (3128, 8080)     # noqa: E731
    assert netwatch.judge(inet("127.0.0.1", 3128), "", False, proxy) is None   # the proxy
    assert netwatch.judge(inet6("::1", 8080), "", False, proxy) is None
    assert netwatch.judge(inet("127.0.0.1", 5432), "pypi.org", False, proxy)[1].startswith(
        "agentctl: net: refused a connection to 127.0.0.1:5432: the sandbox's loopback is "
        "its own")                                  # the host's PostgreSQL is not there
    assert netwatch.judge(inet("127.0.0.1", 5432), "", True, proxy) is None    # (UDP)
    assert netwatch.judge(inet6("2001:db8::1", 443), "", False, nothing)[1].startswith(
        "agentctl: net: refused a connection to [2001:db8::1]:443: ")
    assert "it has no list" in netwatch.judge(inet("192.0.2.9", 53), "", True, nothing)[1]
    path = struct.pack("=H", socket.AF_UNIX) + b"/run/x.sock\0"
    assert netwatch.judge(path, "", False, nothing) is None      # a path: files decide


def test_the_filter_is_whole_instructions_on_each_machine_watched():
    for machine in netwatch.CALLS:
        code = netwatch.program(5, machine)
        assert len(code) % 8 == 0 and len(code) // 8 == 15
    assert netwatch.program(machine="sparc") is None
    assert os.path.exists("/proc/net/unix")


def test_the_proxys_own_listener_is_known_not_looked_up(monkeypatch):
    """A connection to the proxy (127.0.0.1:3128 in the call's network) goes on without
    reading /proc/PID/net/tcp, which walks every TCP socket of the machine (2 ms with
    a few hundred: a call's first connection waited that long); another loopback port
    is looked up in the caller's network."""
    import ctypes
    from agentctl.tools import egress
    machine = os.uname().machine
    if machine not in netwatch.CALLS:
        return
    looked = []
    monkeypatch.setattr(netwatch, "_listening", lambda kind, key, pid: looked.append(key))
    connect = netwatch.CALLS[machine][1]
    for port, own, refused, asked in [(3128, egress.OWN, False, []),
                                      (5432, egress.OWN, True, [5432]),
                                      (3128, (), True, [3128])]:
        address = ctypes.create_string_buffer(inet("127.0.0.1", port), 16)
        looked.clear()
        args = [3, ctypes.addressof(address), 16, 0, 0, 0]     # connect(3, &address, 16)
        said = netwatch._judge(os.getpid(), connect, args, "pypi.org", own)
        assert (said is not None, looked) == (refused, asked), (port, own, said)
