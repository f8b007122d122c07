"""bubblewrap, the program: where it is (0.8 or later: --bind-fd, --disable-userns),
what its refusals mean (`explain`, with the fix), and its arguments made to work for
a sandbox whose tools run as another user (`open_parents`)."""

import os
import shutil
import subprocess

from agentctl import paths


class Unavailable(Exception):
    """A sandbox can't be made here; the message names the fix."""


NO_BWRAP = ("the sandbox needs bubblewrap (bwrap), 0.8 or later: install Debian's or "
            "Ubuntu's bubblewrap package (apt-get install bubblewrap), or Fedora's; or "
            "give the agent --unconfined (agent-fork(1)) to run its tools without one")
FIXES = (   # what bwrap says when it can't make its namespaces, and the fix
    ("unprivileged_userns_clone", "enable user namespaces: sysctl -w "
     "kernel.unprivileged_userns_clone=1"),
    ("max_user_namespaces", "allow user namespaces: sysctl -w user.max_user_namespaces=15000"),
    ("uid map", "allow bwrap's user namespaces (Ubuntu 24.04: sysctl -w "
     "kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for bwrap)"),
    ("namespace", "allow user namespaces (sysctl user.max_user_namespaces, "
     "kernel.unprivileged_userns_clone, or AppArmor's restriction of them)"),
)


_found = {}        # programs' paths, found once a process


def program(name):
    if name not in _found:
        _found[name] = shutil.which(name)
    return _found[name]


def path():
    """bwrap's path; Unavailable when it is missing or older than 0.8 (--bind-fd,
    --disable-userns)."""
    if "bwrap" not in _found:
        path = program("bwrap")
        if path is None or not _recent(path):
            raise Unavailable(NO_BWRAP)
        _found["bwrap"] = path
    return _found["bwrap"]


def _recent(path):
    """Whether the bwrap at `path` is 0.8 or later: asked (--version) once, then known by
    a mark in agentctl's private run-time directory named by the file's identity (a bwrap
    replaced is asked again), so that no agent-run starts a program for it at its first
    call (about 1.5 ms)."""
    try:
        st = os.stat(path)
        mark = os.path.join(paths.runtime(make=True), "bwrap-{}-{}-{}-{}".format(
            st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        if os.path.isfile(mark):
            return True
    except OSError:
        mark = None
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=10).stdout.split()[-1]
        recent = tuple(int(n) for n in version.split(".")[:2]) >= (0, 8)
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return False
    if recent and mark is not None:
        try:
            os.close(os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        except OSError:
            pass        # (no mark: the next agent-run asks again)
    return recent


def explain(stderr):
    """Why bwrap could not start a call, from what it said, with the fix."""
    said = " ".join(line.strip() for line in stderr.splitlines() if "bwrap" in line)
    said = said or stderr.strip()[-300:] or "bwrap failed"
    for clue, fix in FIXES:
        if clue in said:
            return f"the sandbox could not be made ({said}): {fix}"
    return f"the sandbox could not be made: {said}"


BINDS = ("--bind", "--ro-bind", "--bind-fd", "--ro-bind-fd", "--symlink")   # SOURCE DEST
MADE = ("--tmpfs", "--dir", "--proc", "--dev")                              # DEST
MODIFIERS = ("--perms", "--size")           # (of the operation that follows)


def open_parents(args):
    """bwrap's arguments with each directory it would make on the way to a mount
    point made first, mode 0755: as root, bwrap makes them 0700, and the user the tools
    run as could not reach what is mounted below (its cwd, its Python)."""
    out, held, bound, made = [], [], [], {"/"}
    n = 0
    while n < len(args):
        word = args[n]
        if word == "--":
            return out + held + args[n:]
        if word in MODIFIERS:
            held += args[n:n + 2]
            n += 2
            continue
        width = 3 if word in BINDS else 2 if word in MADE else 0
        if width:
            dest = args[n + width - 1]
            parts = dest.strip("/").split("/")[:-1]
            for k in range(len(parts)):
                parent = "/" + "/".join(parts[:k + 1])
                if parent not in made and not paths.inside(parent, bound):
                    out += ["--perms", "0755", "--dir", parent]
                    made.add(parent)
            made.add(dest)
            if word in BINDS[:4]:
                bound.append(dest)
        out += held + args[n:n + max(width, 1)]
        held = []
        n += max(width, 1)
    return out + held
