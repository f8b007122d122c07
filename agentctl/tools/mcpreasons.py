"""Why an MCP server failed, in words an operator can act on (agent-run(1), MCP
servers): what the SDK or its transport raised made one reason, and the lines of a
server's standard error worth showing."""

import os
import re

from agentctl.text import cut

STDERR_LINES = 3
EXITED_EARLY = "it exited (or closed its standard output) before it answered"


def _leaves(error):
    """The innermost exceptions of an exception group."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


def reason(error, entry):
    """Why, in a few words, from what the SDK or the transport raised."""
    for leaf in _leaves(error):
        name = type(leaf).__name__
        text = str(leaf).strip()
        status = getattr(getattr(leaf, "response", None), "status_code", None)
        if status in (401, 403):
            asks = getattr(leaf.response, "headers", {}).get("www-authenticate", "")
            if _token(entry):
                return (f"the server refused the token (HTTP {status}): is it wrong, "
                        "expired or revoked?")
            if "resource_metadata" in asks:
                return ("it asks for an OAuth login, which agentctl does not do: give it a "
                        'token in "headers" ("Authorization": "Bearer ${TOKEN}")'
                        f" ({cut(asks, 80)})")
            return (f"it wants a token (HTTP {status}): give it one in \"headers\" "
                    '("Authorization": "Bearer ${TOKEN}")')
        if status is not None:
            return f"HTTP {status} from {entry.spec.get('url')}"
        if name in ("ConnectError", "ConnectTimeout", "ConnectionRefusedError",
                    "NewConnectionError", "ConnectTimeoutError", "NameResolutionError"):
            return f"can't connect to {entry.spec.get('url')}: {text or name}"
        if name == "FileNotFoundError" and entry.transport == "stdio":
            return f"no such program: {entry.spec['command']}"
        if name in ("CancelledError",):
            continue
        if name in ("TimeoutError", "Ended") and text:
            return text
        if "Connection closed" in text and entry.transport == "stdio":
            return EXITED_EARLY
        return f"{name}: {text}" if text else name
    return type(error).__name__


def _token(entry):
    """Whether the entry gives the server a token (an Authorization header)."""
    return any(k.lower() == "authorization" for k in (entry.spec.get("headers") or {}))


# Lines of a crash that say nothing by themselves: stack frames (Node's, Java's,
# Python's), a source line's caret, braces and brackets alone, Node's own location,
# `throw err;`, the properties of its error object and its version line.
NOISE = re.compile(r"\s+at \S|\s*File \"|\s*\^+\s*$|[\s\[\]{}(),;]*$|node:internal/"
                   r"|\s*throw \w+;\s*$|\s+(code|requireStack|errno|syscall|path): "
                   r"|Node\.js v\d|Traceback \(most recent call last\):"
                   r'|\{ "(child-pid|exit-code)": ')      # (the sandbox's status lines)
EXITED = re.compile(r'\{ "exit-code": (\d+) \}')   # bwrap's, at the server's end
FRAME = re.compile(r'\s*File "')      # a Python frame: its source line follows
SAID = "agentctl: "         # a line agentctl's sandbox wrote (a refused host): kept


def exit_status(log):
    """The exit status the sandbox wrote at the end of a server's stderr, or None."""
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            found = EXITED.findall(f.read()[-16384:])
    except OSError:
        return None
    return int(found[-1]) if found else None


def tail(log):
    """The last lines worth showing of a server's standard error: the crash's noise
    left out, a line agentctl's sandbox wrote there kept."""
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()[-16384:]
    except OSError:
        return []
    lines, after = [], ""
    for line in text.splitlines():
        if line.strip() and not NOISE.match(line) and not FRAME.match(after):
            lines.append(line.rstrip())
        after = line
    shown = lines[-STDERR_LINES:]
    ours = [line for line in lines[:-STDERR_LINES] if line.startswith(SAID)][-1:]
    return [cut(line, 200) for line in ours + shown]


MISSING = re.compile(r"no such file|not found|cannot find|can't open|enoent|not exist",
                     re.IGNORECASE)
QUOTED = re.compile(r"['\"`](/[^'\"`]+)['\"`]")
PATH = re.compile(r"(?<![\w.~-])(/[^\s'\"`:,;()\[\]<>]+)")


def hidden(lines, exists=os.path.lexists):
    """A path the server found missing that exists outside its sandbox, in the
    directory that would show it ("ro"), or None: the first one named by a line that
    says something is missing (a quoted one first)."""
    for line in lines:
        if not MISSING.search(line):
            continue
        quoted = QUOTED.findall(line)      # what is missing is most often quoted
        for path in quoted + [p for p in PATH.findall(line) if p not in quoted]:
            path = path.rstrip(".")
            if exists(path):
                return path if os.path.isdir(path) else os.path.dirname(path)
    return None
