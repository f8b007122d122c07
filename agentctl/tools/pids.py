"""A pids cgroup for one sandboxed call when the operator is root (sandbox.py).

RLIMIT_NPROC binds no process of uid 0, not even in a user namespace mapped to
root, so for root the limit on a call's processes is a cgroup's pids.max: a group
of its own, made under agentctl's own cgroup (v1's pids hierarchy) or under the root
of the unified hierarchy (v2, where the pids controller is enabled there), and
removed when the call ends. A group left by an agent-run that died is removed by the
next one that makes a group.
"""

import itertools
import os
import signal
import time

PREFIX = "agentctl-"
_counter = itertools.count()
_base = {}


class Unavailable(Exception):
    """A sandbox (or its process limit) can't be made here; the message names the fix."""


NO_CGROUP = ("the sandbox can't limit a call's processes for root without a writable pids "
             "cgroup (mount the pids controller, cgroup v1 or v2), run agent-run as "
             "another user, or give the agent --limit procs=unlimited")


def _mounts():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            dash = fields.index("-")
            yield fields[4], fields[dash + 1], fields[dash + 3].split(",")


def _own(version):
    """This process's cgroup path: in v1's pids hierarchy, or v2's."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if (version == 1 and "pids" in controllers.split(",")) or \
                    (version == 2 and controllers == ""):
                return path
    return None


def base():
    """The directory new groups are made in, or None."""
    if "dir" not in _base:
        _base["dir"] = None
        try:
            mounts = list(_mounts())
        except (OSError, ValueError, IndexError):
            mounts = []
        for point, fstype, options in mounts:
            if fstype == "cgroup" and "pids" in options:
                own = _own(1)
                if own is not None:
                    _base["dir"] = os.path.join(point, own.lstrip("/"))
                    break
        else:
            for point, fstype, _ in mounts:
                try:
                    with open(os.path.join(point, "cgroup.subtree_control")) as f:
                        enabled = f.read().split()
                except OSError:
                    continue
                if fstype == "cgroup2" and "pids" in enabled:
                    _base["dir"] = point
                    break
        if _base["dir"] and not os.access(_base["dir"], os.W_OK):
            _base["dir"] = None
    return _base["dir"]


class Group:
    """A pids cgroup of its own, at most `limit` processes (None: no group)."""

    def __init__(self, limit):
        self.path = None
        if limit is None:
            self.procs_file = "/dev/null"
            return
        top = base()
        if top is None:
            raise Unavailable(NO_CGROUP)
        if not _base.get("swept"):      # once a process
            _base["swept"] = True
            _sweep(top)
        path = os.path.join(top, f"{PREFIX}{os.getpid()}-{next(_counter)}")
        try:
            os.mkdir(path)
            with open(os.path.join(path, "pids.max"), "w") as f:
                f.write(str(limit))
        except OSError as e:
            raise Unavailable(f"{NO_CGROUP} ({path}: {e.strerror})") from None
        self.path = path
        self.procs_file = os.path.join(path, "cgroup.procs")

    def remove(self):
        """Kill what is left in the group, then remove it."""
        if self.path is None:
            return
        _remove(self.path)
        self.path = None


def _remove(path, patience=2.0):
    deadline = time.monotonic() + patience
    delay = 0.001
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            pass
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                for pid in f.read().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _sweep(top):
    """Remove the groups of agent-runs that have died."""
    try:
        names = [n for n in os.listdir(top) if n.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            _remove(os.path.join(top, name), patience=0.1)
