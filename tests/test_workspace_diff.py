"""agent-diff (agent-diff(1)): what an agent changed in its layer, in git's format,
read from real layers (real overlay, real turns), applied with git apply and patch."""

import json
import os
import shutil
import subprocess

from .conftest import agent, fork, row
from .test_workspace import lead, turn, world  # noqa: F401 (world: a fixture)


def applied(world, tmp_path, patch, name="copy", *args):
    """A copy of `world` as it was, with `patch` applied by git apply."""
    copy = tmp_path / name
    shutil.copytree(world, copy, symlinks=True)
    done = subprocess.run(["git", "apply", *args], cwd=copy, input=patch, capture_output=True)
    assert done.returncode == 0, done.stderr
    return copy


def tree(root):
    """Every file, link and directory under `root` but .git: its mode, and content."""
    found = {}
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                found[rel] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                found[rel] = ("dir",)
            else:
                found[rel] = (st.st_mode & 0o100, open(path, "rb").read())
    return found


def test_two_workers_each_show_their_own_work(world, tmp_path):
    lead(world)
    turn(tmp_path, "lead", "echo lead >> shared.txt")
    fork("-p", "lead", "-n", "w1", "--allow", "run")
    fork("-p", "lead", "-n", "w2", "--allow", "run")
    turn(tmp_path, "w1", "echo one >> shared.txt; echo one > w1.txt")
    turn(tmp_path, "w2", "echo two >> shared.txt; rm gone.txt")
    one = agent("diff", "--name-only", "w1")
    assert one.code == 0 and one.out == "shared.txt\nw1.txt\n"
    assert agent("diff", "--name-only", "w2").out == "gone.txt\nshared.txt\n"
    two = agent("diff", "w2").out
    assert " base\n lead\n+two\n" in two and "+one" not in two and "w1.txt" not in two
    assert " base\n+lead\n" in agent("diff", "--base", "lead").out
    base = agent("diff", "--base", "w1").out
    assert "+lead\n+one\n" in base and "w1.txt" in base


def test_every_kind_of_change_applies_with_git_apply(world, tmp_path):
    blob = os.urandom(1 << 20) * 20     # (20 MB)
    (tmp_path / "blob").write_bytes(blob)
    os.chmod(tmp_path / "blob", 0o644)
    lead(world, "--ro", str(tmp_path / "blob"))
    turn(tmp_path, "lead",
         "rm gone.txt && mv tree forest && ln -s shared.txt link && chmod 755 script.sh "
         f"&& cp {tmp_path}/blob big.bin && rm old.txt && mkdir old.txt "
         "&& echo in > old.txt/f && printf 'no newline' >> shared.txt && echo changed")
    patch = agent("diff", "--binary", "lead").out.encode()
    copy = applied(world, tmp_path, patch)
    seen = tree(copy)
    assert seen["big.bin"][1] == blob and seen["link"] == ("link", "shared.txt")
    assert seen["script.sh"][0] and seen["old.txt/f"][1] == b"in\n"
    assert seen["forest/inner/leaf.txt"][1] == b"leaf\n" and "tree" not in seen
    assert "gone.txt" not in seen and seen["shared.txt"][1] == b"base\nno newline"
    said = agent("diff", "lead").out
    assert "Binary files /dev/null and b/big.bin differ" in said
    assert "new mode 100755" in said and "new file mode 120000" in said
    stat = agent("diff", "--stat", "lead").out
    assert "big.bin" in stat and "Bin 0 -> 20971520 bytes" in stat
    records = {r["path"]: r for r in map(json.loads,
                                         agent("diff", "--format", "json", "lead").out.splitlines())}
    assert records["big.bin"]["binary"] and records["big.bin"]["change"] == "added"
    assert records["gone.txt"]["change"] == "deleted" and records["link"]["mode"] == "120000"
    assert records["script.sh"] == {"path": "script.sh", "change": "modified",
                                    "binary": False, "mode": "100755", "old_mode": "100644"}


def test_text_applies_with_patch(world, tmp_path):
    lead(world)
    turn(tmp_path, "lead", "printf 'one\\ntwo\\n' >> shared.txt; echo new > new.txt; rm gone.txt")
    copy = tmp_path / "copy"
    shutil.copytree(world, copy)
    done = subprocess.run(["patch", "-p1"], cwd=copy, input=agent("diff", "lead").out.encode(),
                          capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (copy / "shared.txt").read_text() == "base\none\ntwo\n"
    assert (copy / "new.txt").read_text() == "new\n" and not (copy / "gone.txt").exists()


def test_errors_are_one_line_with_their_status(world, tmp_path, monkeypatch):
    fork("-n", "direct", "--cwd", str(world), "--shared")
    said = agent("diff", "direct")
    assert said.code == 1 and said.err.count("\n") == 1 and "no layer" in said.err
    lead(world)
    assert agent("diff", "--stat", "--name-only", "lead").code == 2
    assert agent("diff", "nobody").code == 1
    fork("-n", "other", "--cwd", str(world))
    monkeypatch.setenv("AGENT_ID", "other")
    said = agent("diff", "lead")
    assert said.code == 3 and said.err.count("\n") == 1 and "descendants" in said.err


def test_turn_shows_what_the_last_turn_changed(world, tmp_path):
    lead(world)
    turn(tmp_path, "lead", "echo first >> shared.txt; echo a > a.txt; echo b > b.txt")
    turn(tmp_path, "lead", "echo again >> b.txt; rm gone.txt; mv tree forest; echo c > c.txt")
    said = agent("diff", "--turn", "--name-only", "lead").out.splitlines()
    assert said == ["b.txt", "c.txt", "forest/inner/leaf.txt", "gone.txt",
                    "tree/inner/leaf.txt"], said
    assert "+b\n+again\n" in agent("diff", "--turn", "lead").out     # (against the fork)
    fork("-n", "idle", "--cwd", str(world))
    assert agent("diff", "--turn", "idle").out == ""


def test_a_layer_on_another_host_is_named_not_read_as_empty(world, tmp_path, conn):
    """A PostgreSQL database's agent whose turns ran on another host: its layer is
    there, not here; agent-diff and agent-merge say so."""
    lead(world)
    conn.execute("UPDATE layers SET host = 'elsewhere'")
    conn.commit()
    for program in ("diff", "merge"):
        said = agent(program, "lead")
        assert said.code == 3 and said.err.count("\n") == 1, said
        assert "is on elsewhere" in said.err
    said, = turn(tmp_path, "lead", "echo ran > ran.txt")    # (a call: not run here)
    assert said.startswith("error:") and "is on elsewhere" in said and "--shared" in said
    assert not (world / "ran.txt").exists()
    fork("-p", "lead", "-n", "kid", "--allow", "run")       # (a frozen layer of elsewhere's)
    conn.execute("UPDATE layers SET host = 'elsewhere' WHERE agent_id = ?",
                 (row(conn, "lead")["id"],))
    conn.commit()
    said, = turn(tmp_path, "kid", "echo ran > ran.txt")
    assert said.startswith("error:") and "is on elsewhere" in said, said
