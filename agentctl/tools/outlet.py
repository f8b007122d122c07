"""The sandbox's outlet (agentctl(7), NETWORK): the one way out of a sandbox given
hosts. It starts inside, before the tool: it listens on the sandbox's own loopback at
PORT (where the proxy variables point), starts the tool as its child, and hands each
connection made to it (its descriptor, with the tool's standard error, where a refusal
is said) over the socket bound into the sandbox to the egress proxy outside
(egress.py), which reads and writes it from there: the outlet copies no byte. It ends
with the tool, with its exit status. The standard library's built-in modules only, and
as few as will do, run as a script (no package imported): it starts with each call
given the network.

What can't go through it (UDP, DNS, a connection to an address, an abstract socket) is
watched (netwatch.py, beside it): the tool starts under a filter that makes the kernel
ask the outlet about those calls, and a refusal is a line on the tool's standard error
that names LIST, the hosts it may reach.

    python -S -P -c '...from outlet import run; run()' SOCKET [LIST] -- PROGRAM ARGS...
                                                                   (spawn.script)
"""

import _signal      # (not signal, socket nor os: what they import takes longer than
import _socket      # the rest of the outlet's start together; posix is os's own)
import _thread
import posix
import sys

PORT = 3128                     # on the sandbox's loopback
SOCKET_DIR = "/run/agentctl-net"    # the egress proxy's socket of its list, in the sandbox
SOCKET = "socket"
FORWARDED = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT)
# What Python ignores at its start and a program expects as the default (subprocess's
# restore_signals): a tool's `yes | head` ends by SIGPIPE, a file over its limit by SIGXFSZ.
RESTORED = (_signal.SIGPIPE, _signal.SIGXFSZ)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) >= 4 and argv[2] == "--":
        path, hosts, command = argv[0], argv[1], argv[3:]
    elif len(argv) >= 3 and argv[1] == "--":
        path, hosts, command = argv[0], None, argv[2:]
    else:
        sys.stderr.write("agentctl outlet: usage: SOCKET [LIST] -- PROGRAM ARGS...\n")
        return 2
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", PORT))
        listener.listen(64)
    except OSError as e:
        sys.stderr.write(f"agentctl outlet: can't listen on 127.0.0.1:{PORT}: {e}\n")
        return 71
    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM) \
        if hosts is not None else (None, None)
    pid = posix.fork()
    if pid == 0:
        listener.close()
        if theirs is not None:
            ours.close()
            _watched(theirs)
        _exec(command)
    for number in FORWARDED:
        _signal.signal(number, lambda n, _: _kill(pid, n))
    _thread.start_new_thread(_accept, (listener, path))
    if ours is not None:
        theirs.close()
        _watch(ours, hosts)
    while True:
        try:
            _, status = posix.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if posix.WIFSIGNALED(status):
        number = posix.WTERMSIG(status)
        _signal.signal(number, _signal.SIG_DFL)
        posix.kill(posix.getpid(), number)
    return posix.waitstatus_to_exitcode(status) if posix.WIFEXITED(status) else 128


def _exec(command):
    """In the child: become the tool (`command`, found on $PATH as execvp finds it), the
    signals Python ignores at its start back to their default."""
    for number in RESTORED:
        _signal.signal(number, _signal.SIG_DFL)
    name = command[0]
    places = [""] if "/" in name else \
        posix.environ.get(b"PATH", b"/bin:/usr/bin").decode("utf-8", "surrogateescape").split(":")
    error = None
    for place in places:
        try:
            posix.execv(f"{place}/{name}" if place else name, command)
        except OSError as e:        # (the first error that is not "not there" is said)
            if error is None or error.errno in (2, 20):     # (ENOENT, ENOTDIR)
                error = e
    sys.stderr.write(f"{name}: {error.strerror}\n")
    sys.stderr.flush()
    posix._exit(127)


def _watched(channel):
    """In the child, before it becomes the tool: the watch's filter installed, its
    listener handed to the outlet over `channel` (whose own sendmsg is not watched);
    where the kernel refuses it, no watch (the kernel's refusals alone)."""
    try:
        netwatch = _netwatch()
        fd = netwatch.install(netwatch.program(channel.fileno()))
        channel.sendmsg([b"w"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                                  fd.to_bytes(4, sys.byteorder))])
        posix.close(fd)
    except (OSError, ImportError, TypeError):   # (a machine not watched: no program)
        pass
    channel.close()


def _watch(channel, hosts):
    """The outlet's end of the watch: its listener from the child, answered by a
    thread of its own."""
    try:
        _, ancillary, _, _ = channel.recvmsg(1, _socket.CMSG_SPACE(4))
    except OSError:
        ancillary = []
    channel.close()
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS and len(data) >= 4:
            listener = int.from_bytes(data[:4], sys.byteorder)
            _thread.start_new_thread(_answer, (listener, hosts.replace("\n", ",")))


def _answer(listener, hosts):
    """The watch's thread: the kernel's questions answered (a question asked before it
    is ready waits for it)."""
    netwatch = _netwatch()
    netwatch.watch(listener, netwatch.said(2), hosts)


def _netwatch():
    """netwatch.py, beside this file (spawn.script puts its directory on the path)."""
    import netwatch  # (start-up: 1 ms, only where the sandbox's tool is watched)
    return netwatch


def _kill(pid, number):
    try:
        posix.kill(pid, number)
    except OSError:
        pass


def _accept(listener, path):
    while True:
        try:
            fd, _ = listener._accept()      # (_socket's accept: a descriptor)
        except OSError:
            continue
        try:
            hand_over(fd, path)
        finally:
            posix.close(fd)        # (egress holds it now, or it was refused)


def hand_over(fd, path):
    """Give the connection `fd` to the egress proxy at `path`, with the tool's standard
    error (fd 2): one byte that carries both descriptors (egress.hello)."""
    out = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        out.connect(path)
        given = fd.to_bytes(4, sys.byteorder)
        try:
            out.sendmsg([b"\0"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                                   given + (2).to_bytes(4, sys.byteorder))])
        except OSError:     # (its standard error closed)
            out.sendmsg([b"\0"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, given)])
    except OSError as e:
        sys.stderr.write(f"agentctl outlet: the egress proxy can't be reached: {e}\n")
    finally:
        out.close()


def run():
    """The outlet's process: main()'s status, without the interpreter's exit (what it
    undoes, the process's end does; its threads are left as they are)."""
    status = main()
    sys.stderr.flush()
    posix._exit(status)
