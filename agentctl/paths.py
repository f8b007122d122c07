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


def mcp_log(server):
    """Where an MCP server's standard error goes (its latest start's)."""
    return os.path.join(cache_home(), "agentctl", "mcp", f"{server}.stderr")


def forbidden_to_tools():
    """What no confined tool may open or create: the tool path's directories and the
    programs in them (a hard link to one elsewhere is the same file), the MCP
    configuration, the cache of the descriptions, the operator's prices (a model
    that could lower them would escape its budget in dollars), the database and its
    -wal, -shm and -journal files."""
    found = tool_path() + [mcp_config(), describe_cache(), mcp_cache()] + \
        ([prices_file()] if prices_file() else [])
    for directory in tool_path():
        try:
            found += [entry.path for entry in os.scandir(directory)]
        except OSError:
            pass
    db = database()
    if not is_url(db):
        found += [db] + [db + end for end in ("-wal", "-shm", "-journal")]
    return found
