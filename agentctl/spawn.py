"""agentctl's own code in a process of its own: agent-run --all's runs, the programs the
proxy runs for a sandboxed tool and its forwarders, the sandbox's launcher, and the
tools written in Python. Each runs under the Python agentctl runs on (its dependencies
are there) and imports agentctl from where this process did (TOP), whatever the current
directory or $PYTHONPATH hold."""

import os
import sys

from agentctl.paths import PACKAGE

PYTHON = sys.executable
TOP = os.path.dirname(PACKAGE)      # the directory agentctl is imported from


def python(code, *, site=True):
    """argv that runs `code` (with `sys` imported) under agentctl's Python, agentctl first
    on its import path and the current directory never on it (-P: an agentctl/ folder
    there would be run instead). Without `site` nor site-packages (-S): a process that
    needs only the standard library starts sooner."""
    return [PYTHON, *(() if site else ("-S",)), "-P", "-c",
            f"import sys; sys.path.insert(0, {TOP!r}); {code}"]


def program(name, *args):
    """argv that runs the program agent-`name` (agentctl/cli/NAME.py) with `args`: its
    main()'s return is the process's exit status."""
    return python(f"from agentctl.cli.{name} import main; sys.exit(main())") + list(args)


def import_path(environ):
    """$PYTHONPATH for a script run under agentctl's Python that imports agentctl (a
    tool): TOP first, then what `environ` has."""
    return os.pathsep.join(p for p in (TOP, environ.get("PYTHONPATH")) if p)
