"""Where tests/npm/install.sh puts the MCP reference servers and npm's cache of their
tarballs (npm-cache/, which tests/registries.py serves as an npm registry), and where
the tests look: $AGENTCTL_TEST_NPM, else a directory of the user's cache named by the
lock's hash and the layout's (a new lock or a new layout, a new directory: a machine's
older one is never changed under a test that uses it)."""

import hashlib
import os

HERE = os.path.dirname(os.path.abspath(__file__))
LAYOUT = b"node_modules and npm-cache\n"


def where(environ=os.environ):
    given = environ.get("AGENTCTL_TEST_NPM")
    if given:
        return given
    with open(os.path.join(HERE, "package-lock.json"), "rb") as f:
        digest = hashlib.sha256(LAYOUT + f.read()).hexdigest()[:16]
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "agentctl-tests", f"npm-{digest}")


def cached(directory, integrity):
    """Where npm's cache in `directory` (npm ci --cache) keeps the content whose
    integrity is `integrity` ("sha512-BASE64", as the lock gives it)."""
    import base64
    algorithm, _, digest = integrity.partition("-")
    hexdigest = base64.b64decode(digest).hex()
    return os.path.join(directory, "npm-cache", "_cacache", "content-v2", algorithm,
                        hexdigest[:2], hexdigest[2:4], hexdigest[4:])
