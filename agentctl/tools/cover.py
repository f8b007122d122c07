"""What a sandbox covers inside the directories it shows (agentctl(7), SANDBOX): the
protected paths (paths.protected: hidden, or read-only), the read-only set at the top
of every writable root (paths.READ_ONLY_SET, but what the agent was granted with --rw),
and a home that a tool may write (its top level read-only, paths.HOME_SET below it).

A cover is a mount, and a mount point can't be renamed or removed (EBUSY); but a
directory above it can, and the cover moves with it. So each directory between a
writable root and a covered path is pinned: bound onto itself, it is a mount point too.
Everything is bound by handle (handles.Handle): a link on the way is refused, not
followed.

What doesn't exist can't be mounted on: a missing path to cover inside a writable root
gets a placeholder (an empty file or directory, with the sticky bit and no write
permission, made by agentctl before the call), bound read-only onto itself so that
nothing can be made in its place, and removed when the last call that holds it ends
(`Placeholders`: a shared flock while held, an exclusive one to remove it).
"""

import errno
import fcntl
import os
import stat

from agentctl import paths
from agentctl.tools.handles import Handle

FILE_MODE, DIRECTORY_MODE = 0o1400, 0o1500    # the sticky bit marks them


class Unprotectable(OSError):
    """A path to protect that the sandbox can't cover (a link in a writable root)."""


class Placeholders:
    """The placeholders one call holds."""

    def __init__(self):
        self.held = []          # (path, fd)

    def hold(self, path, directory=False):
        """Make (or share) the placeholder at `path`."""
        for _ in range(8):
            try:
                fd = _make(path, directory)
            except FileExistsError:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue            # removed meanwhile: make it again
            fcntl.flock(fd, fcntl.LOCK_SH)
            same, ours = _same(fd, path), _is_placeholder(fd)
            if same and ours:
                self.held.append((path, fd))
                return
            os.close(fd)
            if same:        # the operator's, made meanwhile: the next call covers it
                raise Unprotectable(errno.EEXIST, f"{path}: appeared while the sandbox "
                                    "was being made")
        raise Unprotectable(errno.EBUSY, f"{path}: its placeholder keeps changing")

    def release(self):
        """Remove each placeholder no other call holds."""
        for path, fd in self.held:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _same(fd, path):
                    (os.rmdir if stat.S_ISDIR(os.fstat(fd).st_mode) else os.unlink)(path)
            except OSError:
                pass            # held by another call: the last one removes it
            finally:
                os.close(fd)
        self.held = []


def _same(fd, path):
    try:
        a, b = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _make(path, directory):
    """A new placeholder's descriptor; FileExistsError when something is there."""
    if directory:
        os.mkdir(path, DIRECTORY_MODE)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    else:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, FILE_MODE)
    os.fchmod(fd, DIRECTORY_MODE if directory else FILE_MODE)   # (the umask cut the bits)
    return fd


def _is_placeholder(fd):
    st = os.fstat(fd)
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        return mode == DIRECTORY_MODE and not os.listdir(fd)
    return stat.S_ISREG(st.st_mode) and st.st_size == 0 and mode == FILE_MODE


def _between(root, path):
    """The directories strictly between `root` and `path`, outermost first."""
    parts = os.path.relpath(path, root).split("/")[:-1]
    return [os.path.join(root, *parts[:n + 1]) for n in range(len(parts))]


def _lstat(path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def arguments(writable, shown, protected, granted, empty, placeholders, directories=()):
    """bwrap's arguments that cover what must be covered, after `writable` (the
    writable roots, bound) and `shown` (every other directory shown, read-only) are
    bound; `granted`: the names of the read-only set the agent may write; `empty`: an
    empty read-only file, what a hidden file is replaced by; `directories`: the paths
    and names that are directories by nature (paths.directories). Returns (arguments,
    directories to make read-only at the very end: the hidden ones)."""
    items = list(protected)
    for root in writable:
        items += [(os.path.join(root, name), paths.READ_ONLY)
                  for name in paths.READ_ONLY_SET if name not in granted]
    home = paths.home()
    binds, pins, covers, hidden = [], {}, [], []
    topped = paths.inside(home, writable)       # its top level read-only
    if topped:
        binds += _home(home)
        items += [(os.path.join(home, name), paths.READ_ONLY) for name in paths.HOME_SET]
    directories_hidden = [p for p, how in items if how == paths.HIDE and os.path.isdir(p)
                          and not os.path.islink(p)]
    for item, how in dict.fromkeys(items):
        path = item
        if any(path != d and paths.inside(path, [d]) for d in directories_hidden):
            continue            # (inside what is hidden whole: nothing to cover again)
        root = next((r for r in writable if path != r and paths.inside(path, [r])), None)
        if root is None:
            if how == paths.HIDE and any(path != r and paths.inside(path, [r]) for r in shown):
                st = _lstat(path)
                if st is not None:
                    covers += _hide(path, st, empty, hidden)
            continue            # not shown, or read-only already
        way = _between(root, path) + [path]
        missing = next((n for n, d in enumerate(way) if _lstat(d) is None), None)
        if missing is not None:         # nothing to mount on: a placeholder, first
            path, st = way[missing], None
            way = way[:missing + 1]
            if topped and os.path.dirname(path) == home:
                continue                # nothing can be made there
        else:
            st = _lstat(path)
        for directory in way[:-1]:
            if os.path.islink(directory):
                raise Unprotectable(errno.ELOOP, f"{directory} is a symbolic link in a "
                                    "working directory, on the way to what the sandbox "
                                    "must protect (remove the link)")
            pins[directory] = True
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise Unprotectable(errno.ELOOP, f"{path} is a symbolic link in a working "
                                "directory: the sandbox can't protect it (remove the link)")
        if st is None:
            placeholders.hold(path, path != item or _directory(path, directories))
            # (a mount point, so that it can't be removed; as root the tools' user can't
            # write or chmod root's placeholder, and a read-only remount is saved)
            covers += ["--bind-fd" if os.geteuid() == 0 else "--ro-bind-fd", Handle(path), path]
        elif how == paths.HIDE:
            covers += _hide(path, st, empty, hidden)
        else:
            covers += ["--ro-bind-fd", Handle(path), path]
    for directory in pins:
        binds += ["--bind-fd", Handle(directory), directory]
    return binds + covers, hidden


def _directory(path, directories):
    return any(path == d or not d.startswith("/") and path.endswith("/" + d)
               for d in directories)


def _hide(path, st, empty, hidden):
    if stat.S_ISDIR(st.st_mode):
        hidden.append(path)
        return ["--perms", "0555", "--tmpfs", path]
    return ["--ro-bind", empty, path]


def _home(home):
    """A home a tool may write: its top level read-only, its directories writable
    (each one bound onto itself: a mount point, which can't be renamed)."""
    args = ["--ro-bind-fd", Handle(home), home]
    try:
        entries = sorted(os.scandir(home), key=lambda e: e.name)
    except OSError:
        return args
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            args += ["--bind-fd", Handle(entry.path), entry.path]
    return args
