"""What the bin/ launchers call, so a checkout works with PATH=$PWD/bin:$PATH.

A checkout's own virtual environment (made by `make`) holds the
dependencies: when it exists and this is another Python, run under it."""

import os
import sys
from importlib import import_module


def launch(program):
    if os.environ.get("AGENTCTL_SOCKET"):   # in a sandbox: the program runs as its agent
        from agentctl.tools.forward import forward  # (start-up: 1.5 ms, only in a sandbox)
        return forward(program)
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    venv = os.path.join(top, ".venv")
    if os.path.isdir(venv) and os.path.realpath(sys.prefix) != os.path.realpath(venv):
        python = os.path.join(venv, "bin", "python3")
        try:
            os.execv(python, [python, sys.argv[0]] + sys.argv[1:])
        except OSError as e:    # a .venv left half made, or moved: say so, in one line
            sys.stderr.write(f"agent-{program}: the checkout's .venv is broken ({python}: "
                             f"{e.strerror}): run make in {top}\n")
            return 70
    try:
        main = import_module(f"agentctl.cli.{program}").main
    except ModuleNotFoundError as e:
        if e.name != "click":
            raise
        sys.stderr.write(f"agent-{program}: click is not installed (run `make` in {top})\n")
        return 70
    return main()
