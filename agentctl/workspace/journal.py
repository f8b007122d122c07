"""A merge made atomic by a journal (agent-merge(1), Atomicity): the new files
are copied first into a directory of the merge's own under agentctl's data
directory (DATA/agentctl/m/ID: staging, which a crash throws away: nothing was
applied), then the journal of its steps is written there in one rename (the merge
is decided), then each step is applied, each one so that applying it again is
harmless (a file is written beside its place and renamed onto it: never torn),
then the merge is recorded and its directory removed. The next agent-merge, and
every agentctl program that opens the database, first finishes a decided merge
(its steps applied again, from the first) and throws away an undecided one: a
kill -9 at any point leaves the target as it was or, once any agentctl program
has run, wholly merged."""

import fcntl
import json
import os
import shutil
import stat

from agentctl import ids, paths

JOURNAL = "journal.json"


def root():
    return paths.merges()


def pending():
    """Whether any merge's directory is there (one stat: the common case, none)."""
    return os.path.isdir(root())


def lock(wait=True):
    """The merges' lock (a file beside their directory, which goes when it is empty),
    held exclusively: one merge, or one recovery, at a time. Its descriptor; without
    `wait`, None while another holds it."""
    os.makedirs(os.path.dirname(root()), mode=0o700, exist_ok=True)
    fd = os.open(root() + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def stage(steps):
    """A merge's directory made, each file of `steps` ([(path, what, entry)], the
    plan's) copied there: (its id, the steps as the journal writes them)."""
    token = ids.new_id()
    where = os.path.join(root(), token)
    os.makedirs(root(), mode=0o700, exist_ok=True)
    os.mkdir(where, 0o700)
    written = []
    for n, (path, what, entry) in enumerate(steps):
        meta = None
        if entry is not None:
            st = entry[1]
            meta = {"mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid,
                    "mtime_ns": st.st_mtime_ns, "size": st.st_size}
            if what == "put" and stat.S_ISLNK(st.st_mode):
                meta["link"] = os.readlink(entry[0])
            elif what == "put":
                shutil.copyfile(entry[0], os.path.join(where, str(n)))
        written.append([path, what, meta])
    return token, written


def decide(token, record):
    """The journal of merge `token` written (`record`: its target, its steps, what
    the event says): from now on the merge happens, whatever stops this process."""
    where = os.path.join(root(), token)
    with open(os.path.join(where, JOURNAL + ".new"), "w") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(os.path.join(where, JOURNAL + ".new"), os.path.join(where, JOURNAL))
    fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def decided():
    """[(token, record)] of every decided merge; an undecided one's directory removed
    (a merge that stopped before its journal: nothing of it was applied)."""
    found = []
    if not pending():
        return found
    for token in sorted(os.listdir(root())):
        where = os.path.join(root(), token)
        try:
            with open(os.path.join(where, JOURNAL)) as f:
                found.append((token, json.load(f)))
        except FileNotFoundError:
            done(token)
    if not found:
        try:
            os.rmdir(root())        # (made, and the crash came before its first merge's)
        except OSError:
            pass
    return found


def apply(token, steps, top):
    """Each step of merge `token` applied under directory `top` (again, harmlessly,
    after a crash). Every step works from a descriptor of its parent, each component
    of the way opened without following a link (O_NOFOLLOW): a link put in the way
    since the plan (a tool of an agent that shares the directory) is replaced by the
    directory the merge says is there, and nothing is ever written outside `top`."""
    where = os.path.join(root(), token)
    spare = f".agentctl-merge-{token}"
    root_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for n, (path, what, meta) in enumerate(steps):
            parent, name = _parent(root_fd, path)
            try:
                _step(parent, name, what, meta, os.path.join(where, str(n)), spare)
            finally:
                if parent != root_fd:
                    os.close(parent)
    finally:
        os.close(root_fd)


def _step(parent, name, what, meta, staged, spare):
    if what == "delete":
        _remove(parent, name)
        return
    if what == "dir":
        if _kind(parent, name) not in (None, stat.S_IFDIR):
            os.unlink(name, dir_fd=parent)
        if _kind(parent, name) is None:
            os.mkdir(name, 0o700, dir_fd=parent)
        _own(parent, name, meta)
        return
    _remove(parent, spare)
    if "link" in meta:
        os.symlink(meta["link"], spare, dir_fd=parent)
    else:
        out = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                      os.O_CLOEXEC, 0o600, dir_fd=parent)
        with open(out, "wb") as target, open(staged, "rb") as source:
            shutil.copyfileobj(source, target)
    _own(parent, spare, meta)
    if _kind(parent, name) == stat.S_IFDIR:
        shutil.rmtree(name, dir_fd=parent)
    os.replace(spare, name, src_dir_fd=parent, dst_dir_fd=parent)


def _parent(root_fd, path):
    """(a descriptor of the directory that holds `path`, its last component): each
    component on the way opened with O_NOFOLLOW, made where it is missing (the
    target removed it), and one that is not a directory (a file, a link) replaced
    by one."""
    *dirs, name = [part for part in path.split("/") if part not in ("", ".")]
    if name == ".." or ".." in dirs:
        raise ValueError(f"{path}: not a path under the merge's target")
    fd = root_fd
    for part in dirs:
        if _kind(fd, part) not in (None, stat.S_IFDIR):
            os.unlink(part, dir_fd=fd)
        if _kind(fd, part) is None:
            os.mkdir(part, 0o755, dir_fd=fd)
        step = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=fd)
        if fd != root_fd:
            os.close(fd)
        fd = step
    return fd, name


def _kind(parent, name):
    """The file type of `name` in directory `parent` (not followed), or None."""
    try:
        return stat.S_IFMT(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return None


def done(token):
    """Merge `token` over: its directory removed, and theirs when it is empty (so that
    a program's start finds none: pending())."""
    shutil.rmtree(os.path.join(root(), token), ignore_errors=True)
    try:
        os.rmdir(root())
    except OSError:
        pass


def _remove(parent, name):
    if _kind(parent, name) == stat.S_IFDIR:
        shutil.rmtree(name, dir_fd=parent)
    elif _kind(parent, name) is not None:
        os.unlink(name, dir_fd=parent)


def _own(parent, name, meta):
    """The entry's owner (as root: unprivileged, it is the operator's), mode and
    modification time, as the agent left them (a link's own, never its target's)."""
    if os.geteuid() == 0:
        os.chown(name, meta["uid"], meta["gid"], dir_fd=parent, follow_symlinks=False)
    if "link" not in meta:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        try:
            os.fchmod(fd, meta["mode"])
        finally:
            os.close(fd)
    os.utime(name, ns=(meta["mtime_ns"], meta["mtime_ns"]), dir_fd=parent,
             follow_symlinks=False)


def _given_path(agent_id):
    return os.path.join(os.path.dirname(root()), "merged", f"{agent_id}.json")


def given(agent_id):
    """What the agent's merges gave their target, path by path: {path: [mode, size,
    mtime_ns]} (an empty list: deleted), for the next merge to tell the target's own
    change from what it took before (a path that still is as the merge left it is no
    conflict)."""
    try:
        with open(_given_path(agent_id)) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return {}


def forget(agent_id):
    """What the agent's merges gave, forgotten (its work thrown away: lifetime.discard)."""
    try:
        os.unlink(_given_path(agent_id))
    except FileNotFoundError:
        pass


def remember(agent_id, steps):
    """What a merge's `steps` gave, added to given() (written whole, in one rename)."""
    known = given(agent_id)
    for path, what, meta in steps:
        if what == "delete":
            known[path] = []
        elif what == "put":
            known[path] = [meta["mode"], meta.get("size"), meta["mtime_ns"]]
    where = _given_path(agent_id)
    os.makedirs(os.path.dirname(where), mode=0o700, exist_ok=True)
    with open(where + ".new", "w") as f:
        json.dump(known, f)
    os.replace(where + ".new", where)
