"""The wheels of the official MCP SDK and of its whole dependency tree, at the versions
this Python (the project's .venv) has installed, got once per machine with pip into the
cache (tests/wheels/wheeldir.py says where), where the tests find them:
tests/registries.py serves them as a Python package index on 127.0.0.1 for uvx. The
index is asked once, never by a test. Without the SDK, or offline, it says so and the
tests that need the wheels are skipped, loudly. Run by make test:
    .venv/bin/python tests/wheels/install.py"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wheeldir import pins, where  # noqa: E402

ME = "tests/wheels/install.py"
SKIPPED = "the tests of MCP servers started by uvx will be SKIPPED"


def main():
    try:
        pinned = pins()
    except (ImportError, LookupError) as e:     # (no packaging, no mcp: not the .venv's Python)
        print(f"{ME}: {e} (make venv installs it): {SKIPPED}", file=sys.stderr)
        return 0
    directory = where(pinned=pinned)
    if os.path.exists(os.path.join(directory, ".installed")):
        return 0
    partial = directory + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    # pip wheel: the index's wheel where there is one, else one built from the sdist
    got = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                          "--disable-pip-version-check", "--wheel-dir", partial, *pinned],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if got.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        last = (got.stderr.strip().splitlines() or ["pip failed"])[-1]
        print(f"{ME}: pip wheel failed: {last}: {SKIPPED}", file=sys.stderr)
        return 0
    with open(os.path.join(partial, "pins.txt"), "w") as f:
        f.write("".join(p + "\n" for p in pinned))
    open(os.path.join(partial, ".installed"), "w").close()
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(partial, directory)
    print(f"{ME}: the wheels of the MCP SDK are in {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
