"""The watch on what can't go through the egress proxy (agentctl(7), NETWORK): a
datagram or a connection to an address outside the sandbox (UDP, DNS to a server named
by address, a program that ignores the proxy variables), a DNS query to a loopback
resolver or a connection to a loopback port where nothing of the sandbox listens (the
host's are not there), a connection to an abstract unix socket that does not exist.
The sandbox's network has no route out and none of its host's abstract sockets, so the
kernel refuses them anyway, with an errno that names nothing; the watch makes each
refusal the line a refused host gets on the tool's standard error.

How: seccomp's user notification. The process that becomes the call's bwrap installs
(netns.py), before its exec, a filter (Prepared) that makes the kernel ask the egress
proxy in agent-run about each connect(), each sendto() given an address and each
sendmsg()/sendmmsg() of it and of all it starts; the proxy reads the address from
the caller's memory and answers (answer()): go on (the kernel then does the call as
it would have), or refuse it (ECONNREFUSED, ENETUNREACH) after the line. What it lets
go, the kernel still judges: the watch refuses, it never allows more (a caller that
changes the address after it was read gets the kernel's own answer).

The standard library only (the MCP launcher installs it too).
"""

import ctypes
import errno
import fcntl
import os
import select
import socket
import struct
import sys

# (AUDIT_ARCH, connect, sendto, sendmsg, sendmmsg, seccomp) of each machine watched
CALLS = {"x86_64": (0xC000003E, 42, 44, 46, 307, 317),
         "aarch64": (0xC00000B7, 203, 206, 211, 269, 277)}
ALLOW, NOTIFY = 0x7FFF0000, 0x7FC00000      # SECCOMP_RET_ALLOW, SECCOMP_RET_USER_NOTIF
SET_MODE_FILTER, NEW_LISTENER = 1, 1 << 3
RECV, SEND, ID_VALID = 0xC0502100, 0xC0182101, 0x40082102   # SECCOMP_IOCTL_NOTIF_*
CONTINUE = 1                                # SECCOMP_USER_NOTIF_FLAG_CONTINUE
NOTIF, RESP = struct.Struct("=QII iI Q 6Q"), struct.Struct("=QqiI")
DNS = 53


def program(exempt=0xFFFFFFFF, machine=None):
    """The filter (struct sock_filter[]), or None on a machine not watched; a sendmsg()
    on descriptor `exempt` is not asked about (the one that hands the listener over,
    closed before the tool starts)."""
    found = CALLS.get(machine or os.uname().machine)
    if found is None:
        return None
    arch, connect, sendto, sendmsg, sendmmsg, _ = found
    ld = lambda offset: (0x20, 0, 0, offset)            # noqa: E731  BPF_LD|W|ABS
    jeq = lambda k, jt, jf: (0x15, jt, jf, k)           # noqa: E731  BPF_JMP|JEQ|K
    code = [ld(4), jeq(arch, 0, 11),                    # another ABI: let it be
            ld(0), jeq(connect, 10, 0), jeq(sendmmsg, 9, 0),
            jeq(sendto, 0, 4),
            ld(16 + 8 * 4), jeq(0, 0, 6),               # sendto's address: NULL
            ld(20 + 8 * 4), jeq(0, 3, 4),               # (both halves)
            jeq(sendmsg, 0, 2),
            ld(16), jeq(exempt, 0, 1),                  # its descriptor
            (0x06, 0, 0, ALLOW), (0x06, 0, 0, NOTIFY)]
    return b"".join(struct.pack("=HBBI", *op) for op in code)


class _Program(ctypes.Structure):      # struct sock_fprog
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class Prepared:
    """The filter ready to install (`install()`: a system call alone, for a process
    between its fork and its exec)."""

    def __init__(self, code, libc):
        self.buffer = ctypes.create_string_buffer(code, len(code))
        self.program = _Program(len(code) // 8, ctypes.addressof(self.buffer))
        self.syscall, self.number = libc.syscall, CALLS[os.uname().machine][5]

    def install(self):
        """The filter installed in this process (inherited by all it starts); the
        listener's descriptor, from which the kernel's questions are read."""
        fd = self.syscall(self.number, SET_MODE_FILTER, NEW_LISTENER,
                          ctypes.byref(self.program))
        if fd < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        return fd


def prepared(exempt, libc=None):
    """The filter that exempts descriptor `exempt`, prepared (Prepared), or None on a
    machine not watched."""
    code = program(exempt)
    return None if code is None else Prepared(code, libc or ctypes.CDLL(None, use_errno=True))


def watch(listener, say, hosts):
    """Answer the kernel's questions on `listener` until no process is left under the
    filter: `say(line)` writes a refusal's line; `hosts`, the list's text for it."""
    poller = select.poll()
    poller.register(listener, select.POLLIN)
    while True:
        events = poller.poll()
        if any(event & (select.POLLHUP | select.POLLERR) for _, event in events):
            return
        answer(listener, say, hosts)


def answer(listener, say, hosts, own=()):
    """Answer the question waiting on `listener` (readable): let the call go on, or
    refuse it with its line (`say`). `own`: (kind, port) pairs known to listen in the
    caller's network (the proxy's listener), not looked up: /proc/PID/net/tcp walks
    every TCP socket of the machine (2 ms where it has a few hundred)."""
    question = bytearray(NOTIF.size)
    try:
        fcntl.ioctl(listener, RECV, question)
    except OSError:
        return                      # (its caller gone before it was asked, or none)
    (ident, pid, _, nr, _, _, *args) = NOTIF.unpack(question)
    try:
        refusal = _judge(pid, nr, args, hosts, own)
        fcntl.ioctl(listener, ID_VALID, struct.pack("=Q", ident))  # (pid not reused)
    except OSError:
        refusal = None
    if refusal is not None:
        say(refusal[1])
    answered = RESP.pack(ident, 0, -refusal[0], 0) if refusal else \
        RESP.pack(ident, 0, 0, CONTINUE)
    try:
        fcntl.ioctl(listener, SEND, answered)
    except OSError:
        pass                        # (the caller was killed meanwhile)


def _judge(pid, nr, args, hosts, own=()):
    """(errno, line) of a call to refuse, or None to let it go."""
    calls = CALLS[os.uname().machine]
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        if nr in (calls[1], calls[2]):      # connect(fd, addr, len), sendto(..., addr, len)
            where, length = (args[1], args[2]) if nr == calls[1] else (args[4], args[5])
        else:                               # sendmsg(fd, msghdr), sendmmsg(fd, mmsghdr[])
            where, length = struct.unpack("=QI", os.pread(mem.fileno(), 12, args[1]))
        if not where or length < 2:
            return None
        address = os.pread(mem.fileno(), min(length, 128), where)
    return judge(address, hosts, datagram=nr != calls[1],
                 listening=lambda kind, key: (kind, key) in own or _listening(kind, key, pid))


def judge(address, hosts, datagram=False, listening=None):
    """(errno, line) refusing a call to `address` (a struct sockaddr's bytes), or None.
    `listening(kind, port)`: whether something of the sandbox's listens there."""
    listening = listening or _listening
    family = struct.unpack("=H", address[:2])[0]
    if family == socket.AF_UNIX:
        name = address[2:]
        if not name[:1] == b"\0" or len(name) < 2:
            return None                     # a path: the files decide
        name = name[1:].rstrip(b"\0").decode("utf-8", "replace")
        if listening("unix", name):
            return None
        return errno.ECONNREFUSED, (
            f"agentctl: net: refused abstract socket @{name}: the sandbox has none of its "
            "host's abstract sockets, and none of its own is named so\n")
    if family == socket.AF_INET and len(address) >= 8:
        port, ip = struct.unpack("!H", address[2:4])[0], socket.inet_ntop(
            socket.AF_INET, address[4:8])
        local = ip.startswith("127.") or ip == "0.0.0.0"
    elif family == socket.AF_INET6 and len(address) >= 24:
        port, ip = struct.unpack("!H", address[2:4])[0], socket.inet_ntop(
            socket.AF_INET6, address[8:24])
        local = ip in ("::1", "::") or ip.startswith("::ffff:127.")
    else:
        return None
    shown = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
    its = f"its list: {hosts}" if hosts else "it has no list"
    if port == DNS and not (local and (listening("udp", DNS) or listening("tcp", DNS))):
        return (errno.ECONNREFUSED if local else errno.ENETUNREACH), (
            f"agentctl: net: refused DNS to {shown}: the sandbox has no DNS; its proxy "
            f"resolves the names it is asked for (HTTPS_PROXY, HTTP_PROXY: {its})\n")
    if local and not datagram and not listening("tcp", port):
        return errno.ECONNREFUSED, (
            f"agentctl: net: refused a connection to {shown}: the sandbox's loopback is its "
            f"own, none of its host's services is there; through its proxy (HTTPS_PROXY, "
            f"HTTP_PROXY), a list naming {shown} by address reaches the host's ({its})\n")
    if local:
        return None                         # its own loopback: its own servers, the proxy
    kind = "a datagram (UDP)" if datagram else "a connection"
    return errno.ENETUNREACH, (
        f"agentctl: net: refused {kind} to {shown}: the sandbox reaches hosts by name "
        f"through its proxy alone (HTTPS_PROXY, HTTP_PROXY; {its}), and no grant "
        "allows an address outside it\n")


def _listening(kind, key, pid="self"):
    """Whether the network namespace of process `pid` (the caller's: the sandbox's)
    has a socket of `kind` bound at port `key` (udp, tcp: listening) or an abstract
    unix socket named `key`."""
    if kind == "unix":
        try:
            with open(f"/proc/{pid}/net/unix", encoding="utf-8", errors="replace") as f:
                return any(line.split()[-1] == f"@{key}" for line in f
                           if len(line.split()) >= 8)
        except OSError:
            return False
    port = f":{key:04X}"
    for table in (kind, kind + "6"):
        try:
            with open(f"/proc/{pid}/net/{table}", encoding="ascii") as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if fields[1].endswith(port) and (kind == "udp" or fields[3] == "0A"):
                        return True
        except OSError:
            continue
    return False


def said(fd=2):
    """say() for watch(): a line written whole on `fd` (the tool's standard error)."""
    def say(line):
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        except OSError:
            pass
    return say


if __name__ == "__main__":     # (a check by hand: python -m agentctl.tools.netwatch CMD...)
    import threading
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        a.close()
        fd = prepared(b.fileno()).install()
        socket.send_fds(b, [b"x"], [fd])
        b.close()
        os.execvp(sys.argv[1], sys.argv[1:])
    b.close()
    _, (listener,), _, _ = socket.recv_fds(a, 1, 1)
    threading.Thread(target=watch, args=(listener, said(), "example.org"),
                     daemon=True).start()
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
