"""The suite's compiled Python kept in a cache of its own when the environment forbids
writing bytecode (PYTHONDONTWRITEBYTECODE, which some shells and CI images set).

Without it, each of the thousands of processes the suite starts (the programs, agent-run
--all's runs, pytest's workers) compiles every agentctl module it imports from its
source again: 0.1 s of CPU more for each program (0.19 s against 0.08 s to import
agent-run's modules), twice the CPU of a test that starts 200 of them; and each worker
rewrites the assertions of every test module again. The variable's point, a checkout
with no __pycache__ in it, is kept: the bytecode goes to a directory of the user's cache
(PYTHONPYCACHEPREFIX, a given one kept), for this process and every one it starts."""

import os
import sys


def cached():
    """Write and read bytecode under the cache's prefix, if bytecode is forbidden; the
    prefix, or None when nothing was changed."""
    if not sys.dont_write_bytecode:
        return None
    prefix = os.environ.get("PYTHONPYCACHEPREFIX") or sys.pycache_prefix or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "agentctl-tests", "pycache")
    try:
        os.makedirs(prefix, exist_ok=True)
    except OSError:             # (a cache that can't be made: the bytecode stays unwritten)
        return None
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False
    return prefix
