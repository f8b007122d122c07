"""The sandbox's outlet (agentctl(7), NETWORK): the one way out of a sandbox given
hosts. It starts inside, before the tool: it listens on the sandbox's own loopback at
PORT (where the proxy variables point), starts the tool as its child, and carries each
connection made to it over the socket bound into the sandbox to the egress proxy
outside (egress.py), handing over the tool's standard error with it (a refusal is said
there). It ends with the tool, with its exit status. The standard library only, and
as little of it as will do: it starts with each call given the network.

    python -S -P -c '...main()' SOCKET -- PROGRAM ARGS...
"""

import _socket      # (not socket: socket.py takes longer to import than the rest together)
import _thread
import fcntl
import os
import signal
import sys

PORT = 3128                     # on the sandbox's loopback
SOCKET_DIR = "/run/agentctl-net"    # the egress proxy's socket of its list, in the sandbox
SOCKET = "socket"
CHUNK = 1 << 20                 # the bytes a splice moves at most
F_SETPIPE_SZ = 1031
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("agentctl outlet: usage: SOCKET -- PROGRAM ARGS...\n")
        return 2
    path, command = argv[0], argv[2:]
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", PORT))
        listener.listen(64)
    except OSError as e:
        sys.stderr.write(f"agentctl outlet: can't listen on 127.0.0.1:{PORT}: {e}\n")
        return 71
    pid = os.fork()
    if pid == 0:
        listener.close()
        try:
            os.execvp(command[0], command)
        except OSError as e:
            sys.stderr.write(f"{command[0]}: {e.strerror}\n")
            os._exit(127)
    for number in FORWARDED:
        signal.signal(number, lambda n, _: _kill(pid, n))
    _thread.start_new_thread(_accept, (listener, path))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128


def _kill(pid, number):
    try:
        os.kill(pid, number)
    except OSError:
        pass


def _accept(listener, path):
    while True:
        try:
            fd, _ = listener._accept()      # (_socket's accept: a descriptor)
        except OSError:
            continue
        _thread.start_new_thread(_carry, (_socket.socket(fileno=fd), path))


def _carry(conn, path):
    out = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        out.connect(path)
        try:        # the tool's standard error, where a refusal is said
            out.sendmsg([b"\0"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                                   (2).to_bytes(4, sys.byteorder))])
        except OSError:     # (closed)
            out.sendall(b"\0")
    except OSError as e:
        sys.stderr.write(f"agentctl outlet: the egress proxy can't be reached: {e}\n")
        conn.close()
        out.close()
        return
    done = _thread.allocate_lock()
    done.acquire()
    _thread.start_new_thread(_pump_then, (out, conn, done))
    pump(conn, out)
    done.acquire()
    conn.close()
    out.close()


def _pump_then(source, target, done):
    try:
        pump(source, target)
    finally:
        done.release()


def pump(source, target, counts=None, index=0):
    """Copy `source` to `target` until its end, then end `target`'s writing, adding the
    bytes to counts[index]: spliced through a pipe (no copy through Python)."""
    r, w = os.pipe()
    try:
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, CHUNK)     # (64 KiB a splice else)
        except OSError:
            pass
        while True:
            n = os.splice(source.fileno(), w, CHUNK)
            if not n:
                break
            if counts is not None:
                counts[index] += n
            while n:
                n -= os.splice(r, target.fileno(), n)
    except OSError:
        pass
    finally:
        os.close(r)
        os.close(w)
        for sock, how in ((target, _socket.SHUT_WR), (source, _socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass
