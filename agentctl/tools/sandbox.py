"""The sandbox every tool call and every stdio MCP server runs in (agentctl(7),
SANDBOX), made with bubblewrap (bwrap) and drawn by the agent's settings. Every edge
where the host meets it is an allowlist, decided when the call starts:

- files: the system's programs and libraries read-only (/usr, /bin, /lib..., /etc
  without its secrets, /opt), agentctl and its Python read-only, the agent's --cwd
  read-write and its --ro paths read-only, each bound by handle (handles.py: a link or
  a swap on the way is refused); inside them, what no tool may touch covered
  (cover.py: the protected paths, the read-only set, a home's top level); a private
  /tmp, also its HOME unless its cwd holds the real one; nothing else;
- the environment: a few variables (ENVIRONMENT, LC_*) and those the operator granted
  by name (--env); never the keys or a password otherwise;
- the kernel: no capabilities; /proc of its own, its knobs read-only and its secrets
  hidden; a seccomp filter (seccomp.py); its own user, pid, ipc, uts and network
  namespaces (no route out, no host's abstract socket: bwrap's, or given hosts the
  one made before it, netns.py); no new namespaces; a session of its own; killed
  with agent-run. As root, its tools run as an unprivileged user
  (AGENTCTL_SANDBOX_USER, else nobody): uid 0 in a user namespace is still root to
  every file it can reach; bwrap sets the call up as root, in a user namespace that
  maps root and that user alone (runas.py; handles.Users: agentctl writes its maps);
- the network: only the hosts of its --net list (an MCP server's "net"), through its
  own loopback, whose listener the egress proxy in agent-run serves (netns.py,
  egress.py);
- its limits (--limit): rlimits (runas.py: prlimit; as root, set on bwrap's child
  while it waits for its maps); RLIMIT_NPROC counts a user's processes in one user
  namespace, so in the call's own it counts the call's (never root's, which it does
  not bind: hence the tools' user);
- agentctl's programs: through its own proxy's socket (proxy.py), bound read-only.

Where bwrap is missing or can't make namespaces, a call fails with a message that
names the fix (Unavailable): it never runs unsandboxed.
"""

import glob
import json
import os
import subprocess
import zlib

from agentctl import limits as limits_, paths, settings
from agentctl.store import db
from agentctl.tools import bwrap, confine, cover, runas
from agentctl.tools.handles import Handle, Prepared, Readable  # noqa: F401 (Prepared: a wrap's)
from agentctl.workspace import mount

PROXY = "/run/agentctl"     # its proxy's directory (proxy.py): the socket, the programs
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers",
           "/etc/sudoers.d", "/etc/security/opasswd", "/etc/ssh/ssh_host_*key")
# procfs: knobs that write to the kernel, read-only; what tells of other users, hidden
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
PROC_HIDDEN = ("/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/timer_list",
               "/proc/sched_debug", "/proc/latency_stats", "/proc/kallsyms", "/proc/acpi",
               "/proc/scsi")
# The environment every tool gets, from agent-run's (with LC_*); others by --env.
ENVIRONMENT = ("PATH", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "COLORTERM",
               "NO_COLOR")


Unavailable = bwrap.Unavailable    # the sandbox can't be made here; the message names the fix
_made = {}          # what is worked out once a process


def problem():
    """None when a sandbox can be made here, else why (naming the fix): for
    agent-run --list-tools and the tests, which say so loudly."""
    try:
        path = bwrap.path()
        if os.geteuid() != 0 and bwrap.program("prlimit") is None:
            return runas.NO_PRLIMIT
        _seccomp()
        if os.geteuid() == 0:
            runas.user()
    except Unavailable as e:
        return str(e)
    proc = subprocess.run([path, "--unshare-all", "--unshare-user", "--cap-drop", "ALL",
                           "--ro-bind", "/", "/", "--", "true"],
                          capture_output=True, text=True)
    return None if proc.returncode == 0 else bwrap.explain(proc.stderr)


def _seccomp():
    """The seccomp program's file, which bwrap reads (seccomp.py; written once, in the
    run-time directory, named by what it holds)."""
    if "seccomp" not in _made:
        from agentctl.tools import seccomp  # (start-up: 1.6 ms, only for a sandboxed call)
        program = seccomp.program(os.path.join(paths.cache_home(), "agentctl", "seccomp"))
        path = os.path.join(paths.runtime(make=True), f"seccomp-{zlib.crc32(program):08x}")
        if not os.path.isfile(path):
            temporary = f"{path}.{os.getpid()}"
            with open(temporary, "wb") as f:
                f.write(program)
            os.replace(temporary, path)
        _made["seccomp"] = path
    return _made["seccomp"]


def _own(directory):
    """`directory` (agentctl's: its parent no tool can write), made if missing and, as
    root, owned by the user tools run as (and by it alone: mode 0700)."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if os.geteuid() == 0:
        uid, gid = runas.user()
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            if os.fstat(fd).st_uid != uid:
                os.fchown(fd, uid, gid)
        finally:
            os.close(fd)
    return directory


def _empty():
    """An empty read-only file: what stands in for a hidden file."""
    path = os.path.join(paths.runtime(make=True), "empty")
    if not os.path.isfile(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o444)
        os.close(fd)
    return path


def _python():
    """The Python agentctl runs on, and agentctl: (real path, path as named) pairs, but
    those inside another (each bind costs bwrap a read of the mount table)."""
    if "python" not in _made:
        named = paths.agentctl_code()
        _made["python"] = [(os.path.realpath(p), p) for p in named
                           if not any(q != p and paths.inside(p, [q]) for q in named)]
    return _made["python"]


def _within(program, bound):
    """Whether `program` is seen already, and as itself, in what is bound read-only
    ((real, named) pairs): a tool shipped with agentctl (a bind the fewer a call)."""
    real = os.path.realpath(program)
    return any(paths.inside(program, [named]) and
               real == os.path.join(top, os.path.relpath(program, named))
               for top, named in bound)


def _readable(path):
    """Whether a sandboxed tool could read `path`: by its mode for another user (as
    root, tools run as one), else as agent-run can."""
    if os.geteuid() != 0:
        return os.access(path, os.R_OK)
    try:
        return bool(os.stat(path).st_mode & 0o004)
    except OSError:
        return False


class Sandbox:
    """The sandbox of one agent's calls: `wrap()` prepares the command that runs a
    program in it; `environment` is the environment it gets."""

    def __init__(self, agent, environment, proxy=None, database=None, stacked=None):
        self.cwd = agent["cwd"] or os.path.realpath(os.getcwd())
        self.stacked = stacked  # its stack of layers now (a function), or None: direct
        self.ro = settings.listed(agent["ro"])
        self.hosts = agent["net"]       # its list, one pattern a line (None: none)
        self.agent = agent
        self.egress = None              # egress.Server, made at the first call with hosts
        self.limits = limits_.read(agent["limits"])
        self.granted = set(settings.listed(agent["rw"]))
        self.env = set(settings.listed(agent["env"]))
        self.proxy = proxy              # a proxy.Server, or None
        self.protected = paths.protected(database)
        self.environment = self._environment(environment)

    def _environment(self, given):
        """What a tool's environment holds: ENVIRONMENT and LC_* as agent-run has
        them, what was granted by name, and agentctl's own."""
        environment = {k: v for k, v in given.items()
                       if k in ENVIRONMENT or k.startswith("LC_") or k in self.env}
        for name in ("AGENT_ID", "PYTHONPATH"):
            if name in given:
                environment[name] = given[name]
        if given.get("AGENTCTL_DB"):
            environment["AGENTCTL_DB"] = db.shown(given["AGENTCTL_DB"])
        home = paths.home()
        environment["HOME"] = home if paths.inside(home, [self.cwd]) else "/tmp"
        environment["TMPDIR"] = "/tmp"
        environment["AGENTCTL_NET"] = "1" if self.hosts else "0"
        inodes, names = confine.forbidden(self.protected)
        self.forbidden = {"inodes": sorted(inodes), "names": sorted(names)}
        environment[confine.FORBIDDEN] = json.dumps(self.forbidden)
        if self.proxy is not None:
            environment.update(self.proxy.inside())
            environment["PATH"] = f"{PROXY}/bin:{environment.get('PATH', '/usr/bin:/bin')}"
        return environment

    def _check(self):
        """Unavailable when the working directory can't be a sandbox's (it is / or holds
        the system, it holds the home, it is inside what no tool may touch)."""
        why = paths.refused_workdir(self.cwd)
        if why is None:
            held = [p for p, _ in self.protected if paths.inside(self.cwd, [p])]
            if held:
                why = f"{self.cwd} is inside {held[0]}, which no tool may write"
        if why is not None:
            raise Unavailable(f"working directory {self.cwd}: {why}: give the agent "
                              "another (agent-set ID cwd=DIR)")

    def _namespaces(self, net):
        """bwrap's options for the namespaces, a network of its own always (bwrap's;
        given hosts, `net`, the one made before it: netns.py): unprivileged, a user
        namespace of its own (no new ones inside); as root, the user namespace
        runas.users() gives (the tools run as another user, and seccomp refuses new namespaces), and
        only the capabilities setpriv needs to become that user (gone once it has)."""
        args = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        args += [] if net else ["--unshare-net"]
        if os.geteuid() != 0:
            return args + ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        return args + ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add",
                       "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]

    def _system(self):
        """What every call of this sandbox sees of the system (the same each call)."""
        key = "system"
        if key not in _made:
            args = []
            for top in SYSTEM:
                if os.path.islink(top):
                    args += ["--symlink", os.readlink(top), top]
                elif os.path.isdir(top):
                    args += ["--ro-bind", top, top]
            for pattern in SECRETS:     # (each cover costs bwrap a read of the mount
                for secret in glob.glob(pattern):   # table: not those it can't read)
                    if not _readable(secret):
                        continue
                    if os.path.isdir(secret):
                        args += ["--tmpfs", secret]
                    elif os.path.exists(secret):
                        args += ["--ro-bind", _empty(), secret]
            args += ["--proc", "/proc"]
            for path in PROC_READ_ONLY if os.geteuid() != 0 else PROC_READ_ONLY[:1]:
                if os.path.exists(path):        # (as root, the rest are root's alone)
                    args += ["--ro-bind", path, path]
            for path in PROC_HIDDEN if os.geteuid() != 0 else ():  # (root's: nobody's)
                if os.path.isdir(path):
                    args += ["--tmpfs", path]
                elif os.path.exists(path):
                    args += ["--ro-bind", _empty(), path]
            args += ["--dev", "/dev"]
            _made[key] = args
        return _made[key]

    def wrap(self, argv, status_fd=None, program=None, per_call=True, ro=(), net=None,
             who=None, own=None):
        """The call of `argv` in the sandbox, prepared (Prepared): `program`, a file
        the command needs that may be in a hidden place (a tool on the tool path);
        `ro`, `net`: more read-only paths, more hosts (an MCP server's, `who`, from the
        operator's configuration: a list of patterns); `own`, (a directory of
        agentctl's, where): a directory of its own it may write (made, and as root
        given to the user it runs as), bound there. Given hosts, its bwrap starts in a
        network made for it (Prepared.network, netns.py), and its Prepared.env points
        its programs at the listener there. As root,
        bwrap makes a user namespace whose maps agentctl gives (Prepared.started), in
        which RLIMIT_NPROC counts the call's processes."""
        self._check()
        hosts = settings.listing(settings.listed(self.hosts) + list(net or ()))
        shown = self.ro + [os.path.realpath(p) for p in ro]
        args = [bwrap.path()] + self._namespaces(bool(hosts)) + runas.users(self.limits,
                                                                            per_call)
        args += ["--die-with-parent", "--new-session"]
        args += ["--seccomp", Readable(_seccomp())]
        args += self._system()
        fsize = self.limits["fsize"]
        args += (["--size", str(fsize)] if fsize else []) + ["--perms", "1777", "--tmpfs",
                                                              "/tmp"]
        for path in shown:      # before the cwd: a --ro path that holds it must not hide it
            if os.path.exists(path):
                args += ["--ro-bind-fd", Handle(path), path]
        args += ["--bind-fd", Handle(self.cwd), self.cwd]
        if own is not None:
            args += ["--bind-fd", Handle(_own(own[0])), own[1]]
        layer = self._layer()       # (first: it may wait for a frozen layer's writers)
        placeholders = cover.Placeholders()
        try:
            covering, hidden = cover.arguments(
                [self.cwd], shown, self.protected, self.granted, _empty(), placeholders,
                paths.directories())
        except OSError as e:
            placeholders.release()
            if layer is not None:
                layer.close()
            raise Unavailable(str(e.strerror or e)) from None
        args += covering
        bound = [(real, named) for real, named in _python()
                 if not paths.inside(named, [self.cwd] + shown)]
        for real, named in bound:
            args += ["--ro-bind-fd", Handle(real), named]
        if program and not _within(program, bound):
            args += ["--ro-bind-fd", Handle(os.path.realpath(program)), program]
        if self.proxy is not None:
            args += ["--ro-bind-fd", Handle(self.proxy.dir), PROXY]
        network, env = None, {}
        if hosts:
            network, env = self._egress().socket_for(hosts, who), dict(self.egress.VARIABLES)
        for path in hidden if os.geteuid() != 0 else ():   # (root's: mode 0555 is
            args += ["--remount-ro", path]              # enough for another user)
        if status_fd is not None:
            args += ["--json-status-fd", status_fd if isinstance(status_fd, Handle)
                     else str(status_fd)]
        args += ["--chdir", self.cwd, "--"]
        if os.geteuid() == 0:       # (its user must reach what is bound)
            args = bwrap.open_parents(args)
        args += runas.drop() + runas.prlimit(self.limits, per_call) + list(argv)
        if layer is not None:       # (the file tools told where it is: confine._layered)
            env[confine.FORBIDDEN] = json.dumps({**self.forbidden, "layer": [
                layer.target, *layer.identity]})
        return Prepared(args, placeholders, env, network, layer)

    def _layer(self):
        """The call's layer prepared (workspace.mount), or None: the agent works on its
        directory directly. Its stack is read at each call (a fork since the last one:
        its new layer), and again once its layer is held (a fork meanwhile: again)."""
        for _ in range(3):
            stack = self.stacked() if self.stacked is not None else None
            if not stack:
                return None
            try:
                layer = mount.Mount(stack, self.agent["id"])
            except mount.Unavailable as e:
                raise Unavailable(str(e)) from None
            except OSError as e:
                raise Unavailable(f"workspace: its layer: {e.strerror or e}") from None
            if self.stacked()[0]["id"] == stack[0]["id"]:
                return layer
            layer.close()
        raise Unavailable("workspace: its layer keeps changing (forks under way): try again")

    def reaches(self, wanted, net=()):
        """Whether a call given `net` besides its agent's list may reach every host of
        `wanted` (patterns)."""
        from agentctl import hosts  # (start-up: 2 ms, only for a list of hosts)
        given = settings.listed(self.hosts) + list(net)
        return bool(given) and hosts.within(wanted, given)

    def _egress(self):
        """The egress proxy of its calls (egress.py), started at the first call given
        hosts."""
        if self.egress is None:
            from agentctl.tools import egress  # (start-up: 4 ms, only for a call given hosts)
            self.egress = egress.Server.made(self.hosts, self.agent["name"] or self.agent["id"])
        return self.egress

    def connections(self, settle=0):
        """The connections its calls made (or were refused) since the last ask (net
        events' fields), those in flight awaited `settle` seconds at most."""
        if self.egress is not None and settle:
            self.egress.settle(settle)
        return self.egress.drain() if self.egress is not None else []

    def close(self):
        if self.egress is not None:
            self.egress.close()
            self.egress = None
