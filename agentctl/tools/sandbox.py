"""The sandbox every tool call and every stdio MCP server runs in (agentctl(7),
SANDBOX), made with bubblewrap (bwrap) and drawn by the agent's settings:

- the system's programs and libraries read-only (/usr, /bin, /lib..., /etc without
  its secrets, /opt), and the Python agentctl runs on with agentctl itself;
- the agent's --cwd read-write, its --ro paths read-only, a private /tmp (also its
  HOME, unless its cwd holds the real one);
- nothing else: not $HOME, not the database or its directory, not agentctl's
  configuration, tool path or cache (hidden even inside the cwd), not the operator's
  other processes (a pid namespace of its own), no network without --net;
- its limits (--limit): CPU seconds, address space, file size and open files as
  rlimits set inside the sandbox (prlimit), processes counted in its own user
  namespace, or, when the operator is root (whom RLIMIT_NPROC does not bind, even
  in a user namespace), by a pids cgroup of its own (pids.py);
- no capabilities, no new user namespaces, a session of its own (no terminal to
  push input into), killed with agent-run and all at once when its first process
  ends (what it left behind dies with its pid namespace).

Where bwrap is missing or can't make namespaces, a call fails with a message that
names the fix (Unavailable): it never runs unsandboxed.
"""

import glob
import json
import os
import shutil
import subprocess
import sys

from agentctl import limits as limits_, paths
from agentctl.store import db
from agentctl.tools import confine, pids
from agentctl.tools.proxy import MOUNT as PROXY

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers",
           "/etc/sudoers.d", "/etc/security/opasswd", "/etc/ssh/ssh_host_*key")
NO_BWRAP = ("the sandbox needs bubblewrap (bwrap): install Debian's or Ubuntu's "
            "bubblewrap package (apt-get install bubblewrap), or Fedora's; or give the "
            "agent --unconfined (agent-fork(1)) to run its tools without one")
NO_PRLIMIT = "the sandbox needs prlimit (util-linux) to set a call's limits"
FIXES = (   # what bwrap says when it can't make its namespaces, and the fix
    ("unprivileged_userns_clone", "enable user namespaces: sysctl -w "
     "kernel.unprivileged_userns_clone=1"),
    ("max_user_namespaces", "allow user namespaces: sysctl -w user.max_user_namespaces=15000"),
    ("uid map", "allow bwrap's user namespaces (Ubuntu 24.04: sysctl -w "
     "kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for bwrap)"),
    ("namespace", "allow user namespaces (sysctl user.max_user_namespaces, "
     "kernel.unprivileged_userns_clone, or AppArmor's restriction of them)"),
)


Unavailable = pids.Unavailable     # the sandbox can't be made here; the message names the fix


_found = {}


def _program(name):
    if name not in _found:
        _found[name] = shutil.which(name)
    return _found[name]


def _bwrap():
    """bwrap's path and whether it has --disable-userns (0.8.0)."""
    if "bwrap-args" not in _found:
        path = _program("bwrap")
        if path is None:
            raise Unavailable(NO_BWRAP)
        try:
            version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                     timeout=10).stdout.split()[-1]
            newer = tuple(int(n) for n in version.split(".")[:2]) >= (0, 8)
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            newer = False
        _found["bwrap-args"] = (path, newer)
    return _found["bwrap-args"]


def explain(stderr):
    """Why bwrap could not start a call, from what it said, with the fix."""
    said = " ".join(line.strip() for line in stderr.splitlines() if "bwrap" in line)
    said = said or stderr.strip()[-300:] or "bwrap failed"
    for clue, fix in FIXES:
        if clue in said:
            return f"the sandbox could not be made ({said}): {fix}"
    return f"the sandbox could not be made: {said}"


def problem():
    """None when a sandbox can be made here, else why (naming the fix): for
    agent-run --list-tools and the tests, which say so loudly."""
    try:
        path, _ = _bwrap()
        if _program("prlimit") is None:
            return NO_PRLIMIT
    except Unavailable as e:
        return str(e)
    proc = subprocess.run([path, "--unshare-all", "--unshare-user", "--cap-drop", "ALL",
                           "--ro-bind", "/", "/", "--", "true"],
                          capture_output=True, text=True)
    return None if proc.returncode == 0 else explain(proc.stderr)


def _inside(path, tops):
    return any(path == t or path.startswith(t.rstrip("/") + "/") for t in tops)


def _python():
    """The Python agentctl runs on, and agentctl: (path as named, real path) pairs.
    A pip --target install (make install) keeps agentctl's dependencies beside it."""
    found = []
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable),
              paths.PACKAGE}:
        found.append((p, os.path.realpath(p)))
    top = os.path.dirname(paths.PACKAGE)
    try:
        if any(n.endswith(".dist-info") for n in os.listdir(top)):
            found.append((top, os.path.realpath(top)))
    except OSError:
        pass
    return found


def hidden():
    """What no sandbox shows, wherever it is: the database (its directory), agentctl's
    configuration, data and cache directories, the MCP configuration's directory, and
    the tool path's directories but the shipped tools (read-only with agentctl)."""
    found = [os.path.join(paths.config_home(), "agentctl"),
             os.path.join(paths.data_home(), "agentctl"),
             os.path.join(paths.cache_home(), "agentctl"),
             os.path.dirname(paths.mcp_config())]
    found += [d for d in paths.tool_path() if d != paths.SHIPPED_TOOLS]
    database = paths.database()
    if not paths.is_url(database):
        found.append(os.path.dirname(database))
    return [os.path.abspath(p) for p in found]


class Sandbox:
    """The sandbox of one agent's calls: `wrap()` gives the command and environment
    that run a program in it."""

    def __init__(self, agent, environment, proxy=None):
        self.cwd = agent["cwd"] or os.getcwd()
        self.ro = [p for p in (agent["ro"] or "").split("\n") if p]
        self.net = bool(agent["net"])
        self.limits = limits_.read(agent["limits"])
        self.proxy = proxy              # the directory of the proxy's socket and programs
        self._layouts = {}
        self.environment = self._environment(environment)

    def _environment(self, given):
        environment = {k: v for k, v in given.items()
                       if not k.startswith("XDG_") and k != "TMPDIR"}
        home = environment.get("HOME")
        if not home or not _inside(os.path.abspath(home), [self.cwd]):
            environment["HOME"] = "/tmp"
        environment["TMPDIR"] = "/tmp"
        environment["AGENTCTL_NET"] = "1" if self.net else "0"
        if paths.is_url(environment.get("AGENTCTL_DB")):
            environment["AGENTCTL_DB"] = db.shown(environment["AGENTCTL_DB"])
        inodes, names = confine.forbidden()
        environment[confine.FORBIDDEN] = json.dumps({"inodes": sorted(inodes),
                                                     "names": sorted(names)})
        if self.proxy:
            environment["PATH"] = f"{PROXY}/bin:{environment.get('PATH', '/usr/bin:/bin')}"
            environment["AGENTCTL_SOCKET"] = f"{PROXY}/socket"
        return environment

    def arguments(self, status_fd=None, program=None, procs=True, per_call=True):
        """bwrap's arguments up to the command (`--`), and prlimit's; `program`: a file
        the command needs that may be in a hidden place (a tool on the tool path)."""
        args = list(self._layout())
        if status_fd is not None:
            args += ["--json-status-fd", str(status_fd)]
        if program:
            args += ["--ro-bind", os.path.realpath(program), program]
        if self.proxy:
            args += ["--bind", self.proxy, PROXY]
        args += ["--chdir", self.cwd, "--"]
        return args + self._limits(procs, per_call)

    def _layout(self):
        """What every call of this sandbox sees (worked out once: the system's
        directories, the Python, what is hidden)."""
        key = (self.net, tuple(self.ro))
        if key in self._layouts:
            return self._layouts[key]
        path, newer = _bwrap()
        args = [path, "--unshare-all", "--unshare-user", "--cap-drop", "ALL",
                "--die-with-parent", "--new-session"]
        if newer:
            args.append("--disable-userns")
        if self.net:
            args.append("--share-net")
        for top in SYSTEM:
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        if self.net:
            for top in ("/run/systemd/resolve", "/run/resolvconf"):
                if os.path.isdir(top):
                    args += ["--ro-bind", top, top]
        args += ["--proc", "/proc", "--dev", "/dev"]
        fsize = self.limits["fsize"]
        args += (["--size", str(fsize)] if fsize else []) + ["--tmpfs", "/tmp"]
        for named, real in _python():
            args += ["--ro-bind", real, named]
            if real != named:
                args += ["--ro-bind", real, real]
        for p in self.ro:       # before the cwd: a --ro path that holds it must not hide it
            args += ["--ro-bind-try", p, p]
        args += ["--bind", self.cwd, self.cwd]
        args += self._hide([self.cwd] + self.ro + list(SYSTEM))
        self._layouts[key] = args
        return args

    def _hide(self, visible):
        """A tmpfs over each hidden directory inside what the sandbox shows; where that
        directory is the cwd or a --ro path itself, /dev/null over each file of the
        database and the MCP configuration in it (they can't be created: the file
        tools refuse them, and the database is in WAL mode)."""
        args = []
        tops = set(visible)
        for directory in dict.fromkeys(hidden()):
            if not _inside(directory, visible) or not os.path.isdir(directory):
                continue
            if directory in tops:
                database = paths.database()
                files = [paths.mcp_config()] + ([] if paths.is_url(database) else [
                    database + end for end in ("", "-wal", "-shm", "-journal")])
                for f in files:
                    if os.path.dirname(f) == directory and os.path.isfile(f):
                        args += ["--ro-bind", "/dev/null", f]
            else:
                args += ["--tmpfs", directory]
        for pattern in SECRETS:
            for secret in glob.glob(pattern):
                if os.path.isdir(secret):
                    args += ["--tmpfs", secret]
                elif os.path.exists(secret):
                    args += ["--ro-bind", "/dev/null", secret]
        return args

    def _limits(self, procs, per_call):
        """prlimit's command for the limits: per call (cpu, mem) only for a call, not
        for a server that lives a whole turn; processes by rlimit unless root."""
        prlimit = _program("prlimit")
        if prlimit is None:
            raise Unavailable(NO_PRLIMIT)
        given = {"fsize": "fsize", "files": "nofile"}
        if per_call:
            given.update(cpu="cpu", mem="as")
        if procs and os.geteuid() != 0:
            given["procs"] = "nproc"
        args = [prlimit]
        for key, option in given.items():
            value = self.limits[key]
            args.append(f"--{option}={'unlimited' if value is None else value}")
        return args + ["--"]

    def wrap(self, argv, status_fd=None, program=None, per_call=True, ro=(), net=False):
        """(argv that runs `argv` in the sandbox, the pids cgroup to remove when it has
        ended or None). For root, a shell first moves itself into a pids cgroup of its
        own (pids.py), which bounds its processes. `ro`, `net`: more read-only paths,
        the network (an MCP server's, from the operator's configuration)."""
        saved = self.ro, self.net
        self.ro, self.net = self.ro + list(ro), self.net or net
        try:
            args = self.arguments(status_fd, program, procs=True, per_call=per_call)
        finally:
            self.ro, self.net = saved
        if os.geteuid() != 0 or self.limits["procs"] is None:
            return args + list(argv), None
        group = pids.Group(self.limits["procs"])
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', group.procs_file] + args \
            + list(argv), group
