"""What every program shares: --help, --version, one-line errors, exit
codes, no tracebacks, cheap start-up."""

import glob
import os
import re
import subprocess
import sys

import pytest

from .conftest import (BIN, PATIENCE, PROGRAMS, ROOT, agent, asleep_at_database, fork, shell,
                       started, wait_until)


def test_the_programs_are_the_tables():
    """A module of cli/ that declares a program (@program("agent-NAME")) is NAME.py, and
    NAME a row of the table (agentctl/programs.py); each row has its module."""
    declared = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "agentctl", "cli", "*.py"))):
        with open(path) as f:
            for program in re.findall(r'@program\(\s*"agent-([^"]*)"', f.read()):
                declared[program] = os.path.basename(path)
    assert declared == {p: f"{p}.py" for p in PROGRAMS}
    assert len(set(PROGRAMS)) == len(PROGRAMS)


def test_every_program_has_its_launcher_and_no_other():
    """bin/ holds agent-NAME for each program of the table, each the same as the others
    but for its name."""
    assert sorted(os.listdir(BIN)) == sorted(f"agent-{p}" for p in PROGRAMS)
    shapes = {}
    for p in PROGRAMS:
        path = os.path.join(BIN, f"agent-{p}")
        assert os.access(path, os.X_OK), f"bin/agent-{p} is not executable"
        with open(path) as f:
            shapes.setdefault(f.read().replace(f'launch("{p}")', 'launch(NAME)'), []).append(p)
    assert len(shapes) == 1 and "launch(NAME)" in next(iter(shapes)), \
        f"bin/ launchers that differ from the others but for the name: {shapes}"


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_and_version(program):
    for flag in ("-h", "--help"):
        result = agent(program, flag)
        assert result.code == 0 and result.out.startswith(f"Usage: agent-{program} ")
        assert "--db PATH" in result.out and "--version" in result.out
    result = agent(program, "--version")
    assert (result.code, result.out) == (0, f"agent-{program} (agentctl) 0.1.0\n")


@pytest.mark.parametrize("program", PROGRAMS)
def test_unknown_option_is_one_line_and_exit_2(program):
    result = agent(program, "--no-such-option")
    assert result.code == 2
    # (click may add its guess: ". Did you mean '--model-option'?")
    assert result.err.startswith(f"agent-{program}: No such option '--no-such-option'")
    assert result.err.endswith(f" (see agent-{program} --help)\n")
    assert result.err.count("\n") == 1


@pytest.mark.parametrize("program, words, said", [
    ("set", ["-m", "echo", "a"], "no such option: -m: use model=VALUE (agent-set takes "
                                  "KEY=VALUE)"),
    ("set", ["--allow=read_*", "a"], "no such option: --allow: use allow=VALUE"),
    ("set", ["--no-net", "a"], "no such option: --no-net: use net=VALUE"),
    ("kill", ["-9", "a"], "no such option: -9: use -s KILL"),
    ("kill", ["-KILL", "a"], "no such option: -KILL: use -s KILL"),
    ("kill", ["-SIGSTOP", "a"], "no such option: -SIGSTOP: use -s STOP"),
])
def test_another_programs_spelling_gets_a_hint(program, words, said):
    """agent-fork's options given to agent-set, kill(1)'s -9 given to agent-kill: the
    one line says what to type instead (exit 2, nothing done)."""
    result = agent(program, *words)
    assert (result.code, result.err.count("\n")) == (2, 1), result
    assert result.err.startswith(f"agent-{program}: {said}"), result
    other = agent(program, "-Z", "a")       # no hint for what is no one's spelling
    assert other.code == 2 and other.err.endswith(f" (see agent-{program} --help)\n")


def test_agent_sets_errors_name_its_own_words(tmp_path):
    fork("-n", "a", "--cwd", tmp_path)
    bad = agent("set", "a", "allow=read_*,x;y")
    assert (bad.code, bad.err) == (2, "agent-set: allow='x;y': a pattern is a glob over "
                                      "tool names (letters, digits, _ -, and * ? [ ])\n")
    forked = agent("fork", "--allow", "x;y")
    assert forked.err.startswith("agent-fork: --allow 'x;y': a pattern is a glob")


@pytest.mark.parametrize("program", PROGRAMS)
def test_launchers_run_from_a_checkout(program):
    result = shell(f"agent-{program} --version")
    assert result.out == f"agent-{program} (agentctl) 0.1.0\n"


def test_a_bug_is_exit_70_with_one_line_and_details_on_demand(monkeypatch):
    from agentctl.ops import lifecycle

    def broken(*args, **kwargs):
        raise KeyError("boom")
    monkeypatch.setattr(lifecycle, "fork", broken)
    result = agent("fork", "-n", "x")
    assert result.code == 70
    assert result.err == ("agent-fork: internal error: KeyError: 'boom' "
                          "(AGENTCTL_DEBUG=1 shows the details)\n")
    monkeypatch.setenv("AGENTCTL_DEBUG", "1")
    with pytest.raises(KeyError):
        agent("fork", "-n", "x")


def test_broken_pipe_is_quiet():
    for _ in range(50):         # (here: 50 agent-fork processes take minutes on a loaded machine)
        assert agent("fork").code == 0
    result = shell("agent-ps | head -1")
    assert result.code == 0 and result.err == ""


def test_a_reader_that_goes_away_is_exit_141_not_1():
    """click turns EPIPE into exit 1, which means "nothing" here: a script
    reading `agent-doc get notes | head -c 10` must not take it for that."""
    result = shell("""
        head -c 600000 /dev/zero | tr '\\0' x | agent-doc put notes -
        agent-fork -n big - < <(head -c 600000 /dev/zero | tr '\\0' y) >/dev/null
        for i in $(seq 3000); do echo '{"to": "big", "body": "hello there"}'; done \\
            | agent-send --jsonl >/dev/null
        agent-doc get notes | true; echo "doc ${PIPESTATUS[0]}"
        agent-replay big | true; echo "replay ${PIPESTATUS[0]}"
        agent-mail -a big | true; echo "mail ${PIPESTATUS[0]}"
        agent-mail -r big | true; echo "mail-r ${PIPESTATUS[0]}"
        # a reader that takes a little first: the big write is cut short, not refused
        agent-doc get notes | head -c 10 >/dev/null; echo "doc ${PIPESTATUS[0]}"
        agent-replay big | head -c 10 >/dev/null; echo "replay ${PIPESTATUS[0]}"
    """)
    assert result.out.split("\n")[1:] == ["doc 141", "replay 141", "mail 141", "mail-r 141",
                                          "doc 141", "replay 141", ""], result
    assert result.err == "", result.err


@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_standard_output_that_cant_be_written_is_exit_74(unbuffered):
    result = shell(f"""
        export PYTHONUNBUFFERED={unbuffered}
        agent-doc put notes hello; agent-fork -n a hi >/dev/null
        agent-ps >/dev/full; echo "ps $?"
        agent-doc get notes >/dev/full; echo "doc $?"
        agent-replay a >/dev/full; echo "replay $?"
        agent-ps --help >/dev/full; echo "help $?"
        agent-ps >&-; echo "closed $?" >&2
    """)
    assert result.out.split("\n")[1:] == ["ps 74", "doc 74", "replay 74", "help 74", ""], result
    assert result.err.splitlines() == [
        f"agent-{p}: can't write standard output: No space left on device"
        for p in ("ps", "doc", "replay", "ps")] + [
        "agent-ps: can't write standard output: it is closed", "closed 74"], result.err


def test_invalid_utf8_and_nul_free_arguments_never_crash():
    result = shell("agent-fork -n $'\\xff\\xfe' ; echo rc=$?")
    assert "rc=2" in result.out and "Traceback" not in result.err
    result = shell("printf 'caf\\xe9\\n' | agent-send init - ; echo rc=$?")
    assert "rc=0" in result.out
    result = shell("agent-fork -n a -s $'sys\\xff' $'pr\\xe9' >/dev/null; agent-send a $'caf\\xe9'; "
                   "agent-mail $'\\xff'; echo rc=$?; AGENT_ID=$'\\xfe' agent-mail; echo rc=$?; "
                   "agent-mail -r a; agent-replay a")
    lines = result.out.splitlines()
    assert lines[:3] == ["2", "rc=1", "rc=1"] and lines[3].startswith("--- mail 2 from - at ")
    assert lines[4:] == ["caf\ufffd", "# system prompt", "  sys\ufffd", "", "#1 user @a", "  pr\ufffd"]
    assert result.err == "agent-mail: no such agent: \ufffd\nagent-mail: AGENT_ID=\ufffd: no such agent\n"


@pytest.mark.parametrize("program", ["fork", "kill", "send", "mail", "ps", "replay", "wait",
                                     "doc", "top"])
def test_start_up_imports_nothing_heavy(program, home):
    agent("fork", "-n", "x")
    args = {"fork": ["-n", "y"], "kill": ["-s", "STOP", "x"], "send": ["x", "hi"],
            "mail": ["-c", "x"], "ps": [], "replay": ["x"], "wait": ["--timeout", "0", "x"],
            "doc": ["put", "x", "hi"], "db": ["check"], "log": ["-n", "5"], "answer": [],
            "top": []}[program]
    code = (f"import sys; sys.argv = ['agent-{program}'] + {args!r}\n"
            f"from agentctl.cli.{program} import main\n"
            "try:\n    main()\nfinally:\n"
            "    heavy = [m for m in ('sqlite_utils', 'requests', 'json', 'agentctl.models', "
            "'psycopg', 'curses', 'dataclasses', 'difflib', 'locale')"
            " if m in sys.modules]\n"
            "    print(' '.join(heavy), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    heavy = set(proc.stderr.split())
    # (the same on PostgreSQL: its path loads libpq, no driver package)
    allowed = {"json"} if program in ("replay", "ps", "log", "top") else set()
    assert heavy <= allowed, proc.stderr


def test_a_program_loads_without_collections_and_its_own_process_freezes_what_it_loaded(home):
    """A program's modules load with the collector's young generation left alone, and its
    own process (its console script gives no argv) freezes what they made, so that the
    exit does not look through it; called in-process with argv (as the tests do), run()
    freezes nothing, and gives the thresholds back either way."""
    agent("fork", "-n", "x")
    code = ("import gc, sys; sys.argv = ['agent-ps', '-q']\n"
            "before = gc.get_threshold()[0]\n"
            "from agentctl.cli.ps import main\n"
            "loading = gc.get_threshold()[0]\n"
            "status = {call}\n"
            "print(before, loading, gc.get_threshold()[0], gc.get_freeze_count() > 1000, status,"
            " file=sys.stderr)")
    for call, frozen in (("main()", "True"), ("main(['-q'])", "False")):
        proc = subprocess.run([sys.executable, "-c", code.format(call=call)], cwd=ROOT,
                              capture_output=True, text=True)
        assert proc.stderr.split() == ["700", "50000", "700", frozen, "0"], proc.stderr


def test_dev_null_on_stdin_is_no_input():
    """Under cron stdin is /dev/null: no ids, no body, never a silent empty read."""
    result = shell("agent-fork -n a >/dev/null; agent-kill; echo rc=$?; agent-send a; echo rc=$?")
    assert result.err == ("agent-kill: missing AGENT (give it, or pipe ids on stdin)\n"
                          "agent-send: missing TEXT (give it, or - to read it from stdin)\n")
    assert result.out == "rc=2\nrc=2\n"
    assert shell("echo hi | agent-send a").out == "1\n"
    assert shell("agent-send a < /dev/null").code == 2


@pytest.mark.sqlite_only
def test_tables_show_control_characters_as_question_marks_and_tsv_escapes_nul():
    """A mail's subject must not set a terminal's title or clear its screen; a
    NUL in a tsv value must not split a -0 record."""
    assert agent("fork", "-n", "box").code == 0
    assert agent("send", "box", "\x1b]0;pwned\x07\x1b[2Jhello\x9b").code == 0
    assert agent("send", "box", "-", stdin=b"a\x00b").code == 0
    table = agent("mail", "box").out
    assert "\x1b" not in table and "\x07" not in table and "\x9b" not in table
    assert "?]0;pwned??[2Jhello?" in table
    tsv = agent("mail", "box", "--format", "tsv", "-0", "--no-headers", "-o", "id,subject").out
    assert tsv.split("\0") == ["1\t\x1b]0;pwned\x07\x1b[2Jhello\x9b", "2\ta\\0b", ""]
    for program, args in (("mail", ["box"]), ("ps", []), ("wait", ["--timeout", "0", "box"]),
                          ("doc", ["ls"])):
        for spec in (",", ""):          # an empty $COLS in -o "$COLS" is no columns either
            result = agent(program, *args, "-o", spec)
            assert (result.code, result.err.count("\n")) == (2, 1), (program, spec, result)
            assert "no columns" in result.err


def test_tsv_writes_booleans_as_json_does():
    assert agent("doc", "put", "d", "one").code == 0 and agent("doc", "rm", "d").code == 0
    assert agent("doc", "log", "--format", "tsv", "-o", "version,removed", "d").out == \
        "version\tremoved\n1\tfalse\n2\ttrue\n"


def test_an_interrupt_is_one_line_and_exit_130(home):
    import signal
    assert agent("fork", "-n", "box").code == 0
    # A background job's SIGINT is ignored, and so stays in the programs it runs:
    # give this one the default a shell at a terminal gives.
    proc = started("agent-mail", "--wait", "120", "box", stdin=subprocess.DEVNULL, text=False,
                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_until(lambda: asleep_at_database(proc.pid, home), "agent-mail --wait to wait")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=PATIENCE)
    assert (proc.returncode, out, err) == (130, b"", b"agent-mail: interrupted\n")


def test_a_broken_venv_in_a_checkout_is_one_line_not_a_traceback(tmp_path):
    """A .venv without its python (half made, or moved) gives one clear line."""
    import shutil
    top = tmp_path / "checkout"
    shutil.copytree(os.path.join(ROOT, "agentctl"), top / "agentctl",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(ROOT, "bin"), top / "bin")
    (top / ".venv" / "bin").mkdir(parents=True)
    proc = subprocess.run([sys.executable, str(top / "bin" / "agent-ps")], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 70
    assert proc.stderr == (f"agent-ps: the checkout's .venv is broken ({top}/.venv/bin/python3: "
                           f"No such file or directory): run make in {top}\n")


def test_a_checkout_run_without_click_says_so_in_one_line(tmp_path):
    """A checkout's launcher under a Python that lacks click (no .venv made yet)."""
    import shutil
    top = tmp_path / "checkout"
    shutil.copytree(os.path.join(ROOT, "agentctl"), top / "agentctl",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(ROOT, "bin"), top / "bin")
    proc = subprocess.run([sys.executable, "-S", str(top / "bin" / "agent-ps")],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert (proc.returncode, proc.stderr) == (
        70, f"agent-ps: click is not installed (run `make` in {top})\n")
