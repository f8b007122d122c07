"""Tools from programs (agentctl(7), TOOLS): an executable on the tool path is a tool.

`PROG --describe` prints {"description", "parameters" (JSON Schema)[, "timeout",
"confined" (ignored now: every call runs in the sandbox)]}; descriptions are cached by
the file's path, size and mtime. The parameters are what a call's arguments are checked
against (shape.py's subset, its keywords well formed; others are the program's to
check), so a tool whose parameters agentctl can't read is skipped. How a tool's program
is started (its command, its environment) is here too, for --describe and for a call;
the call itself is calls.py, which only a turn imports.
"""

import json
import os

from agentctl import jsonin, keys, paths, shape, spawn
from agentctl.errors import UsageError
from agentctl.ids import TOOL_NAME_RULE, is_tool_name

DESCRIBE_TIMEOUT = 10.0
RUN_MARK = "AGENTCTL_TOOL_RUN"  # in a call's environment: the id of its tool_runs row


def command(path):
    """How to run a tool: a Python script under agentctl's own interpreter (so that
    requests is there), anything else as it is."""
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        first = b""
    if first.startswith(b"#!") and b"python" in first:
        return [spawn.PYTHON, path]
    return [path]


def environment(agent_id, db_path):
    """The tool's environment: the operator's, without the API keys, with the agent's
    AGENT_ID and AGENTCTL_DB, so that the programs it calls act as that agent."""
    environment = {k: v for k, v in os.environ.items() if k not in keys.VARIABLES}
    environment.pop("AGENT_ID", None)
    environment.pop(RUN_MARK, None)
    environment["PYTHONPATH"] = spawn.import_path(os.environ)    # (a tool may import it)
    if agent_id:
        environment["AGENT_ID"] = agent_id
    if db_path:
        environment["AGENTCTL_DB"] = db_path
    return environment


class Program:
    __slots__ = ("name", "path", "description", "parameters", "timeout")

    def __init__(self, name, path, described):
        self.name, self.path = name, path
        self.description = described["description"]
        self.parameters = described["parameters"]
        self.timeout = described.get("timeout")

    def spec(self):
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}}


def discover(warnings):
    """The program tools on the tool path, by name (the first of a name wins, as on
    PATH); what can't be a tool is skipped with a warning."""
    found = {}
    cache = _Cache()
    for directory in paths.tool_path():
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(".") or entry.name in found or not _executable(entry):
                continue
            if not is_tool_name(entry.name):
                warnings.append(f"tool {entry.path!r} skipped: a tool's name is "
                                f"{TOOL_NAME_RULE}")
                continue
            described = cache.describe(entry.path, warnings)
            if described is None:
                continue
            try:        # (here, not in the cache: a schema an older version took)
                shape.check_schema(described["parameters"], "parameters", others=True)
            except UsageError as e:
                warnings.append(f"tool {entry.name}: {e}: skipped")
                continue
            found[entry.name] = Program(entry.name, entry.path, described)
    cache.save()
    return found


def _executable(entry):
    try:
        return entry.is_file() and os.access(entry.path, os.X_OK)
    except OSError:
        return False


class _Cache:
    """--describe's answers, by path, size and mtime, in $XDG_CACHE_HOME/agentctl."""

    def __init__(self):
        self.file = paths.describe_cache()
        self.entries, self.dirty = None, False

    def _load(self):
        try:
            with open(self.file, encoding="utf-8") as f:
                self.entries = json.load(f)
            if not isinstance(self.entries, dict):
                self.entries = {}
        except (OSError, ValueError):
            self.entries = {}

    def describe(self, path, warnings):
        if self.entries is None:
            self._load()
        st = os.stat(path)
        key = f"{st.st_size}:{st.st_mtime_ns}"
        hit = self.entries.get(path)
        if isinstance(hit, dict) and hit.get("key") == key:
            if hit.get("warning"):
                warnings.append(hit["warning"])
            return hit.get("described")
        said = []
        described = _describe(path, said)
        warnings.extend(said)
        self.entries[path] = {"key": key, "described": described,
                              "warning": said[0] if said else None}
        self.dirty = True
        return described

    def save(self):
        if not self.dirty:
            return
        try:
            os.makedirs(os.path.dirname(self.file), mode=0o700, exist_ok=True)
            temporary = f"{self.file}.{os.getpid()}"
            with open(temporary, "w", encoding="utf-8") as f:
                json.dump(self.entries, f)
            os.replace(temporary, self.file)
        except OSError:
            pass            # a cache that can't be written costs time, not correctness


def _describe(path, warnings):
    """`PROG --describe`, checked; None (with a warning) when it is no tool."""
    import subprocess  # (start-up: 1.5 ms, only for a tool not yet described)
    name = os.path.basename(path)
    try:
        proc = subprocess.run(command(path) + ["--describe"], capture_output=True,
                              timeout=DESCRIBE_TIMEOUT, stdin=subprocess.DEVNULL,
                              env=environment(None, None))
    except (OSError, subprocess.TimeoutExpired) as e:
        warnings.append(f"tool {name}: --describe failed: {e}")
        return None
    try:
        described = jsonin.loads(proc.stdout.decode("utf-8", "replace"))
    except jsonin.JSONError as e:
        described = e
    if proc.returncode != 0 or not isinstance(described, dict) or \
            not isinstance(described.get("description"), str) or \
            not isinstance(described.get("parameters"), dict) or \
            described["parameters"].get("type") != "object":
        warnings.append(f"tool {name}: --describe must print {{\"description\": TEXT, "
                        "\"parameters\": a JSON Schema of type object}: skipped")
        return None
    timeout = described.get("timeout")
    if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(
            timeout, bool) or not 0 < timeout <= 86400):
        described.pop("timeout")
    return described
