"""Binds by handle: a sandbox's bwrap arguments name the host paths they bind as
`Handle`s, and each is opened (paths.opened: component by component, never through a
link) only when the call starts, then given to bwrap as a descriptor (--bind-fd,
--ro-bind-fd). bwrap mounts what the descriptor holds and checks, after mounting, that
the mount is that file: a directory swapped for a link, or renamed, between the check
and the bind is refused, never followed.

A call started by agent-run gets the descriptors from it (`opened`); an MCP server,
started by the MCP SDK (which passes no descriptors), through `launcher`: a small
process that opens them itself, then becomes bwrap. Standard library only: the
launcher starts for every stdio server.
"""

import os
import sys

from agentctl import paths, spawn


class Handle(str):
    """A host path that bwrap is to get as a descriptor (its argument is the path
    until the call starts): opened O_PATH, for a bind."""
    flags = os.O_PATH


class Readable(Handle):
    """A host file that bwrap reads from a descriptor (--seccomp)."""
    flags = os.O_RDONLY


def opened(argv):
    """(argv with each Handle replaced by the number of a descriptor opened for it,
    those descriptors). LinkOnTheWay or OSError when a path has a link on its way, or is
    gone: the call must not start."""
    fds, out = [], []
    try:
        for word in argv:
            if isinstance(word, Handle):
                fds.append(paths.opened(str(word), word.flags))
                out.append(str(fds[-1]))
            else:
                out.append(word)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    for fd in fds:
        os.set_inheritable(fd, True)
    return out, fds


def launcher(argv):
    """argv that opens the handles in `argv` in a process of its own, then runs it: the
    launcher's first argument lists where the handles stand (2,7,...)."""
    where = ",".join(f"{n}{'r' if isinstance(w, Readable) else ''}"
                     for n, w in enumerate(argv) if isinstance(w, Handle))
    return spawn.python("from agentctl.tools.handles import launch; launch()", site=False) \
        + [where or "-"] + [str(w) for w in argv]


def launch():
    """The launcher's body: open, then exec."""
    where = {int(n.rstrip("r")): Readable if n.endswith("r") else Handle
             for n in sys.argv[1].split(",") if n.rstrip("r").isdigit()}
    given = [where[n](w) if n in where else w for n, w in enumerate(sys.argv[2:])]
    try:
        argv, _ = opened(given)
    except OSError as e:
        sys.stderr.write(f"bwrap: not started: {e.strerror or e}\n")
        sys.exit(126)
    os.execv(argv[0], argv)
