"""Whom a sandboxed call runs as, and its limits (agentctl(7), SANDBOX): as root, its
tools run as another user (AGENTCTL_SANDBOX_USER, else nobody), in a user namespace
of the call's own that maps root (bwrap, to set the call up) and that user alone,
whose maps and the call's rlimits agentctl gives while bwrap waits (handles.Users);
unprivileged, prlimit sets them. RLIMIT_NPROC counts a user's processes in one user
namespace, so in the call's own it counts the call's (never root's, which it does
not bind: hence the tools' user)."""

import os
import pwd
import resource

from agentctl.tools import bwrap
from agentctl.tools.bwrap import Unavailable
from agentctl.tools.handles import Users

# Each limit (limits.KEYS) as prlimit names it (and RLIMIT_ + its name); cpu and mem
# bind a call alone, not a server that lives a whole turn.
RLIMITS = {"cpu": "cpu", "mem": "as", "procs": "nproc", "fsize": "fsize", "files": "nofile"}
PER_CALL = ("cpu", "mem")
USER = "AGENTCTL_SANDBOX_USER"      # as root: whom tools run as (default nobody)
NOBODY = 65534
NO_PRLIMIT = "the sandbox needs prlimit (util-linux) to set a call's limits"
NO_SETPRIV = "as root, the sandbox needs setpriv (util-linux) to run tools as another user"


def user():
    """As root: the (uid, gid) tools run as: $AGENTCTL_SANDBOX_USER (a user's name, or
    UID[:GID]), else nobody. Never root."""
    given = os.environ.get(USER, "").strip() or "nobody"
    try:
        if given.replace(":", "").isdigit():
            uid, _, gid = given.partition(":")
            uid = int(uid)
            gid = int(gid) if gid else pwd.getpwuid(uid).pw_gid
        else:
            entry = pwd.getpwnam(given)
            uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        if given != "nobody":
            raise Unavailable(f"{USER}={given}: no such user") from None
        uid, gid = NOBODY, NOBODY
    if uid == 0 or gid == 0:
        raise Unavailable(f"{USER}={given}: tools never run as root (name an "
                          "unprivileged user)")
    if bwrap.program("setpriv") is None:
        raise Unavailable(NO_SETPRIV)
    return uid, gid


def users(limits, per_call):
    """As root: bwrap's user namespace, mapping root (bwrap, to set the call up)
    and the user the tools run as (setpriv's, drop()), whose processes RLIMIT_NPROC
    then counts in this namespace alone; the call's rlimits (`limits`, limits.read's),
    set on bwrap's child while it waits for its maps."""
    if os.geteuid() != 0:
        return []
    return [Users(*user(), [(getattr(resource, f"RLIMIT_{RLIMITS[key].upper()}"), value)
                            for key, value in given(limits, per_call)])]


def drop():
    """As root: setpriv's command that makes the tool another user, for good."""
    if os.geteuid() != 0:
        return []
    uid, gid = user()
    return [bwrap.program("setpriv"), f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


def given(limits, per_call):
    """(key, value) of each limit the call gets: cpu and mem for a call alone, not a
    server that lives a whole turn. A limit lifted is not set: the call keeps
    agent-run's own (which only a privileged process could raise)."""
    return [(key, limits[key]) for key in RLIMITS
            if limits[key] is not None and (per_call or key not in PER_CALL)]


def prlimit(limits, per_call):
    """prlimit's command for the limits, unless root (users() sets them); processes
    (nproc) are counted in the call's own user namespace."""
    if os.geteuid() == 0:
        return []
    program = bwrap.program("prlimit")
    if program is None:
        raise Unavailable(NO_PRLIMIT)
    return [program] + [f"--{RLIMITS[key]}={value}" for key, value in given(limits, per_call)] \
        + ["--"]
