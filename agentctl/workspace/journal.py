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


def lock():
    """The merges' lock (a file beside their directory, which goes when it is empty),
    held exclusively: one merge, or one recovery, at a time. Its descriptor."""
    os.makedirs(os.path.dirname(root()), mode=0o700, exist_ok=True)
    fd = os.open(root() + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
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
    after a crash)."""
    where = os.path.join(root(), token)
    spare = f".agentctl-merge-{token}"
    for n, (path, what, meta) in enumerate(steps):
        place = os.path.join(top, path)
        if what == "delete":
            _remove(place)
        elif what == "dir":
            if os.path.lexists(place) and not _is_dir(place):
                os.unlink(place)
            if not os.path.lexists(place):
                os.makedirs(place)      # (its parent too, where the target removed it)
            _own(place, meta)
        else:
            os.makedirs(os.path.dirname(place), exist_ok=True)
            temp = os.path.join(os.path.dirname(place), spare)
            _remove(temp)
            if "link" in meta:
                os.symlink(meta["link"], temp)
            else:
                shutil.copyfile(os.path.join(where, str(n)), temp)
            _own(temp, meta)
            if _is_dir(place):
                shutil.rmtree(place)
            os.replace(temp, place)


def done(token):
    """Merge `token` over: its directory removed, and theirs when it is empty (so that
    a program's start finds none: pending())."""
    shutil.rmtree(os.path.join(root(), token), ignore_errors=True)
    try:
        os.rmdir(root())
    except OSError:
        pass


def _is_dir(path):
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _remove(path):
    if _is_dir(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _own(path, meta):
    """The entry's owner (as root: unprivileged, it is the operator's), mode and
    modification time, as the agent left them."""
    link = "link" in meta
    if os.geteuid() == 0:
        os.lchown(path, meta["uid"], meta["gid"])
    if not link:
        os.chmod(path, meta["mode"])
    os.utime(path, ns=(meta["mtime_ns"], meta["mtime_ns"]), follow_symlinks=False)


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
