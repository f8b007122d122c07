"""Run agent-merge with a kill -9 at its Nth step on the file system, for the crash
tests.

    python merge_crash.py N [agent-merge arguments...]

A step is a call that changes a file or a directory (made, written, copied, renamed,
removed, its owner, mode or times set): the process kills itself with SIGKILL just
before the Nth (no cleanup, exactly as `kill -9` from outside); where the merge works
in a child process (a parent's layer, mounted), the child counts on from the parent's
count and kills itself. When the merge never reaches that step it ends normally with
agent-merge's own exit status. Nothing in the product knows about this."""

import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

AT = int(sys.argv[1])
steps = 0


def counted(module, name):
    real = getattr(module, name)

    def step(*args, **kwargs):
        global steps
        steps += 1
        if steps == AT:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    setattr(module, name, step)


for name in ("mkdir", "replace", "rename", "unlink", "rmdir", "symlink", "chmod", "lchown",
             "utime", "fsync"):
    counted(os, name)
for name in ("copyfile", "rmtree"):
    counted(shutil, name)


if __name__ == "__main__":
    from agentctl.cli.merge import main
    sys.exit(main(sys.argv[2:]))
