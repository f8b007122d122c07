"""What a stack of layers shows, and what an agent changed, read from the layers'
files as the kernel's overlay reads them (agentctl(7), WORKSPACES), with no mount:
for agent-diff and agent-merge, which run outside any sandbox.

A layer's upper directory holds what its agent wrote: a file, a link or a new
directory is itself; a deletion is a whiteout (a character device 0:0); a directory
made anew where one was is opaque (overlay.opaque = y: nothing under it shows
through); a directory renamed (as root: redirect_dir) carries where it came from
(overlay.redirect: a name in the same directory, or a path from the top). The
attributes are trusted.overlay.* where root mounted it, user.overlay.* otherwise
(userxattr). `dirs` below: the directories of a stack, topmost first, the real
directory last."""

import os
import stat

from agentctl.workspace import layers

PREFIXES = ("trusted.overlay.", "user.overlay.")


def directories(stack):
    """The directories of a stack (layer rows, topmost first): each layer's upper
    directory, then the real directory."""
    return [layers.upper(layer["id"]) for layer in stack] + [stack[-1]["base"]]


def _attribute(path, name):
    for prefix in PREFIXES:
        try:
            return os.getxattr(path, prefix + name, follow_symlinks=False)
        except OSError:
            continue
    return None


def _lstat(path):
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def whiteout(st, path):
    """Whether an entry of an upper directory is a deletion."""
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
        return True
    return stat.S_ISREG(st.st_mode) and st.st_size == 0 and \
        _attribute(path, "whiteout") is not None


def opaque(path):
    return _attribute(path, "opaque") == b"y"


def redirect(path):
    """Where a renamed directory came from (a name, or a path from the top), or None."""
    found = _attribute(path, "redirect")
    return found.decode("utf-8", "surrogateescape") if found else None


def _parts(path):
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{path}: .. is not a path inside the working directory")
    return parts


def _merged(dirs, where, name):
    """Entry `name` of a merged directory whose directory in each layer is `where`
    (None: none there): (what shows: its path on disk, or None), and each layer's
    directory for it, if it is a directory."""
    found, inner, moved = None, [None] * len(dirs), None
    for i, d in enumerate(where):
        if moved is not None and moved.startswith("/"):
            candidate = os.path.join(dirs[i], moved.lstrip("/"))
        elif d is None:
            continue
        else:
            candidate = os.path.join(d, moved or name)
        st = _lstat(candidate)
        if st is None:
            continue
        if whiteout(st, candidate) or not stat.S_ISDIR(st.st_mode):
            return (candidate if found is None and not whiteout(st, candidate) else found,
                    inner)
        found = found or candidate
        inner[i] = candidate
        if opaque(candidate):
            break
        moved = redirect(candidate) or moved
    return found, inner


def locate(dirs, path):
    """The file that shows at `path` (relative to the working directory) through the
    stack whose directories are `dirs`: its path on disk, or None (deleted, or never
    there)."""
    where, found = list(dirs), dirs[0] if os.path.isdir(dirs[0]) else dirs[-1]
    for part in _parts(path):
        if found is None or not os.path.isdir(found) or os.path.islink(found):
            return None
        found, where = _merged(dirs, where, part)
    return found


def listing(dirs, path=""):
    """The names a directory of the stack shows, sorted (a merged readdir)."""
    where = list(dirs)
    for part in _parts(path):
        found, where = _merged(dirs, where, part)
        if found is None:
            raise FileNotFoundError(path)
    names = set()
    for d in where:
        try:
            names.update(os.listdir(d) if d is not None else ())
        except FileNotFoundError:
            pass            # (a layer never written has no directory yet)
    return sorted(n for n in names if _merged(dirs, where, n)[0] is not None)


def changes(own, below):
    """What the layers `own` (upper directories, topmost first: an agent's since its
    fork, layers.since_fork) changed over the directories `below` (the stack it was
    forked on, the real directory last): [(path, kind, detail)], sorted, where kind is
    added, written (a file or link, new content or attributes), changed (a directory's
    attributes), deleted, opaque (a directory made anew where one was: nothing of the
    old shows) or renamed (a directory; detail: where from, a path)."""
    found = []
    _walk(own, list(own), "", below, found)
    return sorted(found)


def _walk(own, where, rel, below, found):
    names = set()
    for d in where:
        if d is not None and os.path.isdir(d):
            names.update(os.listdir(d))
    for name in sorted(names):
        path = rel + name
        entry, inner = _merged(own, where, name)
        top = next((d for d in inner if d is not None), None)
        if entry is None:
            if locate(below, path) is not None:
                found.append((path, "deleted", None))
            continue
        if top is None:                             # a file or a link
            found.append((path, "added" if locate(below, path) is None else "written", None))
            continue
        moved = redirect(top)
        old = locate(below, path)
        if moved is not None:
            found.append((path, "renamed", moved if moved.startswith("/") else
                          os.path.join(os.path.dirname(path), moved)))
        elif opaque(top) and old is not None:
            found.append((path, "opaque", None))
        elif old is None:
            found.append((path, "added", None))
        else:
            a, b = os.lstat(top), os.lstat(old)
            if (a.st_mode, a.st_uid, a.st_gid) != (b.st_mode, b.st_uid, b.st_gid):
                found.append((path, "changed", None))
        _walk(own, inner, path + "/", below, found)
