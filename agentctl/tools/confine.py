"""What the shipped tools (agentctl/toolbox) share: the tool convention (--describe,
arguments as JSON on stdin, the result on stdout, an error on stderr and a non-zero
exit), and confinement to the agent's working directory.

Confinement opens each component of a path relative to the directory before it,
never following a symbolic link (O_NOFOLLOW, dir_fd), so that no check can be
raced between checking and opening: `..`, an absolute path outside the directory
and a link anywhere on the way are refused. What no tool may touch
(paths.protected) is refused even inside it.
"""

import json
import os
import stat
import sys

from agentctl import paths


class Refused(Exception):
    pass


REFUSED = ("{}: not for tools (agentctl's database, configuration, caches and tool path, "
           "the MCP configuration, the prices, the PostgreSQL password file)")


def tool(description, parameters, handler, timeout=None):
    """Run a tool program: `--describe`, or one call."""
    if sys.argv[1:] == ["--describe"]:
        described = {"description": description, "parameters": parameters}
        if timeout:
            described["timeout"] = timeout
        print(json.dumps(described))
        return 0
    try:
        args = json.loads(sys.stdin.read() or "{}")
        if not isinstance(args, dict):
            raise Refused("arguments must be a JSON object")
        result = handler(**args)
    except TypeError as e:
        return _fail(f"bad arguments: {e}")
    except (Refused, OSError, ValueError) as e:
        return _fail(str(e) if not isinstance(e, OSError) else (e.strerror or str(e)))
    sys.stdout.write(result)
    return 0


def _fail(message):
    sys.stderr.write(message + "\n")
    return 1


FORBIDDEN = "AGENTCTL_FORBIDDEN"     # forbidden() as agent-run found it, for a sandbox


def forbidden(protected=None):
    """What no confined tool may open or create: the hidden part of paths.protected()
    (or of `protected`, as a sandbox worked it out for the database it opened), and the
    programs on the tool path (a hard link to one elsewhere is the same file); known by
    (device, inode) where it exists, and by (device, inode of its directory, name)
    whether it exists or not, so that a missing MCP configuration can't be written
    into being. In a sandbox, where none of it is to be seen, as agent-run found it
    outside ($AGENTCTL_FORBIDDEN)."""
    given = os.environ.get(FORBIDDEN)
    if given:
        found = json.loads(given)
        inodes = {tuple(i) for i in found["inodes"]}
        names = {tuple(n) for n in found["names"]}
        if found.get("layer"):
            inodes, names = _layered(inodes, names, *found["layer"])
        return inodes, names
    protected = paths.protected() if protected is None else protected
    hidden = [path for path, how in protected if how == paths.HIDE]
    for directory in paths.tool_path():
        try:
            hidden += [entry.path for entry in os.scandir(directory)]
        except OSError:
            pass
    inodes, names = set(), set()
    for path in hidden:
        for where, into, key in ((path, inodes, ()), (os.path.dirname(path), names,
                                                      (os.path.basename(path),))):
            try:
                st = os.stat(where)
            except (OSError, ValueError):
                continue
            into.add((st.st_dev, st.st_ino) + key)
    return inodes, names


def _layered(inodes, names, base, device, inode):
    """What is forbidden as a layered working directory shows it (agentctl(7),
    WORKSPACES): its overlay keeps the inode numbers of the real directory's files
    (where its layers share their filesystem), on a device of its own, and gives its
    top the number of its layer's: each identity of the real directory's device is
    forbidden on the overlay's too."""
    try:
        top = os.stat(base)
    except OSError:
        return inodes, names
    if top.st_dev == device:
        return inodes, names        # (not layered after all)

    def seen(dev, ino):
        return (top.st_dev, top.st_ino if ino == inode else ino) if dev == device else None
    inodes = inodes | {seen(*i) for i in inodes if seen(*i)}
    names = names | {seen(d, i) + (n,) for d, i, n in names if seen(d, i)}
    return inodes, names


def open_inside(path, flags, mode=0o644):
    """A file descriptor for `path` inside the working directory, opened component by
    component without following links; Refused when the path leaves it."""
    root = os.getcwd()
    if os.path.isabs(path):
        relative = os.path.relpath(path, root)
        if relative == ".." or relative.startswith("../"):
            raise Refused(f"{path}: outside the working directory {root}")
        path = relative
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Refused(f"{path}: .. is not allowed: paths stay inside {root}")
    forbidden_ = forbidden()
    truncate = flags & os.O_TRUNC       # only once the file is known to be allowed
    flags &= ~os.O_TRUNC
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        _check(fd, forbidden_, path)
        for n, part in enumerate(parts):
            last = n == len(parts) - 1
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino, part) in forbidden_[1] or \
                    (_identity(fd, part) in forbidden_[0]):     # (before a write is tried)
                raise Refused(REFUSED.format(path))
            try:
                nfd = os.open(part, (flags if last else os.O_RDONLY | os.O_DIRECTORY)
                              | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
            except OSError as e:
                if e.errno in (40, 20) and _is_link(fd, part):      # ELOOP, ENOTDIR
                    raise Refused(f"{path}: {part} is a symbolic link: refused") from None
                raise
            os.close(fd)
            fd = nfd
            _check(fd, forbidden_, path)
        if truncate:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise Refused(f"{path}: not a regular file")
            os.ftruncate(fd, 0)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _identity(dir_fd, name):
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _is_link(dir_fd, name):
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _check(fd, forbidden, path):
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) in forbidden[0]:
        raise Refused(REFUSED.format(path))
