"""Hostile arguments and standard input for every program (hypothesis): no
traceback, no internal error, only the documented exit statuses.

The programs run in-process (conftest.agent) for speed; test_cli.py and the
tests below pass real bytes through a subprocess. AGENTCTL_FUZZ_EXAMPLES
sets how many cases each program gets (`make soak` runs more); the cases run
are counted in .fuzz-cases when AGENTCTL_FUZZ_COUNT names a file.
"""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import PROGRAMS, agent, fork, shell

EXAMPLES = int(os.environ.get("AGENTCTL_FUZZ_EXAMPLES", "150"))
DOCUMENTED = {0, 1, 2, 3, 74, 75}     # 69 needs a model API; 70 is a bug; 130/141 need signals

OPTIONS = {
    "fork": ["-p", "--parent", "-n", "--name", "-r", "--role", "-m", "--model", "-s", "--system",
             "--at", "-w", "--context-window", "--budget", "--allow", "--ask", "--cwd", "*",
             "read_file"],
    "kill": ["-s", "--signal", "--cascade"],
    "ps": ["-a", "--all", "-f", "--forest", "--parent", "--status", "--role"],
    "send": ["--from", "--jsonl", "--at", "--in", "07:00", "2h", "2026-01-01T00:00"],
    "mail": ["-c", "--check", "-r", "--read", "--peek", "-a", "--all", "--from", "--deferred"],
    "replay": ["--format", "--ranges", "--full"],
    "doc": ["put", "get", "ls", "log", "rm", "-v", "--visibility", "private", "subtree",
            "global", "--if-version", "-V", "--version", "notes/a"],
    "run": ["-j", "--jobs", "-m", "--model", "--max-steps", "--json", "--list-tools"],
    "wait": ["--any"],
    "db": ["check"],
    "answer": ["-c", "--check", "--approve", "--deny", "AAAA", "blue"],
    "log": ["--tree", "--kind", "--since", "--after", "-n", "--lines", "--prune-before", "fork",
            "turn-end", "1h", "1"],
    "set": ["-o", "--model-option", "model=echo", "budget=5", "allow=read_file", "ask=run:1h",
            "max_children=2", "options=max_tokens=5", "schema={}", "temperature=0.2", "a"],
    "why": ["a", "b", "c", "init"],
    "top": ["-a", "--all"],
    "diff": ["--base", "--turn", "--stat", "--name-only", "--format", "json", "patch",
             "--binary", "--discard", "a", "init"],
    "merge": ["--theirs", "--ours", "--only", "-n", "--dry-run", "a", "init", "x.txt"],
}
LISTING = ["--format", "-o", "-q", "--quiet", "-0", "--null", "--no-headers"]
COMMON = ["--db", "-h", "--help", "--version", "--", "-"]

NASTY = ["", " ", "-", "--", "-x", "--nope", "-1", "0", "-0", "1", "2", "9", "64", "65", "-9",
         "99999999999999999999999", "1e309", "-1e309", "nan", "inf", "0x10", "1" * 300,
         "\x00", "a\x00b", "\udcff", "²", "٣", "\ud800", "é", "\u202e", "\n", "a\nb", "TERM", "term",
         "SIGKILL", "15", "SIGFOO", "STOP", "CONT", "HUP", "S", "ZX", "R,T", "task", "daemon",
         "kernel", "json", "jsonl", "tsv", "table", "openai", "id,name", "stat,,", "echo",
         "scripted:/nonexistent", "openai:x", "AAAA", "AAAAAAAAAAAAAAAAAAAAAA", "init", "a", "b",
         "a.b-c_d", "A", "-a", "--from", "/", "/dev/null", ".",
         # nested JSON, control sequences (OSC 52 sets a clipboard), huge numbers
         "[" * 5000, '{"a":' * 3000 + "1" + "}" * 3000, '{"to": "a", "body": ' + "[" * 3000,
         "\x1b]52;c;aGVsbG8=\x07", "\x1b[2J\x1b[H", "\x07\x08\x7f", "\x9b31m", "a\rb",
         "1e999999", "-" + "9" * 400, "9" * 5000, "0" * 300 + "1", "18446744073709551616"]
VALUES = st.one_of(st.sampled_from(NASTY), st.text(max_size=20),
                   st.integers(min_value=-2 ** 70, max_value=2 ** 70).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr))
STDIN = st.one_of(st.binary(max_size=300), st.sampled_from([
    b"", b"\xff\xfe\x00", b"a\x00b\n", b"AAAAAAAAAAAAAAAAAAAAAA\n", b"a b init\n", b"-x\n",
    b'{"to": "a", "body": "hi"}\n', b'{"to": "a"}\n', b'[1, 2]\n', b'{"to": "-a", "body": 1}\n',
    b'{"to": "a", "body": "\\udcff"}\n', b'{"to": "a", "body": "x\\ud800", "from": "\\udc00"}\n',
    b"\n\n\n", b"\xc3\x28\n", b"[" * 100000, b'{"to": "a", "body": ' + b"[" * 5000 + b"\n",
    b'{"to": "a", "body": "hi", "at": ' + b"9" * 5000 + b"}\n", b"\x1b]52;c;aGVsbG8=\x07\n",
    b'{"to": "a", "body": "\\u001b]0;title\\u0007"}\n', b"\x1b[2J" * 100]))
# The environment the programs read, fuzzed with the same values; a model is never
# reached (its URLs point at a closed port, one try).
VARIABLES = ["AGENT_ID", "AGENTCTL_DB", "AGENTCTL_MODEL", "AGENTCTL_BUSY_TIMEOUT",
             "AGENTCTL_BACKOFF", "AGENTCTL_LEASE", "AGENTCTL_MAX_TOKENS",
             "AGENTCTL_CONTEXT_WINDOW", "AGENTCTL_MAX_DEPTH", "AGENTCTL_REAP_AFTER",
             "OPENAI_API_KEY", "NO_COLOR", "XDG_DATA_HOME"]
ENVIRONMENT = st.dictionaries(st.sampled_from(VARIABLES), VALUES, max_size=3)
QUIET = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
         "AGENTCTL_RETRY_TRIES": "1", "AGENTCTL_HTTP_TIMEOUT": "2"}


def as_environ(value):
    """`value` as Python shows an environment's bytes: no NUL, and what is not UTF-8
    as surrogate escapes (a lone surrogate becomes the bytes that encode it)."""
    raw = value.replace("\0", "").encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "surrogateescape")


def argv_for(program):
    tokens = st.one_of(st.sampled_from(OPTIONS[program] + COMMON + (
        LISTING if program in ("ps", "mail", "wait", "doc", "log", "answer") else [])),
        VALUES)
    return st.lists(tokens, max_size=8)


def record(cases):
    path = os.environ.get("AGENTCTL_FUZZ_COUNT")
    if path:
        with open(path, "a") as f:
            f.write(f"{cases}\n")


@pytest.fixture
def world(home):
    """A few agents in every state for the fuzzed arguments to hit."""
    fork("-n", "a", "-m", "echo", "hello")
    fork("-n", "b", "-p", "a")
    fork("-n", "c")
    agent("send", "a", "mail for a")
    agent("kill", "-s", "STOP", "b")
    agent("kill", "c")
    agent("doc", "put", "notes/a", "a document")
    return home


@pytest.mark.parametrize("program", PROGRAMS)
def test_fuzzed_arguments_and_stdin(program, world, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)             # --db with a relative path lands here
    cases = []

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(argv=argv_for(program), stdin=STDIN, environment=ENVIRONMENT)
    def check(argv, stdin, environment):
        if program == "wait":
            argv = ["--timeout=0"] + argv           # else it would wait for ever, as documented
        if program == "log":                        # -f would follow for ever, as documented
            argv = [a for a in argv if a not in ("-f", "--follow")]
        if "--db" in argv or program == "db":      # never write outside this test's directory
            argv = [str(tmp_path / "other.db") if a.startswith("/") or ".." in a else a
                    for a in argv]
        for name in ("AGENTCTL_DB", "XDG_DATA_HOME"):
            if environment.get(name, "").startswith("/") or ".." in environment.get(name, ""):
                environment[name] = str(tmp_path / "elsewhere")
        saved = dict(os.environ)
        os.environ.update({**QUIET, **{k: as_environ(v) for k, v in environment.items()}})
        try:
            result = agent(program, *argv, stdin=stdin)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        cases.append(argv)
        assert result.code in DOCUMENTED, (argv, stdin, environment, result)
        assert "Traceback" not in result.err and "internal error" not in result.err, (argv, result)
        for line in result.err.splitlines():
            assert line.startswith(f"agent-{program}: ") or line.startswith("Usage:") \
                or program == "run", (argv, result.err)

    check()
    record(len(cases))
    assert len(cases) >= EXAMPLES


def test_ten_megabyte_bodies(world, conn):
    """Mail is at most 1 MiB: a bigger body is refused whole (exit 2). A
    prompt has no limit: it is stored whole."""
    big = b"x" * (10 * 1024 * 1024)
    for args, data in ((["a", "-"], big), (["a"], big),
                       (["--jsonl"], b'{"to": "a", "body": "' + big + b'"}\n')):
        result = agent("send", *args, stdin=data)
        assert (result.code, result.out) == (2, "") and result.err.count("\n") == 1, args
        assert result.err.startswith("agent-send: ") and "too long" in result.err, args
    assert agent("mail", "-c", "a").out == "1\n"            # only the mail from the setup
    result = agent("fork", "-n", "big", "-", stdin=big)
    assert result.code == 0
    assert conn.execute("SELECT length(content) FROM messages WHERE kind = 'user' "
                        "ORDER BY id DESC LIMIT 1").fetchone()[0] == len(big)


def test_real_bytes_through_a_shell():
    """What in-process runs can't send: invalid UTF-8 and NUL through real argv and pipes."""
    script = r"""
        agent-fork -n a -m echo hi >/dev/null
        for args in "-s $'\xff' a" "$'-\xff'" "-- $'\xff\xfe'" "$'AAAA\xff'"; do
            eval agent-kill $args; echo "kill rc=$?"
        done
        printf 'a\0b\xff\n' | agent-send a >/dev/null; echo "send rc=$?"
        printf '\xff\xfe' | agent-kill; echo "kill-stdin rc=$?"
        printf '\xff\xfe' | agent-wait --timeout 0; echo "wait-stdin rc=$?"
        head -c 2000000 /dev/zero | agent-send a -; echo "send-big rc=$?"
        agent-run a >/dev/null; echo "run rc=$?"
        agent-mail -r a >/dev/null; echo "mail rc=$?"
    """
    result = shell(script)
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    assert result.out.split() == ["kill", "rc=2", "kill", "rc=2", "kill", "rc=1", "kill", "rc=1",
                                  "send", "rc=0", "kill-stdin", "rc=2", "wait-stdin", "rc=2",
                                  "send-big", "rc=2", "run", "rc=0", "mail", "rc=0"], result
    assert "agent-kill: stdin is not valid UTF-8\n" in result.err


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_database_path_with_a_nul_byte_is_a_usage_error(program, home):
    """Found by the fuzzer (make soak): a NUL in --db was an internal error."""
    args = {"wait": ["--timeout=0", "init"], "doc": ["ls"], "replay": ["init"],
            "run": ["init"], "kill": ["init"], "send": ["init", "hi"],
            "db": ["check"], "set": ["init", "model=echo"], "why": ["init"],
            "diff": ["init"], "merge": ["init"]}.get(program, [])
    if program in ("doc", "db"):
        result = agent(program, "--db", "a\x00b", *args)
    else:
        result = agent(program, *args[:1], "--db", "a\x00b", *args[1:])
    assert (result.code, result.out) == (2, ""), result
    assert result.err == f"agent-{program}: bad database path: it holds a NUL byte\n"


HUGE = "99999999999999999999"       # beyond SQLite's INTEGER


@pytest.mark.parametrize("program, args", [
    ("fork", ["--budget", HUGE]), ("fork", ["-w", HUGE]), ("fork", ["--at", HUGE]),
    ("run", ["--max-steps", HUGE, "a"]), ("doc", ["get", "-V", HUGE, "notes/a"]),
    ("doc", ["put", "--if-version", HUGE, "notes/a", "x"])])
def test_numbers_beyond_sqlite_are_usage_errors(program, args, world):
    result = agent(program, *args)
    assert result.code == 2 and "range" in result.err, result
    assert len(result.err.splitlines()) == 1


def test_a_mail_id_beyond_sqlite_is_no_such_mail(world):
    result = agent("mail", "-r", "a", "1", HUGE)
    assert result.code == 1 and HUGE in result.err and "Traceback" not in result.err, result
    assert agent("mail", "-c", "a").out == "1\n", "the mail that exists stays unread"
