"""Where agentctl's files live: the database, the tool path, the MCP configuration,
the cache of the tools' descriptions. Every other module asks here.

A path from the environment or a flag is made absolute once, when a program starts
(`settle`), in the environment itself: the processes a program starts (a tool, a
turn of `agent-run --all`, an MCP server) inherit the same absolute paths, so a
relative `--db` or `AGENTCTL_MCP` can't name another file in a tool's working
directory. XDG variables that hold a relative path are ignored, as the XDG Base
Directory specification says.
"""

import os
import stat
import sys

PACKAGE = os.path.dirname(os.path.abspath(__file__))
SHIPPED_TOOLS = os.path.join(PACKAGE, "toolbox")

# Variables that name one file or directory, made absolute by settle(); the tool path
# is a list (settled entry by entry).
FILES = ("AGENTCTL_DB", "AGENTCTL_MCP", "AGENTCTL_PRICES")
URL_SCHEMES = ("postgresql://", "postgres://")


def is_url(path):
    """Whether `path` names a PostgreSQL database rather than a SQLite file."""
    return isinstance(path, str) and path.startswith(URL_SCHEMES)


def absolute(path):
    """A file's path made absolute (a URL and SQLite's :memory: are left as they are)."""
    if not path or is_url(path) or path == ":memory:":
        return path
    return os.path.abspath(path)


def settle(environ=None):
    """Make the environment's paths absolute, once, at a program's start."""
    environ = os.environ if environ is None else environ
    for name in FILES:
        if environ.get(name) and "\0" not in environ[name]:
            environ[name] = absolute(environ[name])
    if environ.get("AGENTCTL_TOOLS"):
        environ["AGENTCTL_TOOLS"] = ":".join(
            os.path.abspath(d) for d in environ["AGENTCTL_TOOLS"].split(":") if d)
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        if environ.get(name) and not os.path.isabs(environ[name]):
            del environ[name]


def _xdg(variable, fallback):
    given = os.environ.get(variable)
    if given and os.path.isabs(given):
        return given
    return os.path.join(os.path.expanduser("~"), *fallback)


def data_home():
    return _xdg("XDG_DATA_HOME", (".local", "share"))


def merges():
    """Where agent-merge keeps the journal of a merge under way (workspace/journal.py):
    a program that finds it finishes that merge first (cli/program.py)."""
    return os.path.join(data_home(), "agentctl", "m")


def config_home():
    return _xdg("XDG_CONFIG_HOME", (".config",))


def cache_home():
    return _xdg("XDG_CACHE_HOME", (".cache",))


def default_database():
    return os.path.join(data_home(), "agentctl", "agents.db")


def database(given=None):
    """--db, else $AGENTCTL_DB, else $XDG_DATA_HOME/agentctl/agents.db; absolute."""
    return absolute(given or os.environ.get("AGENTCTL_DB") or default_database())


def tool_path():
    """$AGENTCTL_TOOLS (directories separated by :, as PATH), else
    $XDG_CONFIG_HOME/agentctl/tools followed by the tools shipped with agentctl."""
    given = os.environ.get("AGENTCTL_TOOLS")
    if given is not None:
        return [os.path.abspath(d) for d in given.split(":") if d]
    return [os.path.join(config_home(), "agentctl", "tools"), SHIPPED_TOOLS]


def mcp_config():
    """$AGENTCTL_MCP, else $XDG_CONFIG_HOME/agentctl/mcp.json."""
    return absolute(os.environ.get("AGENTCTL_MCP")) or \
        os.path.join(config_home(), "agentctl", "mcp.json")


def prices_file():
    """$AGENTCTL_PRICES, the operator's prices (ops.prices), or None."""
    return absolute(os.environ.get("AGENTCTL_PRICES")) or None


def describe_cache():
    """The cache of the program tools' --describe answers."""
    return os.path.join(cache_home(), "agentctl", "tools.json")


def mcp_cache():
    """The cache of what each MCP server offers (tools/mcp.py)."""
    return os.path.join(cache_home(), "agentctl", "mcp-tools.json")


def mcp_sessions():
    """The Streamable HTTP servers' sessions kept for an agent's next turn (tools/mcp.py)."""
    return os.path.join(cache_home(), "agentctl", "mcp-sessions.json")


def mcp_own(server):
    """An MCP server's own directory, its launcher's package cache (tools/launchers.py)."""
    return os.path.join(cache_home(), "agentctl", "mcp", f"{server}.cache")


def mcp_log(server):
    """Where an MCP server's standard error goes (its latest start's)."""
    return os.path.join(cache_home(), "agentctl", "mcp", f"{server}.stderr")


# How a protected path is covered in a sandbox (tools/sandbox.py): hidden (an empty,
# read-only stand-in) or shown read-only.
HIDE, READ_ONLY = "hide", "ro"

# Inside every writable root, read-only by default (agentctl(7), SANDBOX): what makes
# git, editors, direnv and MCP clients run programs when the operator next works there.
# agent-fork --rw NAME lets an agent's tools write one of them.
READ_ONLY_SET = (".git", ".mcp.json", ".vscode", ".envrc")
# Inside a home that a tool may write: its top level is read-only (shells' start-up
# files, .gitconfig, .npmrc ... all live there), and so are these directories below it.
HOME_SET = (".ssh", ".gnupg", ".config/autostart", ".config/systemd", ".config/git",
            ".config/fish", ".config/environment.d", ".local/bin",
            ".local/share/systemd", ".local/share/applications")
# No working directory: the system's own directories and the root.
NOT_WORKDIRS = ("/", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
                "/opt", "/boot", "/proc", "/sys", "/dev", "/run", "/var", "/tmp")


def home():
    return os.path.realpath(os.path.expanduser("~"))


def runtime(make=False):
    """agentctl's private run-time directory (the proxies' sockets, the sandbox's
    stand-ins): $XDG_RUNTIME_DIR/agentctl-UID, else /tmp/agentctl-UID; hidden from every
    sandbox. With `make`, made (0700) when missing, and refused (OSError) when it is a
    link, not a directory, someone else's, or open to others: in /tmp anyone may have
    made it first."""
    given = os.environ.get("XDG_RUNTIME_DIR")
    top = given if given and os.path.isabs(given) else "/tmp"
    path = os.path.join(top, f"agentctl-{os.getuid()}")
    if make:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        else:
            os.chmod(path, 0o700)       # (whatever the umask)
        mode = os.lstat(path).st_mode
        if not stat.S_ISDIR(mode):
            kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a directory"
            raise OSError(f"{path}: {kind}: agentctl keeps its private files there "
                          "(remove it)")
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if st.st_uid != os.getuid():
            raise OSError(f"{path}: owned by uid {st.st_uid}, not {os.getuid()}: agentctl "
                          "keeps its private files there (remove it)")
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise OSError(f"{path}: mode {stat.S_IMODE(st.st_mode):04o}, not 0700: agentctl "
                          "keeps its private files there (remove it)")
    return path


def agentctl_code():
    """What runs agentctl: its package and the Python it runs on (prefixes, the
    interpreter's directory); a tool must never write them (its next agent-run would
    run what it wrote), so they are read-only wherever a tool may write."""
    found = {PACKAGE, sys.prefix, sys.base_prefix, sys.exec_prefix,
             os.path.dirname(sys.executable)}
    return sorted({os.path.realpath(p) for p in found} | found)


def protected(database=None):
    """The one list of what no tool may write, and what it may not see, wherever it
    is (a sandbox covers each; the file tools and the proxy refuse them): (path, how).
    Hidden: the database actually opened (`database`, however it was named) with its
    -wal, -shm and -journal files, agentctl's configuration, data, cache and run-time
    directories, the tool path (the shipped tools aside), the MCP configuration and the
    caches of what tools described, the operator's prices (a model that lowered them
    would escape its budget in dollars), ~/.pgpass and $PGPASSFILE. Read-only:
    agentctl's code and its Python."""
    hidden = [os.path.join(top(), "agentctl") for top in (config_home, data_home, cache_home)]
    hidden += [runtime(), mcp_config(), describe_cache(), mcp_cache()]
    hidden += [d for d in tool_path() if d != SHIPPED_TOOLS]
    for name in ("AGENTCTL_PRICES", "PGPASSFILE"):
        if os.environ.get(name):
            hidden.append(absolute(os.environ[name]))
    hidden.append(os.path.join(home(), ".pgpass"))
    db = absolute(database) if database else globals()["database"]()
    if not is_url(db) and db != ":memory:":
        hidden += [db + end for end in ("", "-wal", "-shm", "-journal")]
    found = [(os.path.abspath(p), HIDE) for p in hidden]
    found += [(p, READ_ONLY) for p in agentctl_code()]
    return list(dict.fromkeys(found))


def directories():
    """What of the protected, the read-only set and the home's set is a directory by
    nature (a missing one's placeholder is an empty directory, not a file: an empty
    .git directory is no repository to git, a .git file is a broken one)."""
    found = {os.path.join(top(), "agentctl") for top in (config_home, data_home, cache_home)}
    return found | {runtime()} | set(tool_path()) | {".git", ".vscode"} | set(HOME_SET)


def inside(path, tops):
    """Whether `path` is one of `tops` or below one (paths compared as given: resolve
    them first)."""
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in tops)


class LinkOnTheWay(OSError):
    """A path that has a symbolic link on its way (or no longer resolves as it did)."""


def opened(path, flags=os.O_PATH):
    """A descriptor of absolute `path` opened one component at a time from /, never
    through a symbolic link: what a check found is what a bind mounts, whatever is
    renamed or swapped meanwhile. LinkOnTheWay names the first link; OSError for a path
    that is missing."""
    if not os.path.isabs(path):
        raise ValueError(f"{path}: not an absolute path")
    parts = [p for p in path.split("/") if p]
    if ".." in parts:
        raise LinkOnTheWay(0, f"{path}: .. on the way")
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for n, part in enumerate(parts):
            last = n == len(parts) - 1
            nfd = os.open(part, (flags if last else os.O_PATH) | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)
            os.close(fd)
            fd = nfd
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise LinkOnTheWay(0, "/" + "/".join(parts[:n + 1]) + " is a symbolic link")
        return fd
    except BaseException:
        os.close(fd)
        raise


def refused_workdir(path):
    """Why `path` (resolved) can't be a working directory, or None: / and the system's
    directories (the sandbox shows them read-only, and a tool given one could rewrite
    the system)."""
    if path in NOT_WORKDIRS:
        return f"{path} holds the system"
    return None
