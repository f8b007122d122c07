"""agent-merge killed (kill -9) at every step it takes on the file system, into the
real directory and into a parent's layer: no file is ever torn, and once the next
agentctl program has run the target is as it was or wholly merged (agent-merge(1),
Atomicity)."""

import os
import shutil
import subprocess
import sys

from agentctl import paths
from agentctl.workspace import layers, view

from .conftest import ROOT, agent, fork, row
from .test_workspace import lead, turn, world  # noqa: F401 (world: a fixture)
from .test_workspace_diff import tree

WRAPPER = os.path.join(ROOT, "tests", "merge_crash.py")
CHANGES = ("echo more >> shared.txt && rm gone.txt && mv tree forest && head -c 300000 "
           "/dev/zero | tr '\\0' x > big.txt && mkdir made && echo in > made/f && echo ok")


def crashed(n, name):
    return subprocess.run([sys.executable, WRAPPER, str(n), name], cwd=ROOT,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=120)


def viewed(dirs, top=""):
    """What a stack shows, as tree() lists a directory (a layer never written has no
    directory yet: view reads it as empty)."""
    found = {}
    for name in view.listing(dirs, top):
        path = f"{top}/{name}" if top else name
        if path == ".git":
            continue
        at = view.locate(dirs, path)
        if os.path.islink(at):
            found[path] = ("link", os.readlink(at))
        elif os.path.isdir(at):
            found[path] = ("dir",)
            found.update(viewed(dirs, path))
        else:
            found[path] = (os.lstat(at).st_mode & 0o100, open(at, "rb").read())
    return found


def whole(seen, before, after):
    """No file torn: each is as it was before, or as the merge makes it (but the spare
    a file is written to beside its place, which the next program removes)."""
    for path, what in seen.items():
        if os.path.basename(path).startswith(".agentctl-merge-"):
            continue
        assert what in (before.get(path), after.get(path)), path


def empty(directory):
    for name in os.listdir(directory):
        at = os.path.join(directory, name)
        shutil.rmtree(at) if os.path.isdir(at) and not os.path.islink(at) else os.unlink(at)


def every_step(reset, seen, before, after, name):
    """The merge of `name` killed at its 1st, 2nd ... step until it ends by itself."""
    outcomes, n = set(), 0
    while True:
        n += 1
        reset()
        done = crashed(n, name)
        if done.returncode != -9 and "killed by signal 9" not in done.stderr:
            assert done.returncode == 0, done.stderr
            assert seen() == after
            return n, outcomes
        whole(seen(), before, after)
        assert agent("ps").code == 0            # (the next program: finishes, or throws away)
        now = seen()
        assert now in (before, after), n
        outcomes.add("merged" if now == after else "as it was")
        assert not os.path.exists(paths.merges())


def test_into_the_real_directory(world, tmp_path):
    lead(world)
    turn(tmp_path, "lead", CHANGES)
    pristine = tmp_path / "pristine"
    shutil.copytree(world, pristine, symlinks=True)
    before = tree(world)

    def reset():
        empty(world)
        shutil.copytree(pristine, world, symlinks=True, dirs_exist_ok=True)
    assert agent("merge", "lead").code == 0
    after = tree(world)
    assert after != before and after["big.txt"][1] == b"x" * 300000
    steps, outcomes = every_step(reset, lambda: tree(world), before, after, "lead")
    assert steps > 20 and outcomes == {"merged", "as it was"}, (steps, outcomes)


def test_into_a_parents_layer(world, tmp_path, conn):
    lead(world)
    fork("-p", "lead", "-n", "kid", "--allow", "run")
    turn(tmp_path, "kid", "echo first")         # (the kid's layer, and the lead's, made)
    stack = layers.stack(conn, row(conn, "lead"))
    dirs = view.directories(stack)
    turn(tmp_path, "kid", CHANGES)
    before = viewed(dirs)
    assert agent("merge", "kid").code == 0
    after = viewed(dirs)
    assert after != before and after["made/f"] == (0, b"in\n")

    def reset():
        empty(layers.upper(stack[0]["id"]))
    steps, outcomes = every_step(reset, lambda: viewed(dirs), before, after, "kid")
    assert steps > 20 and outcomes == {"merged", "as it was"}, (steps, outcomes)
