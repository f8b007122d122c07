"""Where tests/npm/install.sh puts the MCP reference servers, and where the tests look:
$AGENTCTL_TEST_NPM, else a directory of the user's cache named by the lock's hash (a
new lock, a new directory)."""

import hashlib
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def where(environ=os.environ):
    given = environ.get("AGENTCTL_TEST_NPM")
    if given:
        return given
    with open(os.path.join(HERE, "package-lock.json"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "agentctl-tests", f"npm-{digest}")
