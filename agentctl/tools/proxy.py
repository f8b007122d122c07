"""How a sandboxed tool's agentctl programs act as its agent (agentctl(7), SANDBOX).

A sandboxed call sees no database. Inside, agent-send, agent-fork ... (the directory
PROGRAMS_DIR, first on its PATH) only forward: each sends its arguments, its
working directory, its standard input, output and error (the descriptors
themselves) and the proxy's key over a socket to agent-run (`Server`), and exits with
the status it gets back. agent-run runs the real program outside the sandbox with the
three descriptors, as the agent: AGENT_ID and the database are agent-run's, whatever
the tool's environment says, no --db is taken (AGENTCTL_PROXIED), the programs the
table refuses (REFUSED, agentctl/programs.py) are not offered, nor what only the
operator may do (OPERATOR_ONLY), and the programs' own rules say what an agent may do
(only to itself and its descendants: ops/authority.py). A program still running when
its tool's process goes away is killed.

The socket is in a directory of its own in agentctl's private run-time directory
(paths.runtime), bound read-only into the sandbox at MOUNT; a request without the server's key
(`Server.inside()`, in the sandbox's environment), or from a process of another uid,
is refused. At most MAX_CONNECTIONS requests are served at once, and a request must
come within REQUEST_TIMEOUT of its connection.

The forwarding side is forward.py, what runs in the sandbox (agent-PROGRAM there).
"""

import array
import hmac
import json
import os
import secrets
import select
import shlex
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time

from agentctl import paths, spawn
from agentctl.programs import OFFERED as PROGRAMS, REFUSED  # (each refused says so)
from agentctl.tools.forward import FDS, KEY, MAX_REQUEST, TEMPFAIL, USAGE
from agentctl.tools.sandbox import PROXY as MOUNT

# What only the operator may do with a program offered: program -> {option: what it does}.
# Any spelling click takes is refused (--opt VALUE, --opt=VALUE), and any prefix of the
# option, though click takes none.
OPERATOR_ONLY = {"log": {"--prune-before": "prune the event log"}}
MAX_CONNECTIONS = 16        # requests served at once: one more is told to try again
REQUEST_TIMEOUT = 10.0      # seconds from a connection to its request
GRACE = 1.0                 # seconds the server waits on a tool it refuses (to say so)
SOCKET = "socket"
PROGRAMS_DIR = "bin"
SUN_PATH = 108              # the bytes of a socket's path, with its NUL
REFUSAL = "agentctl: a sandboxed tool's request was refused"
BUSY = (f"agentctl: too many agentctl programs at once from this sandbox (at most "
        f"{MAX_CONNECTIONS}): try again")


def operator_only(program, argv):
    """The option of `argv` that only the operator may give agent-`program`, and what
    it does; None when there is none."""
    options = OPERATOR_ONLY.get(program, {})
    for word in argv:
        name = word.split("=", 1)[0]
        for option, what in options.items():
            if len(name) > 2 and option.startswith(name):
                return option, what
    return None


class Refused(Exception):
    """A request not served: the exit status its forwarder gets, and the line said on
    its standard error."""

    def __init__(self, status=USAGE, line=REFUSAL):
        super().__init__(line)
        self.status, self.line = status, line


class Server:
    """agent-run's side: a socket in a private directory (`dir`, with the forwarding
    programs, to bind read-only at MOUNT in each sandbox, whose environment gets
    `inside()`), and a thread that answers it."""

    def __init__(self, environment, cwd, peer_uids=None):
        self.environment = dict(environment, AGENTCTL_PROXIED="1")
        for name in ("AGENTCTL_SOCKET", KEY):
            self.environment.pop(name, None)
        self.cwd = cwd
        self.key = secrets.token_hex(32)
        self.peer_uids = {os.getuid(), *(peer_uids or ())}
        self.lock = threading.Lock()
        self.active = 0             # connections being served
        self.running = {}           # the programs running for them: peer (pid, uid, gid)
        self.closed = False
        self.dir = _directory()
        try:
            self._programs()
            path = os.path.join(self.dir, SOCKET)
            if len(os.fsencode(path)) >= SUN_PATH:
                raise OSError(f"{path}: too long for a socket: set XDG_RUNTIME_DIR to a "
                              "shorter directory")
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self.listener.bind(path)
            os.chmod(path, 0o666)       # a tool may run as another uid: the key decides
            self.listener.listen(MAX_CONNECTIONS)
        except BaseException:
            self._remove()
            raise
        threading.Thread(target=self._accept, daemon=True, name="agentctl-proxy").start()

    def inside(self):
        """The environment variables a sandbox needs to reach this server."""
        return {"AGENTCTL_SOCKET": f"{MOUNT}/{SOCKET}", KEY: self.key}

    def _programs(self):
        """agent-PROGRAM in PROGRAMS_DIR: forward(PROGRAM), under agentctl's Python."""
        forwarder = shlex.join(spawn.python("from agentctl.tools.forward import forward; "
                                            "sys.exit(forward(sys.argv[1], sys.argv[2:]))"))
        bin_dir = os.path.join(self.dir, PROGRAMS_DIR)
        os.mkdir(bin_dir)
        os.chmod(bin_dir, 0o755)
        for name in PROGRAMS + REFUSED:
            _write(os.path.join(bin_dir, f"agent-{name}"), 0o755,
                   f"#!/bin/sh\nexec {forwarder} {name} \"$@\"\n")

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                if self.closed:
                    return
                time.sleep(0.05)        # (out of descriptors, say): not a busy loop
                continue
            with self.lock:
                busy = self.active >= MAX_CONNECTIONS
                if not busy:
                    self.active += 1
            if busy:
                self._busy(conn)
                continue
            try:
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
            except RuntimeError:        # no thread to be had
                self._done(conn)

    def _busy(self, conn):
        """Tell a connection over MAX_CONNECTIONS to try again (on its standard error,
        if its request comes soon enough)."""
        with conn:
            conn.settimeout(GRACE)
            try:
                _, _, fds = _receive(conn)
            except OSError:
                fds = []
            try:
                _refuse(conn, fds, Refused(TEMPFAIL, BUSY))
            finally:
                _close(fds)

    def _serve(self, conn):
        try:
            conn.settimeout(REQUEST_TIMEOUT)
            try:
                data, flags, fds = _receive(conn)
            except OSError:
                return          # no request in time, or the tool went away
            try:
                proc = self._start(conn, data, flags, fds)
            except Refused as refusal:
                _refuse(conn, fds, refusal)
                return
            finally:
                _close(fds)
            conn.settimeout(None)
            _reply(conn, self._watch(conn, proc))
        finally:
            self._done(conn)

    def _done(self, conn):
        conn.close()
        with self.lock:
            self.active -= 1

    def _start(self, conn, data, flags, fds):
        """The program a request asks for, started with its descriptors (or Refused):
        the request must be whole, carry the key, and come from a process of a uid
        the server's tools run as."""
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(data) > MAX_REQUEST \
                or len(fds) != FDS:
            raise Refused()
        try:
            request = json.loads(data.decode("utf-8", "surrogateescape"))
        except (ValueError, RecursionError):    # (not JSON, or nested beyond reason)
            raise Refused() from None
        key = request.get("key") if isinstance(request, dict) else None
        if not isinstance(key, str) or not hmac.compare_digest(
                key.encode("utf-8", "surrogateescape"), self.key.encode()):
            raise Refused()
        peer = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                   struct.calcsize("3i")))  # pid, uid, gid
        if peer[1] not in self.peer_uids:
            raise Refused()
        program, argv = request.get("program"), request.get("argv")
        if program not in PROGRAMS or not isinstance(argv, list) \
                or not all(isinstance(a, str) for a in argv):
            raise Refused()
        forbidden = operator_only(program, argv)
        if forbidden:
            option, what = forbidden
            raise Refused(USAGE, f"agent-{program}: {option}: only the operator may {what} "
                                 "(not a sandboxed tool)")
        cwd = os.path.abspath(str(request.get("cwd") or self.cwd))
        if not paths.inside(cwd, [self.cwd]) or not os.path.isdir(cwd):
            cwd = self.cwd
        try:
            proc = subprocess.Popen(
                spawn.program(program, *argv),
                stdin=fds[0], stdout=fds[1], stderr=fds[2], env=self.environment, cwd=cwd)
        except (OSError, ValueError):       # (a NUL in an argument: ValueError)
            raise Refused() from None
        with self.lock:
            self.running[proc] = peer
        return proc

    def _watch(self, conn, proc):
        """Wait for the program, killing it if the tool's side of the connection closes
        first; its exit status."""
        poll = select.poll()
        poll.register(conn, select.POLLIN)
        try:
            pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):   # (before Linux 5.3: look ten times a second)
            pidfd = None
        else:
            poll.register(pidfd, select.POLLIN)
        timeout = None if pidfd is not None else 100
        try:
            while proc.poll() is None:
                if conn.fileno() not in [fd for fd, _ in poll.poll(timeout)]:
                    continue
                try:
                    gone = not conn.recv(1, socket.MSG_DONTWAIT)  # (more is dropped)
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    proc.kill()         # the tool went away: so does its program
                    break
            proc.wait()
        finally:
            if pidfd is not None:
                os.close(pidfd)
            with self.lock:
                self.running.pop(proc, None)
        code = proc.returncode
        return code if code >= 0 else 128 - code

    def close(self):
        if self.closed:
            return
        self.closed = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)    # (wakes the accepting thread)
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            running = list(self.running)
        for proc in running:
            try:
                proc.kill()
            except OSError:
                pass
        self._remove()

    def _remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


_swept = set()      # the bases whose directories of dead servers this process removed


def _directory():
    """A new directory proxy-PID-RANDOM in paths.runtime(), made private, once the directories
    of servers no longer running are removed from it."""
    parent = paths.runtime(make=True)
    if parent not in _swept:
        _swept.add(parent)
        _sweep(parent)
    path = tempfile.mkdtemp(prefix=f"proxy-{os.getpid()}-", dir=parent)
    os.chmod(path, 0o755)       # (a tool of another uid reads its programs)
    return path


def _sweep(parent):
    """Remove the directories of the servers in `parent` whose process is gone (killed
    before it could close them)."""
    for name in os.listdir(parent):
        word, _, rest = name.partition("-")
        pid = rest.partition("-")[0]
        if word != "proxy" or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        except OSError:             # (alive, another uid's: not in this directory)
            pass


def _receive(conn):
    """A request: its bytes, recvmsg's flags, and the descriptors that came with it
    (each to be closed by the caller). OSError if none comes."""
    data, ancillary, flags, _ = conn.recvmsg(MAX_REQUEST + 1, socket.CMSG_SPACE(FDS * 4),
                                             socket.MSG_CMSG_CLOEXEC)
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return data, flags, list(fds)


def _refuse(conn, fds, refusal):
    """Say why on the tool's standard error, when it sent the three descriptors, and
    answer its status."""
    if len(fds) == FDS:
        _say(fds[2], refusal.line)
    _reply(conn, refusal.status)


def _say(fd, line):
    """Write a line on a tool's descriptor, waiting at most GRACE for room (a pipe no
    one reads may be full)."""
    try:
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        if poll.poll(GRACE * 1000):
            os.write(fd, f"{line}\n".encode())
    except OSError:
        pass


def _reply(conn, code):
    try:
        conn.send(code.to_bytes(4, "big", signed=True))
    except OSError:
        pass


def _close(fds):
    for fd in fds:
        os.close(fd)


def _write(path, mode, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
