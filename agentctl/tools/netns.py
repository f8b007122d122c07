"""A call's own network, made before its sandbox (agentctl(7), NETWORK), where its
bwrap starts: a network namespace of its own (as root; else with a user namespace
that maps its user alone, which owns it), its loopback up, a listener there on
127.0.0.1:PORT (where the proxy variables point the tool's programs), the watch's
filter installed (netwatch.py); the listener, the tool's standard error, a pidfd of
bwrap and the watch's descriptor handed to the egress proxy in agent-run (egress.py)
over the socket of its list. bwrap then makes the rest of the sandbox in that
network, and the egress proxy accepts each connection on the listener itself and
answers the watch, until bwrap has ended: nothing of agentctl's runs in the
sandbox, and no process starts for it.

Made, as root, by a thread of agent-run that then starts bwrap (a network namespace
and a seccomp filter are a thread's own, and what it starts inherits them: bwrap
starts by vfork, and agent-run's memory is not copied); else in agent-run's child
that becomes bwrap (subprocess's preexec_fn: a user namespace is made only by a
process of one thread; what the child calls is prepared before the fork, so that
it imports nothing and takes no lock another thread may have held); for a stdio MCP
server, in its launcher (handles.launch) before it becomes bwrap. The standard
library only.
"""

import array
import ctypes
import fcntl
import gc
import os
import select
import signal
import socket
import struct
import threading

from agentctl.tools import netwatch
from agentctl.workspace import space

PORT = 3128                         # on the call's loopback
CLONE_NEWUSER, CLONE_NEWNET, CLONE_FS = 0x10000000, 0x40000000, 0x200
SIOCSIFFLAGS = 0x8914
UP = struct.pack("16sh22x", b"lo", 0x1 | 0x8 | 0x40)    # struct ifreq: IFF_UP|LOOPBACK|RUNNING
FAILED = 71                         # its exit status when it can't be made (EX_OSERR)


class Stage:
    """What is made for one call where its bwrap starts: given hosts, its network (the
    socket of its list's egress proxy at `path` connected now, in agent-run or the
    launcher); given `mount` (workspace.mount.Mount), its layer, in a mount namespace
    of its own. As root, namespaces a thread may make for itself (`spawned`:
    agent-run's memory is not copied); else with a user namespace, which only a
    process of one thread may make (`enter`, in a child)."""

    def __init__(self, path=None, mount=None):
        self.channel = self.watch = None
        if path is not None:
            self.channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.channel.connect(path)
            except OSError:
                self.channel.close()
                raise
        self.mount = mount
        self.threaded = os.geteuid() == 0
        # (a layer's namespaces are entered: as root, by a thread whose file system
        # attributes are its own; else its user namespace is the one made here)
        self.flags = (CLONE_NEWNET if path is not None else 0) | (
            CLONE_FS if self.threaded and mount is not None else 0) | (
            0 if self.threaded or mount is not None else CLONE_NEWUSER)
        self.maps = [] if mount else space.maps()     # (its user alone, as itself)
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.unshare = self.libc.unshare
        # the watch's filter, all but its system call made (None: a machine not watched)
        if self.channel is not None:
            self.watch = netwatch.prepared(self.channel.fileno(), self.libc)

    def enter(self):
        """In the process that becomes bwrap, before it does: the network made and
        handed over with its standard error (the tool's). Where it can't be, a line
        there and its end (FAILED): the call never runs without its way out, nor with
        another. (Its descriptors close at its exec: subprocess's close_fds, the
        launcher's.)"""
        try:
            listener, watch = self._made()
            if listener is not None:
                self._hand(listener, 2, os.pidfd_open(os.getpid()), watch)
        except BaseException as e:      # (in a child: nothing may rise past its exec)
            os.write(2, f"agentctl: {self._why(e)}\n".encode("utf-8", "replace"))
            os._exit(FAILED)

    def spawned(self, start, stderr):
        """As root (`threaded`): `start()`, which starts the process that becomes
        bwrap, run in a thread of its own that made the network first (a network
        namespace, and a seccomp filter, are a thread's own, and what it starts
        inherits them), then the network handed over with `stderr` (the tool's);
        what `start()` returned. The thread then waits for that process to end: it
        is its parent, whose end bwrap's --die-with-parent takes for agent-run's
        (and it starts no other thread, which would be under the filter). Unavailable
        when the network can't be made (a process started is killed)."""
        box, ready = {}, threading.Event()

        def run():
            listener = watch = pidfd = None
            collecting = gc.isenabled()     # (no finalizer of another thread's garbage
            gc.disable()                    # runs here, under the filter, before the
            try:                            # watch is handed over: none would answer)
                listener, watch = self._made()
                try:
                    box["started"] = start()
                except BaseException as e:
                    box["raised"] = e       # (its own error: as it is)
                    return
                pidfd = os.pidfd_open(box["started"].pid)
                if listener is not None:
                    self._hand(listener, stderr, pidfd, watch)
            except BaseException as e:
                box["error"] = e
            finally:
                for fd in (watch, pidfd if "error" in box else None):
                    if fd is not None:
                        os.close(fd)        # (the watch: the proxy's alone now, which
                if listener is not None:    # answers, or once it has let go of it,
                    listener.close()        # the kernel says ENOSYS)
                if collecting:
                    gc.enable()
                ready.set()
            if "error" not in box:
                try:
                    select.select([pidfd], [], [])     # (until its bwrap has ended)
                finally:
                    os.close(pidfd)
        threading.Thread(target=run, name="agentctl-netns", daemon=True).start()
        ready.wait()
        if "raised" in box:
            raise box["raised"]
        if "error" in box:
            if "started" in box:
                box["started"].kill()
                box["started"].wait()
            from agentctl.tools.bwrap import Unavailable  # (start-up: 1 ms, only for a network refused)
            raise Unavailable(self._why(box["error"]))
        return box["started"]

    def _made(self):
        """The namespaces made (its layer's entered: unprivileged, before the network
        is made in its user namespace; as root, once the thread's file system
        attributes are its own): (the network's listener, the watch's descriptor or
        None; (None, None) without a network)."""
        if self.mount is not None and not self.threaded:
            self._layer()
        if self.flags and self.unshare(self.flags) != 0:
            raise OSError(ctypes.get_errno(), f"unshare: {os.strerror(ctypes.get_errno())}")
        for path, text in self.maps:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, text)
            finally:
                os.close(fd)
        if self.mount is not None and self.threaded:
            self._layer()
        if self.channel is None:
            return None, None
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            fcntl.ioctl(probe, SIOCSIFFLAGS, UP)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", PORT))
        listener.listen(64)
        try:
            return listener, self.watch.install() if self.watch is not None else None
        except OSError:
            return listener, None   # (a kernel without user notification: its own refusals)

    def _layer(self):
        try:
            self.mount.made(self.libc)
        except OSError as e:
            raise _Layer(e.strerror or str(e)) from None

    def _hand(self, listener, stderr, pidfd, watch):
        given = [listener.fileno(), stderr, pidfd] + ([watch] if watch is not None else [])
        self.channel.sendmsg([b"\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                        array.array("i", given).tobytes())])

    def close(self):
        """Its side of the socket, once the network is handed (or the call failed)."""
        if self.channel is not None:
            self.channel.close()

    def _why(self, error):
        why = getattr(error, "strerror", None) or error
        if isinstance(error, _Layer):
            return f"workspace: {why}"
        if self.channel is None:
            return f"workspace: can't make the call's mount namespace: {why}"
        return f"net: can't make the call's network namespace: {why}"


class _Layer(Exception):
    """The call's layer could not be mounted (its own words)."""


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
    kinds = [_listening, lambda fd: True, _pidfd, _watch]
    if data != b"\0" or not 3 <= len(fds) <= 4 or not all(
            kind(fd) for fd, kind in zip(fds, kinds)):
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


def _pidfd(fd):
    """Whether `fd` is a pidfd (of a process alive or ended)."""
    try:
        signal.pidfd_send_signal(fd, 0)
    except (ProcessLookupError, PermissionError):
        return True
    except OSError:
        return False
    return True


def _watch(fd):
    """Whether `fd` is a seccomp listener (which knows no question 0)."""
    try:
        fcntl.ioctl(fd, netwatch.ID_VALID, struct.pack("=Q", 0))
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False
