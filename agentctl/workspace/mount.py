"""A layered agent's call sees its working directory through an overlay (agentctl(7),
WORKSPACES): its own layer the upper directory, the non-empty frozen layers of its
stack and the real directory under it, mounted on the real directory's path in a
mount namespace of its own (space.py: made once for each stack, entered by each call
where its bwrap starts: netns.Stage, as root in a thread of agent-run, else in the
child that becomes bwrap; handles.launch for an MCP server). bwrap then binds the
directory as it binds any working directory, by handle: the handles inside it are
opened again once the call is in the namespace (`late`), so that each bind is the
overlay's, never the real directory's.

The layers are named relative to their directory (the mount is made from there), so
that a deep stack's options fit in the page the kernel reads them from. As root,
the overlay keeps its metadata in trusted xattrs and redirects directories, so that
renaming a directory works; unprivileged, it keeps them in user xattrs (userxattr),
where the kernel allows no redirect: renaming a directory that comes from a lower
layer fails with EXDEV (mv copies; rename(2) and git mv don't).

A layer is written by the calls whose upper directory it is, each holding a shared
lock on its directory while it runs; a fork that freezes a layer under a call in
flight takes effect when that call ends: another agent's call that stacks on it waits
for the lock first (`WAIT` seconds at most)."""

import fcntl
import os
import tempfile
import threading

from agentctl import paths
from agentctl.workspace import layers, space

PAGE = 4096             # the mount's options must fit in it, with their NUL
WAIT = 60.0             # seconds another agent's call waits for a frozen layer's writers
UNSAFE = ",:\\\n"       # what overlay's options can't hold in a path


class Unavailable(Exception):
    """The call's layer can't be mounted here (the sandbox's Unavailable says it)."""


class Mount:
    """The overlay of one call of `agent_id`, whose stack is `stack` (layer rows, its
    own first), prepared: its own layer's directories made, every frozen layer found
    here and free of writers, its options written. Unavailable when it can't be."""

    def __init__(self, stack, agent_id):
        own, below = stack[0], stack[1:]
        self.target, self.root = own["base"], layers.root()
        st = os.stat(self.target)
        self.identity = (st.st_dev, st.st_ino)      # the real directory's
        self.late = []          # (descriptor, path, flags): opened again once mounted
        self.lock = None
        if any(c in self.target for c in UNSAFE):
            raise Unavailable(f"working directory {self.target}: a layer can't be mounted "
                              "on a path with a comma, colon, backslash or newline (give "
                              "the agent --shared, or another directory)")
        lower = []
        for layer in below:
            _settled(layer, agent_id)
            if not layers.empty(layer):
                lower.append(f"{layer['id']}/u")
        self.lock = _own(own, self.target)
        options = (f"lowerdir={':'.join(lower + [self.target])},upperdir={own['id']}/u,"
                   f"workdir={own['id']}/w,{_kind()}")
        if len(options) >= PAGE:
            self.close()
            raise Unavailable(f"working directory {self.target}: its stack of {len(stack)} "
                              "layers is too deep to mount (merge or discard its "
                              "descendants' work)")
        try:
            self.space = space.held(options.encode(), self.target, self.root,
                                    os.path.join(layers.top(own["id"]), "w"))
        except OSError as e:
            self.close()
            raise Unavailable(f"workspace: can't mount its layer on {self.target}: "
                              f"{e.strerror} (agentctl(7), WORKSPACES: give the agent "
                              "--shared to work without one)") from None

    def made(self, libc):
        """Where the call's bwrap starts: in the layer's namespace (space.Space), the
        late handles opened again there onto their descriptors."""
        self.space.enter(libc)
        for fd, path, flags in self.late:
            opened = paths.opened(path, flags)
            os.dup2(opened, fd)
            os.close(opened)

    def coded(self):
        """As the launcher's argument names it (an MCP server's: handles.launch)."""
        return "\n".join([self.target, self.space.coded()])

    @classmethod
    def decoded(cls, text):
        mount = cls.__new__(cls)
        mount.target, named = text.split("\n")
        mount.space, mount.late, mount.lock = space.Space.decoded(named), [], None
        return mount

    def close(self):
        """The call has ended: its layer's lock let go."""
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None


def problem():
    """None when a layer can be mounted here, else why (the fix named): a throwaway
    overlay mounted as a call's is, in a namespace of its own; for agent-run
    --list-tools to say loudly."""
    with tempfile.TemporaryDirectory(prefix="agentctl-layer-") as top:
        for name in ("u", "w", "m"):
            os.mkdir(os.path.join(top, name))
        try:
            space.made(f"lowerdir=m,upperdir=u,workdir=w,{_kind()}".encode(),
                       os.path.join(top, "m"), top).close()
            return None
        except OSError as e:
            why = e.strerror
    return (f"a layer can't be mounted here (overlayfs: {why}): an agent given --cwd works "
            "in one (agentctl(7), WORKSPACES); give it --shared, or run a kernel that "
            "mounts overlayfs in a user namespace (Linux 5.11)")


def _kind():
    """The options that differ by who mounts: as root, trusted attributes and directories
    redirected (a rename works); else user attributes, which allow no redirect."""
    return "redirect_dir=on,index=off,metacopy=off" if os.geteuid() == 0 else "userxattr"


def _own(layer, base):
    """The agent's own layer's directories made (its upper directory is the merged
    root: it takes the real directory's owner and mode), and a shared lock on it
    taken: its descriptor."""
    top = layers.top(layer["id"])
    if not os.path.isdir(top):
        if layers.elsewhere(layer):
            raise Unavailable(f"working directory {base}: its {layers.elsewhere(layer)} "
                              "(share it, or give the agent --shared)")
        os.makedirs(layers.root(), mode=0o700, exist_ok=True)
        os.makedirs(top, mode=0o700, exist_ok=True)
    upper = os.path.join(top, "u")
    if not os.path.isdir(upper):
        st = os.stat(base)
        os.mkdir(upper)
        os.chmod(upper, st.st_mode & 0o7777)
        if os.geteuid() == 0:
            os.chown(upper, st.st_uid, st.st_gid)
    os.makedirs(os.path.join(top, "w"), mode=0o700, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def _settled(layer, agent_id):
    """A frozen layer under a call: here (Unavailable when it is on another host's
    data directory), and written by no call of another agent's any more (waited
    for, WAIT seconds at most). Its own agent's calls in flight are not waited for:
    they are its own work, which it sees either way."""
    top = layers.top(layer["id"])
    try:
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if layers.elsewhere(layer):
            raise Unavailable(f"{layers.elsewhere(layer)} (share it, or give the agent "
                              "--shared)") from None
        return      # (never written: empty)
    try:
        if layer["agent_id"] != agent_id and not _free(fd, WAIT):
            raise Unavailable(f"layer {layer['id']} is still written by a call that started "
                              "before its fork: try again once it ends")
    finally:
        os.close(fd)


def _free(fd, seconds):
    """Whether no call holds the layer whose directory `fd` is (an exclusive lock
    taken, then let go), waited for `seconds` at most: by a thread blocked in
    flock(2) (the kernel lists it waiting, in /proc/locks), which lets go of the
    lock itself if it comes too late."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    mine, state, taken = os.dup(fd), {}, threading.Event()
    guard = threading.Lock()

    def take():
        try:
            fcntl.flock(mine, fcntl.LOCK_EX)
            got = True
        except OSError:
            got = False
        with guard:
            state.update(done=True, taken=got)
            if state.get("late"):
                os.close(mine)      # (let go: nobody waits any more)
        taken.set()
    threading.Thread(target=take, name="agentctl-layer", daemon=True).start()
    taken.wait(seconds)
    with guard:
        done = state.get("done", False)
        state["late"] = not done
        free = done and state["taken"]
    if done:
        os.close(mine)
    return free
