"""agent-merge (agent-merge(1)): a child's changes applied to its parent's layer (its
stack mounted in a namespace of the merge's own) or, for a child of init, to the real
directory; conflicts stop it whole; the authority rule; the .git rule. Real overlay,
real turns, a real git repository."""

import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import subprocess
import sys

import pytest

from agentctl import paths
from agentctl.workspace import layers, view

from .conftest import ROOT, agent, fork, needs, row, shell, tool_results, wait_until
from .test_workspace import given, lead, turn, world  # noqa: F401 (world: a fixture)
from .test_workspace_diff import tree


def shown(conn, name, path):
    """What agent `name`'s view shows at `path`: its bytes, or None."""
    found = view.locate(view.directories(layers.stack(conn, row(conn, name))), path)
    if found is None:
        return None
    return open(found, "rb").read() if os.path.isfile(found) else os.readlink(found) \
        if os.path.islink(found) else "dir"


def workers(world, tmp_path):
    lead(world)
    turn(tmp_path, "lead", "echo lead >> shared.txt")
    fork("-p", "lead", "-n", "w1", "--allow", "run")
    fork("-p", "lead", "-n", "w2", "--allow", "run")
    turn(tmp_path, "w1", "echo one >> shared.txt; echo one > w1.txt; rm gone.txt")
    turn(tmp_path, "w2", "echo two >> shared.txt; echo two > w2.txt")


def test_the_first_merges_the_second_conflicts_the_real_directory_waits(world, tmp_path,
                                                                        conn):
    workers(world, tmp_path)
    before = tree(world)
    assert agent("merge", "-n", "w1").out == "gone.txt\nshared.txt\nw1.txt\n"
    assert shown(conn, "lead", "w1.txt") is None
    one = agent("merge", "w1")
    assert one.code == 0, one.err
    assert one.out.splitlines() == ["gone.txt", "shared.txt", "w1.txt"]
    assert shown(conn, "lead", "shared.txt") == b"base\nlead\none\n"
    assert shown(conn, "lead", "gone.txt") is None and shown(conn, "lead", "w1.txt") == b"one\n"
    layer = layers.upper(layers.stack(conn, row(conn, "lead"))[0]["id"])
    held = sorted(os.listdir(layer))
    two = agent("merge", "w2")
    assert two.code == 3 and two.out == "shared.txt\n", two
    assert two.err.count("\n") == 1 and "nothing merged" in two.err
    assert sorted(os.listdir(layer)) == held and shown(conn, "lead", "w2.txt") is None
    assert tree(world) == before                    # (the real directory: untouched)
    assert agent("merge", "--only", "w2.txt", "w2").out == "w2.txt\n"
    assert agent("merge", "--ours", "w2").code == 0
    assert shown(conn, "lead", "shared.txt") == b"base\nlead\none\n"
    said = agent("why", "w2").out
    assert "its workspace holds 1 path not merged into lead's layer, 1 in conflict" in said
    shot = [line for line in agent("top").out.splitlines() if " w2 " in line]
    assert shot and shot[0].endswith("; 1 path to merge"), shot
    assert agent("merge", "--theirs", "w2").out == "shared.txt\n"
    assert "not merged" not in agent("why", "w2").out
    assert shown(conn, "lead", "shared.txt") == b"base\nlead\ntwo\n"
    assert tree(world) == before
    done = agent("merge", "lead")
    assert done.code == 0, done.err
    assert (world / "shared.txt").read_text() == "base\nlead\ntwo\n"
    assert not (world / "gone.txt").exists() and (world / "w1.txt").read_text() == "one\n"
    said = agent("log", "--kind", "merge").out
    assert "w1" in said and "merged into lead's layer by the operator: 3 paths" in said
    assert "merged into the real directory" in said


def test_every_kind_of_change_survives_a_merge(world, tmp_path, conn):
    blob = os.urandom(1 << 20) * 20
    (tmp_path / "blob").write_bytes(blob)
    os.chmod(tmp_path / "blob", 0o644)
    lead(world, "--ro", str(tmp_path / "blob"))
    fork("-p", "lead", "-n", "kid", "--allow", "run")
    turn(tmp_path, "kid",
         "rm gone.txt && mv tree forest && ln -s shared.txt link && chmod 755 script.sh "
         f"&& cp {tmp_path}/blob big.bin && rm old.txt && mkdir old.txt && mkdir empty "
         "&& echo in > old.txt/f && echo done")
    assert agent("merge", "kid").code == 0
    mine, = turn(tmp_path, "lead", "ls; readlink link; cat old.txt/f forest/inner/leaf.txt; "
                                   "stat -c %a script.sh; sha256sum big.bin")
    assert mine.split()[:12] == ["big.bin", "empty", "forest", "link", "old.txt",
                            "script.sh", "shared.txt", "shared.txt", "in", "leaf", "755",
                                 hashlib.sha256(blob).hexdigest()], mine
    assert agent("merge", "lead").code == 0
    seen = tree(world)
    assert seen["big.bin"][1] == blob and seen["link"] == ("link", "shared.txt")
    assert seen["script.sh"][0] and seen["old.txt/f"][1] == b"in\n" and seen["empty"] == ("dir",)
    assert seen["forest/inner/leaf.txt"][1] == b"leaf\n"
    assert not {"tree", "gone.txt", "tree/inner"} & set(seen)


def test_the_operators_own_edit_since_the_fork_is_a_conflict(world, tmp_path):
    lead(world)
    turn(tmp_path, "lead", "echo lead >> shared.txt; echo x > new.txt")
    (world / "shared.txt").write_text("the operator's\n")
    said = agent("merge", "lead")
    assert said.code == 3 and said.out == "shared.txt\n"
    assert not (world / "new.txt").exists()
    assert agent("merge", "--ours", "lead").out == "new.txt\n"
    assert (world / "shared.txt").read_text() == "the operator's\n"


def test_only_the_operator_or_the_parent_merges(world, tmp_path, monkeypatch):
    workers(world, tmp_path)
    monkeypatch.setenv("AGENT_ID", "w2")
    said = agent("merge", "w1")
    assert said.code == 3 and said.err.count("\n") == 1 and "its parent" in said.err
    monkeypatch.setenv("AGENT_ID", "w1")
    assert agent("merge", "w1").code == 3
    monkeypatch.setenv("AGENT_ID", "lead")
    assert agent("merge", "w1").code == 0


def test_git_s_rule(world, tmp_path, conn):
    """Both workers run git (its index rewritten in each layer): no conflict; a commit's
    objects are taken; the config and the hooks never are."""
    lead(world, "--rw", ".git")
    fork("-p", "lead", "-n", "w1", "--allow", "run")
    fork("-p", "lead", "-n", "w2", "--allow", "run")
    git = "git -c user.name=w -c user.email=w@example.com"
    turn(tmp_path, "w1", f"echo one > one.txt && {git} add one.txt && {git} commit -qm one "
                         "&& echo '[x]' >> .git/config && echo hook > .git/hooks/post-checkout "
                         "&& git init -q sub && echo hook > sub/.git/hooks/pre-commit "
                         "&& mkdir -p .git/modules/m/hooks && echo x > .git/modules/m/hooks/x")
    turn(tmp_path, "w2", "echo two > two.txt && git status --short")
    assert agent("merge", "w2").code == 0
    said = agent("merge", "w1")
    assert said.code == 0, said.err
    assert ".git/config: not merged" in said.err and ".git/hooks/post-checkout" in said.err
    for path in ("sub/.git/config", "sub/.git/hooks/pre-commit", ".git/modules/m/hooks/x"):
        assert f"{path}: not merged" in said.err and path not in said.out, path
    assert "sub/.git/HEAD" in said.out.splitlines()
    assert ".git/index" not in said.out + said.err and any(
        p.startswith(".git/objects/") for p in said.out.splitlines())
    log, = turn(tmp_path, "lead", "git log --format=%s; cat .git/config")
    assert log.startswith("one\n") and "[x]" not in log


def test_errors_are_one_line_with_their_status(world, tmp_path):
    fork("-n", "direct", "--cwd", str(world), "--shared")
    said = agent("merge", "direct")
    assert said.code == 1 and said.err.count("\n") == 1 and "no layer" in said.err
    lead(world)
    assert agent("merge", "--ours", "--theirs", "lead").code == 2
    assert agent("merge", "--only", "../x", "lead").code == 2
    assert agent("merge", "nobody").code == 1
    assert agent("merge", "lead").out == ""             # (nothing changed: nothing done)


def test_changes_column_discard_and_a_reaped_agents_work(world, tmp_path, conn):
    """agent-ps -o changes counts the paths; a reaped agent's work stays until it is
    merged (then its layer goes) or discarded."""
    workers(world, tmp_path)
    said = agent("ps", "-o", "name,changes", "--format", "tsv", "--no-headers").out
    assert sorted(said.splitlines()) == ["init\t", "lead\t1", "w1\t3", "w2\t2"], said
    for name in ("w1", "w2"):
        assert agent("kill", "-s", "KILL", name).code == 0
        assert agent("wait", name).code == 3         # (killed)
        assert row(conn, name)["status"] == "X"
    assert agent("diff", "--name-only", "w1").out == "gone.txt\nshared.txt\nw1.txt\n"
    w1 = [layers.upper(r["id"]) for r in layers.since_fork(conn, row(conn, "w1")["id"])]
    assert agent("merge", "w1").code == 0
    assert not any(os.path.exists(d) for d in w1)       # (merged: its layer gone)
    assert agent("diff", "--discard", "w2").code == 0
    assert agent("diff", "--name-only", "w2").out == ""
    assert agent("merge", "w2").out == "" and shown(conn, "lead", "w2.txt") is None
    assert agent("diff", "--discard", "--stat", "w2").code == 2
    assert agent("set", "lead", "shared=1").code == 0    # (its layer stays; unused)
    said = agent("ps", "-o", "name,changes", "--format", "tsv", "--no-headers").out
    assert "lead\t\n" in said, said                    # (as agent-diff: no layer)


def test_the_diff_and_merge_tools_of_a_lead(world, tmp_path, conn):
    """A lead's model reviews a worker's work and takes it; a worker may neither look at
    its sibling's work nor merge its own."""
    workers(world, tmp_path)
    calls = [("diff", {"agent": "w1"}), ("diff", {"agent": "w1", "stat": True}),
             ("merge", {"agent": "w1"}), ("merge", {"agent": "w2"}),
             ("merge", {"agent": "w2", "only": ["w2.txt"]})]
    model = tmp_path / "review.jsonl"
    model.write_text(json.dumps({"steps": [{"content": "", "tool_calls": [
        {"name": name, "arguments": args}]} for name, args in calls]
        + [{"content": "done"}]}) + "\n")
    assert agent("set", "lead", f"model=scripted:{model}").code == 0
    assert agent("send", "lead", "review").code == 0
    assert agent("run", "lead").code == 0
    said = tool_results(conn, "lead")[-5:]
    assert "+one" in said[0] and "diff --git a/w1.txt b/w1.txt" in said[0]
    assert "3 files changed" in said[1]
    assert said[2] == "merged 3 path(s)\ngone.txt\nshared.txt\nw1.txt"
    assert said[3].startswith("error: w2: 1 path changed on both sides") and \
        said[3].endswith("\nshared.txt"), said[3]
    assert said[4] == "merged 1 path(s)\nw2.txt"
    assert shown(conn, "lead", "w1.txt") == b"one\n" and shown(conn, "lead", "w2.txt") == b"two\n"
    model = tmp_path / "peer.jsonl"
    model.write_text(json.dumps({"steps": [{"content": "", "tool_calls": [
        {"name": "diff", "arguments": {"agent": "w1"}},
        {"name": "merge", "arguments": {"agent": "w2"}}]}, {"content": "done"}]}) + "\n")
    assert agent("set", "w2", f"model=scripted:{model}").code == 0
    assert agent("send", "w2", "peek").code == 0
    assert agent("run", "w2").code == 0
    peek, own = tool_results(conn, "w2")[-2:]
    assert peek.startswith("error:") and "descendant" in peek, peek
    assert own.startswith("error:"), own


HOLDER = """
import sys
from agentctl.store import db
from agentctl.workspace import layers, mount
conn = db.connect()
agent = conn.execute("SELECT * FROM agents WHERE name = ?", (sys.argv[1],)).fetchone()
held = mount.Mount(layers.stack(conn, agent), agent["id"])
held.close()        # (its call ended: the turn keeps the overlay, between its calls)
print("ready", flush=True)
sys.stdin.read()
"""


def test_the_diff_tool_says_no_changes_cuts_a_long_diff_and_reads_the_base(
        world, tmp_path, conn, monkeypatch):
    """The model's diff: "no changes" for an agent that made none, a diff past LIMIT cut
    with what was left out said, and `base` against the real directory."""
    from agentctl.turn import workspaces
    workers(world, tmp_path)
    fork("-p", "lead", "-n", "idle", "--allow", "run")
    monkeypatch.setattr(workspaces, "LIMIT", 60)
    calls = [("diff", {"agent": "idle"}), ("diff", {"agent": "w1"}),
             ("diff", {"agent": "idle", "base": True, "stat": True})]
    model = tmp_path / "look.jsonl"
    model.write_text(json.dumps({"steps": [{"content": "", "tool_calls": [
        {"name": name, "arguments": args}]} for name, args in calls]
        + [{"content": "done"}]}) + "\n")
    assert agent("set", "lead", f"model=scripted:{model}").code == 0
    assert agent("send", "lead", "look").code == 0
    assert agent("run", "lead").code == 0
    idle, cut, base = tool_results(conn, "lead")[-3:]
    assert idle == "no changes"
    assert cut.startswith("diff --git") and "[... the diff goes on: " in cut and \
        len(cut.split("\n[...")[0]) == 60, cut
    assert "shared.txt" in base and "1 file changed" in base, base  # (the lead's, below it)


def test_a_layer_a_turn_holds_is_not_merged_into_nor_from(world, tmp_path, conn):
    """Another process's overlay of the lead's layer (a turn of the lead's: its Space,
    space.py) makes a merge into it fail at once (75, try again); a call of the
    worker's in flight (its layer's lock, shared) makes a merge out of it fail. Nothing
    changes, and once they end the merge is made."""
    workers(world, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, "lead"], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"
        said = agent("merge", "w1")
        assert said.code == 75 and said.err.count("\n") == 1, said
        assert "a turn of its agent's is running" in said.err
    finally:
        holder.communicate("")
    assert shown(conn, "lead", "w1.txt") is None
    own = layers.stack(conn, row(conn, "w1"))[0]
    fd = os.open(layers.top(own["id"]), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)              # (as a call of its holds it)
        said = agent("merge", "w1")
        assert said.code == 75 and said.err.count("\n") == 1, said
        assert "a call of its agent's is running" in said.err
    finally:
        os.close(fd)
    assert shown(conn, "lead", "w1.txt") is None
    assert agent("merge", "w1").code == 0
    assert shown(conn, "lead", "w1.txt") == b"one\n"


def test_a_layer_a_turn_holds_is_not_discarded(world, tmp_path, conn):
    """agent-diff --discard removes a layer's directories: not while another process
    holds an overlay of it (a turn between its calls), whose upper directory it is."""
    workers(world, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, "w1"], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"
        said = agent("diff", "--discard", "w1")
        assert said.code == 75 and "a turn of its agent's is running" in said.err, said
    finally:
        holder.communicate("")
    assert shown(conn, "w1", "w1.txt") == b"one\n"
    assert agent("diff", "--discard", "w1").code == 0 and shown(conn, "w1", "w1.txt") is None


def test_a_merges_lock_that_cant_be_made_is_one_line_and_74(world, tmp_path, monkeypatch):
    """The merges' lock beside their directory, where a file stands in the way (as a
    read-only or broken data directory does): one line, 74, nothing merged."""
    lead(world)
    turn(tmp_path, "lead", "echo x > new.txt")
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    from agentctl.workspace import journal
    monkeypatch.setattr(journal, "root", lambda: str(blocker / "m"))
    said = agent("merge", "lead")
    assert said.code == 74 and said.err.count("\n") == 1, said
    assert said.err.startswith("agent-merge: a merge failed: ") and "blocker" in said.err
    assert not (world / "new.txt").exists()


def test_a_step_that_fails_is_one_line_and_the_next_program_finishes(world, tmp_path,
                                                                     monkeypatch):
    lead(world)
    turn(tmp_path, "lead", "echo x > new.txt")
    from agentctl.workspace import journal
    real = journal.apply

    def full(*args):
        raise OSError(28, "No space left on device", str(world / "new.txt"))
    monkeypatch.setattr(journal, "apply", full)
    said = agent("merge", "lead")
    assert said.code == 74 and said.err.count("\n") == 1, said
    assert "No space left on device" in said.err and not (world / "new.txt").exists()
    said = agent("ps")
    assert said.code == 0 and "No space left on device" in said.err     # (it says so)
    monkeypatch.setattr(journal, "apply", real)
    assert agent("ps").err == "" and (world / "new.txt").read_text() == "x\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="root makes an unprivileged user here")
def test_unprivileged_a_merge_into_a_parents_layer_writes_the_kernels_whiteouts(world,
                                                                               tmp_path, conn):
    """As uid 1000 of a user namespace (no mknod of its own), a deletion merged into the
    parent's layer is written by the overlay itself (a character device 0:0), through the
    parent's stack mounted in the merge's namespaces."""
    needs("unshare", "util-linux")
    for path in [world, *world.rglob("*")]:
        os.chown(path, 0, 0)    # (root's: the operator's, uid 1000 in that namespace)
    steps = {name: tmp_path / f"{name}.jsonl" for name in ("lead", "kid")}
    for name, command in (("lead", "echo lead > lead.txt"),
                          ("kid", "echo kid >> shared.txt; rm gone.txt; rm -r tree")):
        steps[name].write_text(json.dumps({"steps": [{"content": "", "tool_calls": [
            {"name": "run", "arguments": {"command": command}}]}, {"content": "done"}]}) + "\n")
    run = tempfile.mkdtemp(prefix="agentctl-test-")    # (short: a socket's path is)
    try:
        ran = shell(f"XDG_RUNTIME_DIR={run} unshare --user --map-user=1000 --map-group=1000 "
                    f"sh -c 'agent-fork -n lead --allow run --cwd {world} -m scripted:"
                    f"{steps['lead']} go >/dev/null && agent-run lead >/dev/null && "
                    f"agent-fork -p lead -n kid --allow run -m scripted:{steps['kid']} go "
                    ">/dev/null && agent-run kid >/dev/null && agent-merge kid'")
    finally:
        shutil.rmtree(run)
    assert ran.code == 0, ran.err
    assert ran.out.splitlines() == ["tree", "gone.txt", "shared.txt"], ran.out
    own = layers.upper(layers.stack(conn, row(conn, "lead"))[0]["id"])
    for name in ("gone.txt", "tree"):
        st = os.lstat(os.path.join(own, name))
        assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
    assert shown(conn, "lead", "gone.txt") is None and shown(conn, "lead", "tree") is None
    assert shown(conn, "lead", "shared.txt") == b"base\nkid\n"
    assert shown(conn, "lead", "lead.txt") == b"lead\n"
    assert (world / "gone.txt").exists() and (world / "shared.txt").read_text() == "base\n"


def test_a_worker_merged_twice_is_no_conflict_with_its_own_first_merge(world, tmp_path, conn):
    """What a merge gave the target is no change of the target's own: a worker that goes
    on and is merged again, and a lead merged twice into the real directory, merge
    cleanly; an edit of the target's since is still a conflict."""
    workers(world, tmp_path)
    assert agent("merge", "w1").code == 0
    turn(tmp_path, "w1", "echo more >> shared.txt; rm w1.txt")
    again = agent("merge", "w1")
    assert again.code == 0 and again.out == "w1.txt\nshared.txt\n", again   # (deletions first)
    assert shown(conn, "lead", "shared.txt") == b"base\nlead\none\nmore\n"
    assert shown(conn, "lead", "w1.txt") is None
    assert agent("merge", "lead").code == 0
    turn(tmp_path, "lead", "echo later >> shared.txt")
    assert agent("merge", "lead").out == "shared.txt\n"
    turn(tmp_path, "lead", "echo latest >> shared.txt")
    (world / "shared.txt").write_text("the operator's\n")
    assert agent("merge", "lead").code == 3


def test_a_worker_discarded_after_its_merge_takes_nothing_back(world, tmp_path, conn):
    """Its work thrown away after a merge (agent-diff --discard, or reaped once merged)
    is no change to undo: merged again, it changes nothing of what it gave."""
    workers(world, tmp_path)
    assert agent("merge", "w1").code == 0
    assert agent("diff", "--discard", "w1").code == 0
    again = agent("merge", "w1")
    assert again.code == 0 and again.out == "", again
    assert shown(conn, "lead", "w1.txt") == b"one\n" and shown(conn, "lead", "gone.txt") is None
    assert shown(conn, "lead", "shared.txt") == b"base\nlead\none\n"
    assert agent("kill", "-s", "KILL", "w2").code == 0
    assert agent("wait", "w2").code != 2                # (reaped: its work kept)
    assert agent("merge", "--theirs", "w2").code == 0   # (all of it taken: discarded)
    assert agent("merge", "w2").out == "" and shown(conn, "lead", "w2.txt") == b"two\n"


def test_a_program_never_waits_for_a_merge_in_progress(world, tmp_path):
    """While a merge holds the merges' lock (its directory there), another program's
    start leaves it to that merge, and goes on."""
    from agentctl.workspace import journal
    fork("-n", "a", "hi")
    os.makedirs(paths.merges())
    fd = journal.lock()
    try:
        assert shell("agent-ps", timeout=60).code == 0
    finally:
        os.close(fd)
    assert agent("ps").code == 0 and not os.path.exists(paths.merges())


def test_a_branch_both_workers_moved_is_a_conflict(world, tmp_path):
    lead(world, "--rw", ".git")
    fork("-p", "lead", "-n", "w1", "--allow", "run")
    fork("-p", "lead", "-n", "w2", "--allow", "run")
    git = "git -c user.name=w -c user.email=w@example.com"
    for name in ("w1", "w2"):
        turn(tmp_path, name, f"echo {name} > {name}.txt && {git} add {name}.txt && "
                             f"{git} commit -qm {name}")
    assert agent("merge", "w1").code == 0
    said = agent("merge", "w2")
    assert said.code == 3 and said.out.splitlines() in (
        [".git/refs/heads/master"], [".git/refs/heads/main"]), said


def test_a_link_put_in_the_way_after_the_plan_is_never_followed(tmp_path, monkeypatch):
    """A tool of an agent that shares the target swaps a directory the merge writes
    into for a link to elsewhere, between the plan and its steps (as root, the merge
    would write there): each step's way is opened without following a link, and the
    link is replaced by the directory the merge says is there."""
    import stat as stat_
    from agentctl.workspace import journal
    monkeypatch.setattr(journal, "root", lambda: str(tmp_path / "m"))
    top, outside = tmp_path / "top", tmp_path / "outside"
    (top / "d").mkdir(parents=True)
    outside.mkdir()
    (tmp_path / "m" / "t").mkdir(parents=True)
    (tmp_path / "m" / "t" / "0").write_text("merged\n")
    meta = {"mode": 0o644, "uid": os.getuid(), "gid": os.getgid(), "mtime_ns": 10 ** 18,
            "size": 7}
    (top / "d").rmdir()
    (top / "d").symlink_to(outside)                 # (the swap, after the plan)
    (top / "e").symlink_to(outside)
    journal.apply("t", [["d/x", "put", meta], ["e", "delete", None]], str(top))
    assert list(outside.iterdir()) == []
    assert stat_.S_ISDIR(os.lstat(top / "d").st_mode)
    assert (top / "d" / "x").read_text() == "merged\n"
    assert not os.path.lexists(top / "e")           # (the link itself removed)
    with pytest.raises(ValueError):
        journal.apply("t", [["../x", "put", meta]], str(top))


def test_two_workers_in_parallel_turns_on_a_git_repository(world, tmp_path, conn):
    """The issue's story, with both workers' turns running at once: each edits the same
    file of a committed repository and runs git status while the other's call is in
    flight (each waits, in its call, until both are); neither sees the other's work,
    each one's diff is its own, the first merges into the lead, the second conflicts
    and changes nothing, and the real directory waits for the lead's merge."""
    git = "git -c safe.directory=* -c user.name=op -c user.email=op@example.com"
    assert shell(f"cd {world} && {git} add -A && {git} commit -qm base"
          + (" && chown -R 65534:65534 ." if os.geteuid() == 0 else "")).code == 0
    gate = tmp_path / "gate"
    gate.mkdir()
    lead(world, "--ro", str(gate))
    fork("-p", "lead", "-n", "w1", "--allow", "run")
    fork("-p", "lead", "-n", "w2", "--allow", "run")
    before = tree(world)
    for name in ("w1", "w2"):
        given(tmp_path, name, f"echo {name} >> shared.txt && echo {name} > {name}.txt && "
                f"git status --short > /dev/null && echo > .started-{name} && "
                f"for i in $(seq 6000); do [ -e {gate}/go ] && break; sleep 0.05; done && "
                "cat shared.txt && ls && git status --short")
    runs = [subprocess.Popen([os.path.join(ROOT, "bin", "agent-run"), name],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for name in ("w1", "w2")]
    uppers = {name: layers.upper(layers.stack(conn, row(conn, name))[0]["id"])
              for name in ("w1", "w2")}
    try:
        wait_until(lambda: all(os.path.exists(os.path.join(uppers[n], f".started-{n}"))
                               for n in uppers), "both workers' calls in flight")
    finally:
        (gate / "go").write_text("")
        said = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], said
    one, two = (tool_results(conn, name)[-1] for name in ("w1", "w2"))
    assert one.startswith("base\nw1\n") and "w2" not in one, one
    assert two.startswith("base\nw2\n") and "w1" not in two, two
    assert " M shared.txt" in one, one
    assert "?? w1.txt" in one and "w2.txt" not in one
    for name in ("w1", "w2"):
        shown_diff = agent("diff", "--name-only", name).out.split()
        assert [p for p in shown_diff if not p.startswith(".git/")] == \
            [f".started-{name}", "shared.txt", f"{name}.txt"], shown_diff
    assert agent("merge", "w1").code == 0
    held = tree(world)
    two = agent("merge", "w2")
    assert two.code == 3 and two.out == "shared.txt\n", two
    assert shown(conn, "lead", "w2.txt") is None and shown(conn, "lead", "w1.txt") == b"w1\n"
    assert tree(world) == held == before            # (the real directory: untouched)
    assert agent("merge", "lead").code == 0
    assert (world / "shared.txt").read_text() == "base\nw1\n"
    assert (world / "w1.txt").exists() and not (world / "w2.txt").exists()

