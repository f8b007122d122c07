"""What an agent changed, entry by entry (agent-diff(1), agent-merge(1)): the two views
(what it saw at its fork, or the real directory; and what it sees now) read from the
layers' files with view.py, and each path whose entry differs between them, with both
entries. A directory renamed or made anew is its files: every path under the old one
gone, every path under the new one there; so a diff or a merge never needs the
overlay's own records (redirects, opaque directories), only files, links and
directories."""

import os
import stat

from agentctl.errors import NotFound, Refused
from agentctl.store import registry
from agentctl.workspace import layers, view

REGULAR, EXECUTABLE, LINK = 0o100644, 0o100755, 0o120000


class Views:
    """An agent's two views: `own` (the upper directories of its layers the diff is of,
    topmost first), `old` (the directories under them, the real directory last) and
    `new` (own + old); `since` is when the lineage began reading the real directory
    (its bottom layer made); `fork` the layer row it was forked on (None: the real
    directory)."""

    def __init__(self, stack, count):
        rest = stack[count:]
        self.stack, self.fork = stack, (rest[0] if rest else None)
        self.own = [layers.upper(r["id"]) for r in stack[:count]]
        self.base = stack[-1]["base"]
        self.old = view.directories(rest) if rest else [self.base]
        self.new = self.own + self.old
        self.since = stack[-1]["created_at"]


def views(conn, agent, against="fork"):
    """The views of `agent` (a row) against its parent's view at the fork ("fork") or
    the real directory ("base"). NotFound when it has no layer."""
    stack = layers.stack(conn, agent)
    if stack is None:
        raise NotFound(f"{registry.label(agent)}: it has no layer (it was given no "
                       "working directory, or --shared): its tools write the directory "
                       "itself")
    for layer in stack:
        if layers.elsewhere(layer):
            raise Refused(f"{registry.label(agent)}: its {layers.elsewhere(layer)} (run "
                          "this there, or share the data directory)")
    count = len(layers.since_fork(conn, agent["id"])) if against == "fork" else len(stack)
    return Views(stack, count)


def count(conn, agent_id):
    """How many paths the agent changed since its fork (agent-ps -o changes), or None
    where agent-diff would say why it can't tell (no layer, a layer on another host)."""
    try:
        return len(files(views(conn, registry.get(conn, agent_id))))
    except (NotFound, Refused):
        return None


def entry(dirs, path):
    """What a view shows at `path`: (its path on disk, its lstat), or None."""
    found = view.locate(dirs, path)
    if found is None:
        return None
    try:
        return found, os.lstat(found)
    except FileNotFoundError:
        return None


def is_dir(found):
    return found is not None and stat.S_ISDIR(found[1].st_mode)


def mode(found):
    """git's mode of an entry: 100644, 100755, 120000; 0 for none or a directory (or
    what git keeps no mode for: a device, a fifo, a socket)."""
    if found is None:
        return 0
    m = found[1].st_mode
    if stat.S_ISLNK(m):
        return LINK
    if stat.S_ISREG(m):
        return EXECUTABLE if m & 0o100 else REGULAR
    return 0


def content(found):
    """An entry's content: a file's bytes, a link's target (as git stores it)."""
    if found is None or mode(found) == 0:
        return b""
    if mode(found) == LINK:
        return os.fsencode(os.readlink(found[0]))
    with open(found[0], "rb") as f:
        return f.read()


def same(a, b):
    """Whether two entries are the same to git: the same mode and content."""
    if mode(a) != mode(b):
        return False
    if a is None or a[0] == b[0] or mode(a) == 0:
        return True
    if mode(a) != LINK and a[1].st_size != b[1].st_size:
        return False
    return _equal(a, b)


def _equal(a, b):
    if mode(a) == LINK:
        return content(a) == content(b)
    with open(a[0], "rb") as x, open(b[0], "rb") as y:
        while True:
            one, two = x.read(1 << 20), y.read(1 << 20)
            if one != two:
                return False
            if not one:
                return True


def _under(dirs, path, into):
    """`path` and, where the view shows a directory there, every path under it."""
    into.add(path)
    if is_dir(entry(dirs, path)):
        for name in view.listing(dirs, path):
            _under(dirs, f"{path}/{name}", into)


def paths(views_):
    """Every path whose entry may differ between the views (a directory's own
    attributes aside), sorted."""
    found = set()
    for path, kind, detail in view.changes(views_.own, views_.old):
        if kind == "changed":
            continue
        _under(views_.old, path, found)
        _under(views_.new, path, found)
        if kind == "renamed" and detail:
            _under(views_.old, detail.lstrip("/"), found)
    return sorted(found)


def files(views_):
    """[(path, old, new)]: each path where the views show a different file or link
    (entries as entry() makes them, None where there is none, or a directory),
    sorted: what git would call the change."""
    found = []
    for path in paths(views_):
        old, new = entry(views_.old, path), entry(views_.new, path)
        old, new = (None if mode(old) == 0 else old), (None if mode(new) == 0 else new)
        if not same(old, new):
            found.append((path, old, new))
    return found


def kind(old, new):
    """added, deleted, modified, or type (a file become a link or back)."""
    if old is None:
        return "added"
    if new is None:
        return "deleted"
    return "modified" if (mode(old) == LINK) == (mode(new) == LINK) else "type"


def in_turn(views_, files, started):
    """Of `files`, those its last turn changed: where the agent's own layers hold the
    path's entry, or an entry above it that hides or replaces what was below (a
    whiteout, a file, an opaque or renamed directory), made or changed (its change
    time) since `started`, the turn's start. The rest of a directory its layer only
    holds is not a record: its change time moves with any entry in it."""
    return [f for f in files if _touched(views_.own, f[0], started)]


def _touched(own, path, started):
    while path:
        for top in own:
            at = os.path.join(top, path)
            try:
                st = os.lstat(at)
            except (FileNotFoundError, NotADirectoryError):
                continue
            if not stat.S_ISDIR(st.st_mode) or view.opaque(at) or view.redirect(at):
                return st.st_ctime >= started
        path = os.path.dirname(path)
    return False
