"""Binds by handle: a sandbox's bwrap arguments name the host paths they bind as
`Handle`s, and each is opened (paths.opened: component by component, never through a
link) only when the call starts, then given to bwrap as a descriptor (--bind-fd,
--ro-bind-fd). bwrap mounts what the descriptor holds and checks, after mounting, that
the mount is that file: a directory swapped for a link, or renamed, between the check
and the bind is refused, never followed.

As root, bwrap makes the call a user namespace of its own (`Users`) whose maps
agentctl writes (`Handshake`): bwrap would map one id alone, its own (root), but the
namespace must also hold the user the tools run as, whose processes RLIMIT_NPROC
then counts in that namespace alone (the call's, not all of that user's). While
bwrap waits for its maps, its child gets the call's rlimits too (inherited by all
it starts: no prlimit to run).

A call started by agent-run gets the descriptors from it (`opened`); an MCP server,
started by the MCP SDK (which passes no descriptors), through `launcher`: a small
process that opens them itself, then becomes bwrap (a child of its own writes the
maps). Standard library only: the launcher starts for every stdio server.
"""

import os
import resource
import sys

from agentctl import paths, spawn


class Handle(str):
    """A host path that bwrap is to get as a descriptor (its argument is the path
    until the call starts): opened O_PATH, for a bind."""
    flags = os.O_PATH


class Readable(Handle):
    """A host file that bwrap reads from a descriptor (--seccomp)."""
    flags = os.O_RDONLY


class Stderr(Handle):
    """A copy of the starter's standard error, as bwrap's --json-status-fd (an MCP
    server's: its exit status at the end of its log). bwrap closes that descriptor
    in the sandbox, so it can't be the standard error itself."""


class Users(str):
    """bwrap's --unshare-user, as root: a user namespace whose maps agentctl writes
    (Handshake), root for bwrap's set-up and `uid`, `gid` (whom the tools run as);
    `limits`, (RLIMIT_*, value) pairs, set on bwrap's child meanwhile."""

    def __new__(cls, uid, gid, limits=()):
        word = super().__new__(cls, "--unshare-user")
        word.ids, word.limits = (uid, gid), tuple(limits)
        return word

    def coded(self):
        """As the launcher's first argument names it: UID:GID[:RLIMIT=VALUE;...]."""
        return ":".join([str(self.ids[0]), str(self.ids[1])]
                        + [";".join(f"{r}={v}" for r, v in self.limits)])

    @classmethod
    def decoded(cls, text):
        uid, gid, limits = (text.split(":") + [""])[:3]
        return cls(int(uid), int(gid), [tuple(int(n) for n in pair.split("="))
                                        for pair in limits.split(";") if pair])


class Handshake:
    """The maps of the user namespace bwrap makes: `give` them once bwrap has started,
    and it goes on; until then it waits (a call never runs with a map of bwrap's)."""

    def __init__(self, ids, limits=()):
        self.ids, self.limits = ids, limits
        self.info, info_w = os.pipe()       # where bwrap says its child's pid
        block_r, self.block = os.pipe()     # and where it waits for a byte
        self.theirs = [info_w, block_r]     # (bwrap's ends: passed, then closed)
        self.arguments = ["--unshare-user", "--info-fd", str(info_w), "--userns-block-fd",
                          str(block_r)]

    def give(self):
        """Read the pid of bwrap's child (its info: a JSON object), set its limits,
        write its maps, let it go on. A bwrap that ended first is let be (its status
        says why). A limit that can't be set: no maps (the child, unmapped, can't
        become the tools' user: it fails), and OSError, once bwrap goes on to fail."""
        said = b""
        while not said.endswith(b"}\n"):      # (its child holds the pipe open: no EOF)
            chunk = os.read(self.info, 4096)
            if not chunk:
                break
            said += chunk
        pid = said.partition(b'"child-pid":')[2].split(b",")[0].split(b"\n")[0].strip()
        refused = None
        if pid.isdigit():
            try:
                for limit, value in self.limits:
                    resource.prlimit(int(pid), limit, (value, value))
                for name, own in zip(("uid_map", "gid_map"), self.ids):
                    with open(f"/proc/{int(pid)}/{name}", "w") as f:
                        f.write(f"0 0 1\n{own} {own} 1\n")
            except OSError as e:
                refused = e
        try:
            os.write(self.block, b"1")
        except OSError:
            pass
        self.close()
        if refused is not None:
            raise refused

    def close(self):
        for fd in (self.info, self.block):
            if fd is not None:
                os.close(fd)
        self.info = self.block = None


def opened(argv, mount=None):
    """(argv with each Handle replaced by the number of a descriptor opened for it,
    those descriptors, the Handshake of its Users or None). LinkOnTheWay or OSError
    when a path has a link on its way, or is gone: the call must not start. Given a
    layer (`mount`, workspace.mount.Mount), a handle inside its directory is opened
    again once the layer is mounted (its `late`), onto the same descriptor."""
    fds, out, handshake = [], [], None
    try:
        for word in argv:
            if isinstance(word, Stderr):
                fds.append(os.dup(2))
                out.append(str(fds[-1]))
            elif isinstance(word, Handle):
                fds.append(paths.opened(str(word), word.flags))
                out.append(str(fds[-1]))
                if mount is not None and paths.inside(str(word), [mount.target]):
                    mount.late.append((fds[-1], str(word), word.flags))
            elif isinstance(word, Users):
                handshake = Handshake(word.ids, word.limits)
                fds += handshake.theirs
                out += handshake.arguments
            else:
                out.append(word)
    except BaseException:
        for fd in fds:
            os.close(fd)
        if handshake is not None:
            handshake.close()
        raise
    for fd in fds:
        os.set_inheritable(fd, True)
    return out, fds, handshake


def launcher(argv, network=None, mount=None):
    """argv that opens the handles in `argv` in a process of its own, then runs it: the
    launcher's first argument lists where the handles stand (2,7,...); its second,
    the socket where it hands the network it makes (netns.Stage), or "-"; its third,
    the layer it mounts (workspace.mount.Mount.coded), or "-"."""
    kinds = ((Readable, "r"), (Stderr, "s"), (Handle, ""))
    where = ",".join(f"{n}u{w.coded()}" if isinstance(w, Users) else
                     n_kind(n, w, kinds) for n, w in enumerate(argv)
                     if isinstance(w, (Handle, Users)))
    return spawn.python("from agentctl.tools.handles import launch; launch()", site=False) \
        + [where or "-", network or "-", mount.coded() if mount else "-"] \
        + [str(w) for w in argv]


def n_kind(n, word, kinds):
    """A handle's place and kind in the launcher's first argument (7, 7r, 7s)."""
    return f"{n}{next(mark for kind, mark in kinds if isinstance(word, kind))}"


def launch():
    """The launcher's body: open, then exec (a child of its own gives the maps)."""
    where = {}
    for entry in sys.argv[1].split(","):
        n, users, coded = entry.partition("u")
        if users:
            where[int(n)] = lambda w, coded=coded: Users.decoded(coded)
        elif n.rstrip("rs").isdigit():
            where[int(n.rstrip("rs"))] = {"r": Readable, "s": Stderr}.get(n[-1], Handle)
    given = [where[n](w) if n in where else w for n, w in enumerate(sys.argv[4:])]
    stage = None
    try:
        mount = None
        if sys.argv[3] != "-":
            from agentctl.workspace.mount import Mount  # (start-up: 8 ms, only for a layer)
            mount = Mount.decoded(sys.argv[3])
        argv, fds, handshake = opened(given, mount)
        if sys.argv[2] != "-" or mount is not None:
            from agentctl.tools import netns  # (start-up: 4 ms, only for hosts or a layer)
            stage = netns.Stage(None if sys.argv[2] == "-" else sys.argv[2], mount)
    except OSError as e:
        sys.stderr.write(f"bwrap: not started: {e.strerror or e}\n")
        sys.exit(126)
    if handshake is not None:
        helper = os.fork()
        if helper == 0:
            try:
                for fd in fds:
                    os.close(fd)
                if os.fork() == 0:      # (a grandchild: bwrap is not its parent)
                    try:
                        handshake.give()
                    except OSError as e:
                        sys.stderr.write(f"bwrap: not started: its limits: {e}\n")
            finally:
                os._exit(0)
        os.waitpid(helper, 0)
    if stage is not None:
        stage.enter()               # (its descriptors close at the exec)
    os.execv(argv[0], argv)         # (our ends of the handshake close here)


class Prepared:
    """One call's sandbox (sandbox.Sandbox.wrap's): its argv (bwrap's, with the handles
    still to open), and what it holds until the call has ended (the placeholders; as
    root, the handshake that gives its user namespace its maps); given hosts, the
    socket where its network is handed to the egress proxy (`network`), and once
    opened the Stage (netns.py) that makes that network where bwrap starts."""

    def __init__(self, argv, placeholders, env=None, network=None, mount=None):
        self.argv, self.placeholders, self.handshake = argv, placeholders, None
        self.env = env or {}        # what its environment needs besides the sandbox's
        self.network, self.stage = network, None
        self.mount = mount          # its layer (workspace.mount.Mount), or None

    def opened(self):
        """(argv, descriptors to pass, to be closed once bwrap has started): each handle
        opened now, as bwrap gets it; given hosts or a layer, its Stage (`stage`):
        Unavailable when its egress proxy can't be reached."""
        if self.network is not None or self.mount is not None:
            from agentctl.tools import netns  # (start-up: 4 ms, only for hosts or a layer)
            try:
                self.stage = netns.Stage(self.network, self.mount)
            except OSError as e:
                from agentctl.tools.bwrap import Unavailable  # (start-up: 1 ms, only for a proxy gone)
                raise Unavailable(f"the egress proxy can't be reached ({e.strerror or e})") \
                    from None
        argv, fds, self.handshake = opened(self.argv, self.mount)
        return argv, fds

    def started(self):
        """bwrap has started: as root, its child gets the call's limits and its user
        namespace its maps now (until then, bwrap waits). Unavailable when a limit
        can't be set (then bwrap fails: the call does not run)."""
        handshake, self.handshake = self.handshake, None
        if self.stage is not None:
            self.stage.close()      # (the network is handed: the child's end did)
            self.stage = None
        if handshake is not None:
            try:
                handshake.give()
            except OSError as e:
                from agentctl.tools.bwrap import Unavailable  # (start-up: 1 ms, only for a limit refused)
                raise Unavailable(f"the call's limits could not be set ({e.strerror or e}): "
                                  "lower them (agent-set ID limits=...)") from None

    def launcher(self):
        """argv that opens the handles itself (for a starter that passes no
        descriptors: the MCP SDK's), and makes the network given hosts."""
        return launcher(self.argv, self.network, self.mount)

    def close(self):
        self.placeholders.release()
        if self.mount is not None:
            self.mount.close()
        if self.stage is not None:
            self.stage.close()
            self.stage = None
        if self.handshake is not None:
            self.handshake.close()
            self.handshake = None
