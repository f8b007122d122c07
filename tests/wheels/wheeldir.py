"""Where tests/wheels/install.py puts the wheels of the official MCP SDK and of its
whole dependency tree, pinned to the versions this Python has installed (the project's
.venv), and where the tests look (tests/registries.py serves them as a Python package
index on 127.0.0.1): $AGENTCTL_TEST_WHEELS, else a directory of the user's cache named
by the hash of the pins and of the interpreter (new pins, a new directory)."""

import hashlib
import os
import sys


def pins(top="mcp"):
    """`top` and every package it needs, transitively, as `name==version` of what this
    Python has installed: its requirements' markers evaluated for this interpreter,
    with the extras asked for (pyjwt[crypto]). A package needed but not installed
    raises LookupError."""
    from importlib import metadata
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    found, seen, todo = {}, set(), [(top, frozenset())]
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        if (key, extras) in seen:
            continue
        seen.add((key, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise LookupError(f"{name} is needed but not installed") from None
        found[key] = dist.version
        for line in dist.requires or ():
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e})
                                         for e in sorted(extras) or [""]):
                todo.append((req.name, frozenset(req.extras)))
    return [f"{name}=={version}" for name, version in sorted(found.items())]


def tag():
    """The interpreter the wheels are for: its implementation, version and machine."""
    import platform
    return f"{sys.implementation.cache_tag}-{platform.machine()}"


def where(environ=os.environ, pinned=None):
    given = environ.get("AGENTCTL_TEST_WHEELS")
    if given:
        return given
    text = "\n".join([tag(), *(pins() if pinned is None else pinned)]) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "agentctl-tests", f"wheels-{digest}")
