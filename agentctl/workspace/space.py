"""The mount namespace a layered agent's overlay is mounted in (agentctl(7),
WORKSPACES): one for each stack this process mounts, made once by a child of its own
(which makes it, says so, and ends) and kept by descriptors, which each call enters
where its bwrap starts (setns: netns.Stage, handles.launch). So every call of a turn
and each of its MCP servers see one overlay: two overlays of one upper directory would
each keep what it had seen, and miss what the other wrote.

Unprivileged, the namespace is owned by a user namespace that maps the operator's
user alone, as itself, which a call enters first. The standard library only: the MCP
launcher enters one.

A process that holds a Space holds a shared lock on its own layer's work directory
(`guard`) while it does (taken before the overlay is mounted): a merge into the layer
(inside.Held) takes it exclusively, so that no overlay of another process's holds the
layer while the merge writes it through its own (an overlay whose upper directory is
written from elsewhere may keep what it saw)."""

import ctypes
import fcntl
import os

CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x20000
MS_REC, MS_PRIVATE = 0x4000, 0x40000

_held = {}          # (options, target) -> Space: this process's, one stack at a time


class Space:
    """A mount namespace with an overlay mounted (and, unprivileged, the user namespace
    that owns it), kept by descriptors `mnt` and `user` (or None), or named by the
    paths that open them (`coded`, a launcher's)."""

    def __init__(self, mnt, user, guard=None):
        self.mnt, self.user, self.guard = mnt, user, guard

    def coded(self):
        """Where another process of the operator's opens them: /proc/PID/fd/N."""
        return ",".join(f"/proc/{os.getpid()}/fd/{fd}" for fd in (self.mnt, self.user)
                        if fd is not None)

    @classmethod
    def decoded(cls, text):
        named = text.split(",")
        return cls(*[os.open(path, os.O_RDONLY | os.O_CLOEXEC) for path in named],
                   *([None] if len(named) == 1 else []))

    def enter(self, libc):
        """The calling thread in it (as root: its file system attributes its own
        already, unshare(CLONE_FS); unprivileged: a process of one thread)."""
        for fd, kind in ((self.user, CLONE_NEWUSER), (self.mnt, CLONE_NEWNS)):
            if fd is not None and libc.setns(fd, kind) != 0:
                raise OSError(ctypes.get_errno(), "can't enter its layer's namespace: "
                              + os.strerror(ctypes.get_errno()))

    def close(self):
        for fd in (self.mnt, self.user, self.guard):
            if fd is not None:
                os.close(fd)
        self.mnt = self.user = self.guard = None


def held(options, target, root, guard):
    """The Space where `options` (the layers named from `root`) are mounted on
    `target`: this process's, made now unless it was already, holding `guard` (its own
    layer's work directory: a shared lock, waited for while a merge holds it). OSError
    (the kernel's errno) where it can't be. A Space of another stack is let go (a
    server that entered it keeps it while it lives)."""
    key = (options, target)
    if key not in _held:
        release()
        fd = os.open(guard, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            _held[key] = made(options, target, root)
        except BaseException:
            os.close(fd)
            raise
        _held[key].guard = fd
    return _held[key]


def holding():
    """The Spaces this process holds."""
    return list(_held.values())


def release():
    """Every Space this process holds let go."""
    for space in _held.values():
        space.close()
    _held.clear()


def made(options, target, root):
    """A new Space with `options` mounted on `target` (from directory `root`), made
    by a child of this process: nothing but system calls, then its end."""
    libc = ctypes.CDLL(None, use_errno=True)
    mapped = maps()
    said, tell = os.pipe()
    wait, go = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 255
        try:
            os.close(said)
            os.close(go)
            code = _mount(libc, mapped, options, target, root)
            os.write(tell, bytes([min(code, 254)]))
            os.read(wait, 1)
        finally:
            os._exit(0)
    os.close(tell)
    os.close(wait)
    try:
        code = (os.read(said, 1) or b"\xff")[0]
        space = None
        if code == 0:
            user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC) if mapped \
                else None
            space = Space(os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC), user)
    finally:
        os.close(said)
        os.close(go)            # (it ends)
        os.waitpid(pid, 0)
    if space is None:
        raise OSError(code, os.strerror(code) if code < 254 else "its maker failed")
    return space


def _mount(libc, maps, options, target, root):
    """In the child: the namespaces made, the overlay mounted; 0, or the errno."""
    if libc.unshare(CLONE_NEWNS | (CLONE_NEWUSER if maps else 0)) != 0:
        return ctypes.get_errno()
    for path, text in maps:
        fd = os.open(path, os.O_WRONLY)
        os.write(fd, text)
        os.close(fd)
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return ctypes.get_errno()
    os.chdir(root)      # (the layers are named from there)
    if libc.mount(b"overlay", target.encode(), b"overlay", 0, options) != 0:
        return ctypes.get_errno()
    return 0


def maps():
    """Unprivileged, the maps of a user namespace of the caller's user alone, as itself
    (a layer's, and a call's network's: netns.Stage); as root, none."""
    if os.geteuid() == 0:
        return []
    return [(f"/proc/self/{name}", text.encode()) for name, text in (
        ("setgroups", "deny"), ("uid_map", f"{os.geteuid()} {os.geteuid()} 1\n"),
        ("gid_map", f"{os.getegid()} {os.getegid()} 1\n"))]
