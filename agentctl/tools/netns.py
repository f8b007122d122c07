"""A call's own network, made before its sandbox (agentctl(7), NETWORK). The process
that is to become bwrap first makes a network namespace of its own (as root; else
with a user namespace that maps its user alone, which owns it), brings its loopback
up, listens there on 127.0.0.1:PORT (where the proxy variables point the tool's
programs), installs the watch's filter (netwatch.py), and hands the listener, its
standard error (the tool's), a pidfd of itself and the watch's descriptor to the
egress proxy in agent-run (egress.py) over the socket of its list; then it becomes
bwrap, which makes the rest of the sandbox in that network. The egress proxy accepts
each connection on the listener itself and answers the watch, until that process has
ended: nothing of agentctl's runs in the sandbox, and no process starts for it.

Made in agent-run's child that becomes bwrap (subprocess's preexec_fn, in a process
whose other threads did not follow it through the fork: what it calls is prepared
before, so that the child imports nothing and takes no lock another thread may have
held, it makes system calls), or in the MCP launcher (handles.launch) before it
becomes bwrap. The standard library only.
"""

import array
import ctypes
import fcntl
import os
import socket
import struct
import threading

from agentctl.tools import netwatch

PORT = 3128                         # on the call's loopback
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
SIOCSIFFLAGS = 0x8914
UP = struct.pack("16sh22x", b"lo", 0x1 | 0x8 | 0x40)    # struct ifreq: IFF_UP|LOOPBACK|RUNNING
FAILED = 71                         # its exit status when it can't be made (EX_OSERR)


class Stage:
    """One call's network, to be made by the process that becomes its bwrap
    (`enter`): the socket of its list's egress proxy at `path` connected now, in
    agent-run or the launcher, and all the child needs prepared."""

    def __init__(self, path):
        self.channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.channel.connect(path)
        except OSError:
            self.channel.close()
            raise
        self.ids = None if os.geteuid() == 0 else (os.geteuid(), os.getegid())
        self.maps = [(f"/proc/self/{name}", text.encode()) for name, text in (
            ("setgroups", "deny"), ("uid_map", f"{os.geteuid()} {os.geteuid()} 1\n"),
            ("gid_map", f"{os.getegid()} {os.getegid()} 1\n"))] if self.ids else []
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.unshare = self.libc.unshare
        # the watch's filter, all but its system call made (None: a machine not watched)
        self.watch = netwatch.prepared(self.channel.fileno(), self.libc)

    def enter(self):
        """In the process that becomes bwrap, before it does: the network made and
        handed over. Where it can't be, a line on its standard error and its end
        (FAILED): the call never runs without its way out, nor with another."""
        try:
            self._enter()
        except BaseException as e:      # (in a child: nothing may rise past its exec)
            os.write(2, f"agentctl: net: can't make the call's network namespace: "
                        f"{getattr(e, 'strerror', None) or e}\n".encode("utf-8", "replace"))
            os._exit(FAILED)

    def _enter(self):
        if self.unshare(CLONE_NEWNET | (CLONE_NEWUSER if self.ids else 0)) != 0:
            raise OSError(ctypes.get_errno(), f"unshare: {os.strerror(ctypes.get_errno())}")
        for path, text in self.maps:        # (its own user alone, as itself)
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, text)
            finally:
                os.close(fd)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            fcntl.ioctl(probe, SIOCSIFFLAGS, UP)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", PORT))
        listener.listen(64)
        given = [listener.fileno(), 2, os.pidfd_open(os.getpid())]
        if self.watch is not None:
            try:
                given.append(self.watch.install())
            except OSError:
                pass            # (a kernel without user notification: the kernel's alone)
        self.channel.sendmsg([b"\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                        array.array("i", given).tobytes())])
        # (the descriptors close at the exec: subprocess's close_fds, the launcher's)

    def close(self):
        """Its side of the socket, once the child has it (or the call failed)."""
        self.channel.close()


class Network:
    """A call's network as the egress proxy holds it (received()): `listener`, where
    its connections wait; `say(line)`, a line on the tool's standard error; `pidfd`,
    readable once its bwrap has ended; `watch`, the watch's descriptor (or None)."""

    def __init__(self, listener, stderr, pidfd, watch):
        self.listener, self.stderr, self.pidfd, self.watch = listener, stderr, pidfd, watch
        self.lock = threading.Lock()

    def say(self, line):
        """`line` written whole on the tool's standard error, while the call lasts."""
        with self.lock:
            if self.stderr is None:
                return
            try:
                os.write(self.stderr, line.encode("utf-8", "replace"))
            except OSError:
                pass

    def close(self):
        with self.lock:
            self.listener.close()
            for fd in (self.stderr, self.pidfd, self.watch):
                if fd is not None:
                    os.close(fd)
            self.stderr = self.pidfd = self.watch = None


def received(door):
    """The Network that Stage.enter hands over `door`: one byte with its descriptors,
    each checked for what it must be (a listening TCP socket, any descriptor, a pidfd,
    a seccomp listener); ValueError (every descriptor closed) when one is not."""
    fds = array.array("i")
    data, ancillary, _, _ = door.recvmsg(1, socket.CMSG_SPACE(5 * fds.itemsize),
                                         socket.MSG_CMSG_CLOEXEC)
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    kinds = [_listening, None, "anon_inode:[pidfd]", "anon_inode:seccomp notify"]
    if data != b"\0" or not 3 <= len(fds) <= 4 or not all(
            kind is None or (kind(fd) if callable(kind) else _inode(fd) == kind)
            for fd, kind in zip(fds, kinds)):
        for fd in fds:
            os.close(fd)
        raise ValueError("not a call's network")
    listener = socket.socket(fileno=fds[0])
    listener.setblocking(False)
    return Network(listener, fds[1], fds[2], fds[3] if len(fds) > 3 else None)


def _listening(fd):
    """Whether `fd` is a listening TCP socket."""
    copy = os.dup(fd)
    try:
        given = socket.socket(fileno=copy)
    except OSError:         # (not a socket)
        os.close(copy)
        return False
    with given:
        try:
            return (given.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE) == socket.SOCK_STREAM
                    and given.family in (socket.AF_INET, socket.AF_INET6)
                    and bool(given.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)))
        except OSError:
            return False


def _inode(fd):
    """What kind of anonymous inode `fd` is (as /proc says), or None."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
