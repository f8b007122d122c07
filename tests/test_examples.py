"""The examples run offline, as a user would run them (stdin from /dev/null)."""

import os
import re
import subprocess

from .conftest import ROOT, fork, shell

EXAMPLES = os.path.join(ROOT, "examples")


def test_fanout():
    result = shell(f"sh {EXAMPLES}/fanout.sh")
    assert result.code == 0, result.err
    assert result.out.startswith("Summary: WAL readers")
    listing = shell("agent-ps -a -o name,stat --format tsv --no-headers").out
    assert "w-checkpoints\tX" in listing and "w-locking\tX" in listing


def test_supervisor_runs_until_nothing_is_left():
    for name in ("a", "b", "c"):
        fork("-n", name, "-m", "echo", "hello")
    result = shell(f"ROUNDS=5 bash {EXAMPLES}/supervisor.sh")
    assert result.code == 0, result.err
    assert result.out.splitlines()[:2] == ["round 1: ran", "round 2: nothing to do"]
    assert "a\tS\tagent\t0" in result.out


def test_crontab_lines_run():
    """The agent-run --all line is run as cron runs it, in a fresh HOME, by
    test_daily.test_the_documented_crontab_line_runs_in_a_fresh_home."""
    lines = [line for line in open(os.path.join(EXAMPLES, "crontab"))
             if re.match(r"^[\d*]", line) and "agent-run --all" not in line]
    assert len(lines) == 1
    fork("-n", "a", "-m", "echo", "hi")
    assert shell("agent-run --all").code == 0
    for line in lines:
        command = re.sub(r"2>>\S+", "", line.split(None, 5)[5])
        result = shell(command)
        assert result.code in (0, 1), (command, result.err)
    assert shell("agent-mail -c a").code == 1
    assert "hi" in shell("agent-replay a").out


def demo_steps():
    """The demo's steps, each the very line it prints and runs; no command runs unseen
    but the clean-up of an earlier demo."""
    lines = [line.rstrip("\n") for line in open(os.path.join(EXAMPLES, "demo.sh"))]
    body = lines[lines.index("agent-wait demo-lead >/dev/null 2>&1 || true") + 1:]
    steps = [line for line in body if line.strip()]
    assert steps and all(re.fullmatch(r"run '[^']+'", line) for line in steps), steps
    return [line[5:-1] for line in steps]


def test_the_demo_runs_twice_on_one_database():
    for _ in range(2):      # a second run cleans up after the first, as make demo does
        result = shell(f"sh {EXAMPLES}/demo.sh")
        assert result.code == 0, result.err
        out = result.out
        for step in demo_steps():       # it prints what it runs, as it runs it
            assert f"\n$ {step}\n" in out, step
        assert "Summary: WAL readers" in out
        assert re.search(r"demo-lead\s+S\s+\d+/20000", out), "the budget shows spent/budget"
        assert "# SQLite WAL internals" in out       # the document the lead filed
        assert re.search(r"demo-lead\s+in (1h|59m)", out)  # the deferred mail's wake-up
        assert "Check on the survey" not in out.split("agent-mail -a demo-lead")[-1]
        assert "(agent-wait exited 3)" in out
    versions = shell("agent-doc log -q surveys/sqlite-wal").out.split()
    assert versions == ["1", "2"]


def test_a_daemon_restarted_after_a_failure_and_its_parent_told():
    result = shell(f"sh {EXAMPLES}/daemon.sh")
    assert result.code == 0, result.err
    out = result.out
    assert "(agent-run exited 69)" in out
    assert re.search(r"watcher\s+S\s+1\s+model API error", out)    # restarted once
    assert "queue watched" in out                                   # then it worked
    notices = out.split("$ agent-mail -a lead\n")[1].splitlines()
    assert len(notices) == 2 and re.match(r"failure\s+watcher \(\S+\) failed; restarting",
                                          notices[1])


def test_make_demo_uses_a_database_of_its_own(tmp_path):
    """make demo never writes to the user's default database, and says which it uses."""
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTCTL_DB", "XDG_DATA_HOME")}
    env["HOME"] = str(tmp_path)
    proc = subprocess.run(["make", "-s", "demo"], cwd=ROOT, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"make demo: on the database {ROOT}/.demo/agents.db" in proc.stdout
    assert os.path.exists(os.path.join(ROOT, ".demo", "agents.db"))
    assert list(tmp_path.iterdir()) == []               # nothing under the user's home


def test_files_pipeline_reads_and_writes_real_files(tmp_path, monkeypatch):
    work = tmp_path / "work"
    result = shell(f"WORKDIR={work} sh {EXAMPLES}/files.sh")
    assert result.code == 0, result.err
    assert (work / "summary.md").read_text().startswith("# Notes\n")
    assert not (work / "stolen.txt").exists()           # the reader was granted read_file only
    replay = shell("agent-replay reader").out
    assert "The WAL appends frames at its end" in replay     # the real file, read by a tool
    assert "error: unknown tool: write_file" in replay


def test_approval_pipeline_driven_by_cron(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    result = shell(f"WORKDIR={work} sh {EXAMPLES}/approval.sh")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[1].split() == ["reporter", "P"]             # paused after the first run
    assert lines[5].endswith(" approved"), lines
    assert (work / "report.md").read_text() == "# Report\n\nAll checks passed.\n"
    assert shell("agent-ps -o name,stat --no-headers").out.split()[-2:] == ["reporter", "S"]
