"""Copy-on-write workspaces (agentctl(7), WORKSPACES): an agent given --cwd works in a
layer of its own over it, mounted where each of its calls' bwrap starts (a real
overlay, real bwrap, the shipped tools); a fork freezes the parent's layer and stacks
parent and child on it; the real directory is never written; what a stack shows and
what an agent changed are read from the layers (workspace/view.py)."""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from agentctl.store import layers as rows
from agentctl.store.db import connect
from agentctl.workspace import layers, view

from .conftest import agent, fork, needs, row, shell, tool_results, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def world(tmp_path, monkeypatch):
    needs("bwrap", "bubblewrap")
    monkeypatch.setenv("AGENTCTL_TOOLS", os.path.join(ROOT, "agentctl", "toolbox"))
    monkeypatch.setenv("AGENTCTL_MCP", str(tmp_path / "no-mcp.json"))
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "shared.txt").write_text("base\n")
    (repo / "gone.txt").write_text("to delete\n")
    (repo / "old.txt").write_text("to rename\n")
    (repo / "tree" / "inner").mkdir(parents=True)
    (repo / "tree" / "inner" / "leaf.txt").write_text("leaf\n")
    (repo / "script.sh").write_text("#!/bin/sh\n")
    if os.geteuid() == 0:       # (as root, tools run as nobody: the directory is theirs)
        for path in [repo, *repo.rglob("*")]:
            os.chown(path, 65534, 65534)
    return repo


def turn(tmp_path, name, *commands):
    """A turn of agent `name` that runs each shell command with the shipped `run` tool,
    one call after another: their results."""
    given(tmp_path, name, *commands)
    before = len(results(name))
    ran = shell(f"agent-run {name}")
    assert ran.code == 0, ran.err
    return results(name)[before:]


def results(name):
    conn = connect(os.environ["AGENTCTL_DB"])
    try:
        return tool_results(conn, name)
    finally:
        conn.close()


def waiting(pid):
    """Whether process `pid` waits for a lock (flock(2), as /proc/locks lists it)."""
    with open("/proc/locks") as locks:
        return any("->" in line and line.split()[5] == str(pid) for line in locks)


def given(tmp_path, name, *commands):
    """Agent `name` given its next turn's input: a call of `run` for each command."""
    steps = [{"content": "", "tool_calls": [{"name": "run", "arguments": {"command": c}}]}
             for c in commands] + [{"content": "done"}]
    model = tmp_path / f"{name}.jsonl"
    model.write_text(json.dumps({"steps": steps}) + "\n")
    assert agent("set", name, f"model=scripted:{model}").code == 0
    assert agent("send", name, "go").code == 0


def lead(world, *more):
    return fork("-n", "lead", "-r", "lead", "--allow", "run", "--allow", "*_file",
                "--cwd", str(world), *more)


def test_two_workers_forked_from_a_lead_never_see_each_others_writes(world, tmp_path, conn):
    lead(world)
    turn(tmp_path, "lead", "echo lead > shared.txt")
    fork("-p", "lead", "-n", "w1", "--allow", "run")
    fork("-p", "lead", "-n", "w2", "--allow", "run")
    one, = turn(tmp_path, "w1", "cat shared.txt; echo one > shared.txt; echo one > w1.txt")
    two, = turn(tmp_path, "w2", "cat shared.txt; echo two > shared.txt; cat w1.txt")
    assert one.startswith("lead\n") and two.startswith("lead\n"), (one, two)
    assert "No such file" in two
    again, = turn(tmp_path, "w1", "cat shared.txt")
    mine, = turn(tmp_path, "lead", "cat shared.txt; ls")
    assert again.startswith("one\n") and mine.startswith("lead\n") and "w1.txt" not in mine
    assert (world / "shared.txt").read_text() == "base\n" and not (world / "w1.txt").exists()
    # each one's changes are its own: against the lead's frozen layer, at the fork
    for name, expected in (("w1", [("shared.txt", "written", None),
                                   ("w1.txt", "added", None)]),
                           ("w2", [("shared.txt", "written", None)])):
        own = [layers.upper(r["id"]) for r in layers.since_fork(conn, row(conn, name)["id"])]
        stack = layers.stack(conn, row(conn, name))
        below = view.directories(stack[len(own):])
        assert view.changes(own, below) == expected
        shown = view.locate(view.directories(stack), "shared.txt")
        assert open(shown).read() == {"w1": "one\n", "w2": "two\n"}[name]
    # the lead's stack: its own new layer on the frozen one
    stack = layers.stack(conn, row(conn, "lead"))
    assert [r["frozen_at"] is None for r in stack] == [True, False]
    assert view.locate(view.directories(stack), "shared.txt").startswith(
        layers.upper(stack[1]["id"]))


def test_what_a_layer_holds_is_seen_by_the_next_call_and_read_back(world, tmp_path, conn):
    blob = os.urandom(1 << 20) * 20
    (tmp_path / "blob").write_bytes(blob)
    os.chmod(tmp_path / "blob", 0o644)
    lead(world, "--ro", str(tmp_path / "blob"))
    turn(tmp_path, "lead",
         "rm gone.txt && mv old.txt new.txt && mv tree forest && ln -s new.txt link "
         f"&& chmod 755 script.sh && cp {tmp_path}/blob big.bin && mkdir made "
         "&& echo made > made/file && echo changed")
    seen, = turn(tmp_path, "lead", "ls -l; cat link forest/inner/leaf.txt; "
                                   "sha256sum big.bin; stat -c %a script.sh")
    assert "gone.txt" not in seen and "old.txt" not in seen and " tree" not in seen
    assert "link -> new.txt" in seen and "to rename\nleaf\n" in seen
    assert hashlib.sha256(blob).hexdigest() in seen and "\n755\n" in seen
    assert sorted(os.listdir(world)) == [".git", "gone.txt", "old.txt", "script.sh",
                                        "shared.txt", "tree"]
    stack = layers.stack(conn, row(conn, "lead"))
    dirs = view.directories(stack)
    assert view.locate(dirs, "gone.txt") is None
    assert open(view.locate(dirs, "forest/inner/leaf.txt")).read() == "leaf\n"
    assert open(view.locate(dirs, "big.bin"), "rb").read() == blob
    assert os.readlink(view.locate(dirs, "link")) == "new.txt"
    assert view.listing(dirs) == [".git", "big.bin", "forest", "link", "made", "new.txt",
                                  "script.sh", "shared.txt"]
    changed = view.changes(dirs[:1], dirs[1:])
    assert {(p, k) for p, k, _ in changed} >= {
        ("gone.txt", "deleted"), ("old.txt", "deleted"), ("new.txt", "added"),
        ("tree", "deleted"), ("link", "added"), ("script.sh", "written"),
        ("big.bin", "added"), ("made", "added"), ("made/file", "added")}
    forest = next(c for c in changed if c[0] == "forest")
    assert forest[1:] == ("renamed", "tree") or forest[1] == "added"   # (root: redirected)


def test_a_directory_renamed_with_rename_2_in_a_layer(world, tmp_path):
    """As root the overlay redirects directories (rename(2) works); unprivileged, the
    kernel says EXDEV and only a copy (mv) renames one (agent-fork(1))."""
    lead(world)
    said, = turn(tmp_path, "lead", "python3 -c \"import os; os.rename('tree', 'renamed')\" "
                                   "&& ls renamed/inner")
    if os.geteuid() == 0:
        assert said.startswith("leaf.txt\n"), said
    else:
        assert "Invalid cross-device link" in said


def test_a_file_replaced_by_a_directory_and_back(world, tmp_path, conn):
    lead(world)
    said, = turn(tmp_path, "lead", "rm shared.txt && mkdir shared.txt && echo in > shared.txt/f "
                                   "&& rm -r tree && echo flat > tree && cat tree shared.txt/f")
    assert said.startswith("flat\nin\n"), said
    stack = layers.stack(conn, row(conn, "lead"))
    dirs = view.directories(stack)
    changed = dict((p, k) for p, k, _ in view.changes(dirs[:1], dirs[1:]))
    assert changed["tree"] == "written" and changed["shared.txt/f"] == "added"
    assert view.listing(dirs, "shared.txt") == ["f"] and view.locate(dirs, "tree/inner") is None


def test_the_data_directory_and_the_layers_are_hidden_from_tools(world, tmp_path, conn):
    """Even a working directory that holds agentctl's data directory (and so the layers
    of its own stack) shows no layer to its tools."""
    fork("-n", "top", "--allow", "run", "--cwd", str(tmp_path))
    turn(tmp_path, "top", "echo x > mine")
    data = tmp_path / "xdg" / "agentctl"
    said, = turn(tmp_path, "top", f"ls -A {data} | wc -l; ls {data}/l 2>&1; cat mine")
    assert said.startswith("0\n") and "cannot access" in said and "\nx\n" in said, said
    assert os.listdir(data / "l")


def test_what_no_tool_may_touch_stays_protected_in_a_layer(world, tmp_path, home):
    """The read-only set and the database are covered in a layer as in the real
    directory; the file tools refuse the database inside a layer too."""
    (world / ".git" / "hooks").mkdir(exist_ok=True)
    lead(world)
    said, = turn(tmp_path, "lead", "echo x >> .git/config && echo wrote config; "
                                   "echo x > .git/hooks/pre-commit && echo wrote hook; "
                                   "echo {} > .mcp.json && echo wrote mcp; echo ok")
    assert "wrote" not in said and "ok\n" in said, said
    if str(home).startswith("postgresql://"):
        return          # (a PostgreSQL database is no file)
    fork("-n", "near", "--allow", "write_file", "--cwd", str(tmp_path))
    model = tmp_path / "near.jsonl"
    model.write_text(json.dumps({"steps": [{"content": "", "tool_calls": [
        {"name": "write_file", "arguments": {"path": "agents.db", "content": "x"}}]},
        {"content": "done"}]}) + "\n")
    agent("set", "near", f"model=scripted:{model}")
    agent("send", "near", "go")
    assert shell("agent-run near").code == 0
    assert "not for tools" in results("near")[0]


def test_a_layer_that_cant_be_mounted_fails_the_call_in_one_line(world, tmp_path, conn):
    lead(world)
    own = rows.own(conn, row(conn, "lead")["id"])
    top = layers.top(own["id"])
    os.makedirs(os.path.join(top, "u"))
    os.symlink("u", os.path.join(top, "w"))     # (its work directory inside its upper one)
    said, = turn(tmp_path, "lead", "echo ran > ran.txt")
    assert said.startswith("error:") and "workspace" in said and "ran" not in said.split(
        "workspace")[0], said
    assert not (world / "ran.txt").exists()


def test_a_directory_whose_name_the_overlay_cant_hold_is_said_not_written(world, tmp_path):
    """A comma in the working directory's path (the overlay's options can't name it):
    the call fails with one line that names --shared, and writes nothing."""
    odd = world.parent / "re,po"
    world.rename(odd)
    fork("-n", "odd", "--allow", "run", "--cwd", str(odd))
    said, = turn(tmp_path, "odd", "echo ran > ran.txt")
    assert said.startswith("error:") and "comma" in said and "--shared" in said, said
    assert not (odd / "ran.txt").exists()


def test_a_fork_walks_no_file(world, tmp_path, conn, monkeypatch):
    """However many files the parent's layer holds, a fork reads one directory's first
    entry (whether the layer is empty) and no more."""
    lead(world)
    turn(tmp_path, "lead", "mkdir many && cd many && seq 2000 | xargs touch")
    looked = []
    for name in ("walk", "listdir", "scandir"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda *a, real=real, name=name, **k: (
            looked.append(name), real(*a, **k))[1])
    fork("-p", "lead", "-n", "kid")
    fork("-p", "lead", "-n", "kid2")
    assert looked.count("scandir") <= 2 and "walk" not in looked and "listdir" not in looked
    stack = layers.stack(conn, row(conn, "kid2"))
    assert len(stack) == 2 and stack[1]["agent_id"] == row(conn, "lead")["id"]
    assert layers.stack(conn, row(conn, "kid"))[1]["id"] == stack[1]["id"]


def test_an_empty_layer_is_reused_not_stacked(world, tmp_path, conn):
    lead(world)
    own = rows.own(conn, row(conn, "lead")["id"])
    fork("-p", "lead", "-n", "kid")
    assert rows.own(conn, row(conn, "lead")["id"])["id"] == own["id"]
    assert [r["id"] for r in layers.stack(conn, row(conn, "kid"))][1:] == []


def test_a_fork_mid_call_takes_effect_when_the_call_ends(world, tmp_path, conn):
    """The parent's call in flight holds its layer: the child's first call waits for it
    and sees the layer as the call left it."""
    signal = tmp_path / "signal"
    signal.mkdir()
    lead(world, "--ro", str(signal))
    turn(tmp_path, "lead", "echo first > a.txt")
    model = tmp_path / "lead.jsonl"
    model.write_text(json.dumps({"steps": [{"content": "", "tool_calls": [{
        "name": "run", "arguments": {"command": f"echo before > b.txt; while [ ! -e {signal}/go ];"
                                                " do sleep 0.05; done; echo after > b.txt"}}]},
        {"content": "done"}]}) + "\n")
    agent("send", "lead", "again")
    running = subprocess.Popen([os.path.join(ROOT, "bin", "agent-run"), "lead"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    kid = None
    try:
        own = rows.own(conn, row(conn, "lead")["id"])
        wait_until(lambda: os.path.exists(os.path.join(layers.upper(own["id"]), "b.txt")),
                   "the lead's call, writing its layer")
        fork("-p", "lead", "-n", "kid", "--allow", "run")
        model = tmp_path / "kid.jsonl"
        model.write_text(json.dumps({"steps": [{"content": "", "tool_calls": [{
            "name": "run", "arguments": {"command": "cat a.txt b.txt"}}]},
            {"content": "done"}]}) + "\n")
        agent("set", "kid", f"model=scripted:{model}")
        agent("send", "kid", "go")
        kid = subprocess.Popen([os.path.join(ROOT, "bin", "agent-run"), "kid"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_until(lambda: waiting(kid.pid) or kid.poll() is not None,
                   "the kid's call waiting for the lead's")
        assert results("kid") == []
        (signal / "go").touch()
        assert kid.wait(60) == 0, kid.stderr.read()
    finally:
        (signal / "go").touch()
        running.wait(60)
        if kid is not None:
            kid.wait(60)
    assert results("kid")[0].startswith("first\nafter\n"), results("kid")


def test_shared_writes_the_directory_itself_and_is_implied_without_cwd(world, tmp_path,
                                                                       monkeypatch, conn):
    fork("-n", "direct", "--allow", "run", "--cwd", str(world), "--shared")
    turn(tmp_path, "direct", "echo direct > direct.txt")
    assert (world / "direct.txt").read_text() == "direct\n"
    assert layers.stack(conn, row(conn, "direct")) is None
    monkeypatch.chdir(world)
    fork("-n", "here")
    assert row(conn, "here")["shared"] == 1 and rows.own(conn, row(conn, "here")["id"]) is None


def test_agent_set_gives_a_layer_where_it_changes_the_directory_or_shared(world, tmp_path, conn):
    fork("-n", "a", "--allow", "run", "--cwd", str(world), "--shared")
    assert agent("set", "a", "shared=no").code == 0
    first = rows.own(conn, row(conn, "a")["id"])
    assert first is not None and first["base"] == str(world)
    turn(tmp_path, "a", "echo mine > mine.txt")
    assert agent("set", "a", f"cwd={world / 'tree'}").code == 0    # (inside: the same layer)
    assert rows.own(conn, row(conn, "a")["id"])["id"] == first["id"]
    other = tmp_path / "other"
    other.mkdir()
    os.chmod(other, 0o777)
    assert agent("set", "a", f"cwd={other}").code == 0            # (elsewhere: a stack of its own)
    now = layers.stack(conn, row(conn, "a"))
    assert [r["base"] for r in now] == [str(other)]
    assert rows.get(conn, first["id"])["frozen_at"] is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="root makes an unprivileged user here")
def test_unprivileged_a_layer_maps_the_user_alone(world, tmp_path):
    """Unprivileged (here: uid 1000 of a user namespace of the test's, as `unshare -U`
    makes one), the layer's namespace maps the operator's user alone, as itself, and
    keeps its records in user attributes: a directory from below can't be renamed by
    rename(2) (EXDEV; mv copies), a file of another user can't be changed (EOVERFLOW),
    and the real directory is untouched (agent-fork(1), Workspaces)."""
    needs("unshare", "util-linux")
    for path in [world, *world.rglob("*")]:
        os.chown(path, 0, 0)    # (root's: the operator's, uid 1000 in that namespace)
    (world / "theirs").write_text("theirs\n")
    os.chown(world / "theirs", 12345, 12345)
    os.chmod(world / "theirs", 0o666)
    steps = [{"content": "", "tool_calls": [{"name": "run", "arguments": {"command":
             "id -u; echo mine > mine.txt; python3 -c \"import os; os.rename('tree', 'moved')\"; "
             "mv tree copied && ls copied; echo more >> theirs; cat theirs mine.txt"}}]},
             {"content": "done"}]
    model = tmp_path / "u.jsonl"
    model.write_text(json.dumps({"steps": steps}) + "\n")
    run = tempfile.mkdtemp(prefix="agentctl-test-")    # (short: a socket's path is)
    try:
        ran = shell(f"XDG_RUNTIME_DIR={run} unshare --user --map-user=1000 --map-group=1000 "
                    f"sh -c 'agent-fork -n u --allow run --cwd {world} -m scripted:{model} go "
                    ">/dev/null && agent-run u'")
    finally:
        shutil.rmtree(run)
    assert ran.code == 0, ran.err
    said, = results("u")
    assert said.startswith("1000\n") and "Invalid cross-device link" in said, said
    assert "inner\n" in said and "Value too large for defined data type" in said
    assert "theirs\nmine\n" in said
    assert sorted(os.listdir(world)) == [".git", "gone.txt", "old.txt", "script.sh",
                                        "shared.txt", "theirs", "tree"]


def test_list_tools_says_loudly_where_no_layer_can_be_mounted(world, monkeypatch):
    from agentctl.workspace import mount
    assert mount.problem() is None          # (this machine's kernel mounts one)
    lead(world)
    assert "layer" not in agent("run", "--list-tools", "lead").err
    monkeypatch.setattr(mount, "_kind", lambda: "no_such_option")    # (as a kernel refuses)
    said = agent("run", "--list-tools", "lead").err
    assert "a layer can't be mounted here (overlayfs: Invalid argument)" in said, said
    assert "--shared" in said and said.count("\n") == 1
