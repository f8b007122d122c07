"""Every test gets its own database and a clean environment: no test touches
a real one, and nothing reaches the network."""

import io
import json
import os
from contextlib import contextmanager
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import import_module

import pytest

from tests.bytecode import cached

cached()            # (first: the bytecode of what follows, and of every process started)

from agentctl.modelspec import PROVIDERS  # noqa: E402
from agentctl.programs import NAMES as PROGRAMS  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "bin")
CLEAN = ("AGENT_ID", "AGENTCTL_MODEL", "AGENTCTL_DEBUG", "NO_COLOR",
         # each provider's key and base URL (its row's)
         *(v for p in PROVIDERS for v in (p.key, p.url_variable) if v),
         "AGENTCTL_TOOLS", "AGENTCTL_MCP", "AGENTCTL_ASK_TIMEOUT", "AGENTCTL_HOST")
# OpenTelemetry's (every OTEL_* variable): a test that traces sets its own
CLEAN_PREFIXES = ("OTEL_",)


BACKEND = {"name": "sqlite", "server": None, "missing": None}
# The system programs a test needs (`needs`) that this machine lacks, by the package
# that has them: said loudly in the summary (.ci/run installs them; CI never skips).
MISSING_PROGRAMS = {}

try:
    from hypothesis import HealthCheck, settings
except ImportError:         # (the test extra is not installed: the property tests say so)
    pass
else:
    # Property tests are not timed: a loaded machine is slow at making examples, and at
    # running them.
    settings.register_profile("agentctl", deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("agentctl")


def pytest_addoption(parser):
    parser.addoption("--backend", choices=("sqlite", "postgresql"), default="sqlite",
                     help="the database the tests run on: a SQLite file each (default), "
                          "or a PostgreSQL database each, on a server a fixture starts")


def pytest_configure(config):
    BACKEND["name"] = config.getoption("--backend")
    config.addinivalue_line("markers", "sqlite_only: a test of the SQLite file itself "
                                       "(skipped with --backend postgresql)")
    config.addinivalue_line("markers", "sqlite_files: a test whose databases are SQLite "
                                       "files it makes, whatever --backend says (not run "
                                       "with --backend postgresql: it would run the same)")


def pytest_collection_modifyitems(config, items):
    if BACKEND["name"] != "postgresql":
        return
    skip = pytest.mark.skip(reason="a test of the SQLite file itself")
    for item in items:
        if item.get_closest_marker("sqlite_only"):
            item.add_marker(skip)
    again = [item for item in items if item.get_closest_marker("sqlite_files")]
    if again:
        config.hook.pytest_deselected(items=again)
        items[:] = [item for item in items if not item.get_closest_marker("sqlite_files")]


def postgresql_server():
    """The worker's PostgreSQL server, started at its first use."""
    if BACKEND["server"] is None and BACKEND["missing"] is None:
        from tests.pgserver import Server, memory
        try:
            BACKEND["server"] = Server(memory())
        except Exception as e:     # reported loudly in the summary
            BACKEND["missing"] = str(e)
    if BACKEND["server"] is None:
        pytest.skip(f"PostgreSQL: {BACKEND['missing']}")
    return BACKEND["server"]


def postgresql_database(request, empty=False):
    """A new database's URL on the worker's server, agentctl's schema in it unless `empty`;
    dropped when the test ends (what the server holds is in memory: tests/pgserver.py)."""
    server = postgresql_server()
    url = server.database(empty)
    request.addfinalizer(lambda: server.drop(url))
    return url


def _npm_servers():
    """Where tests/npm/install.sh put the MCP reference servers (read before any test
    changes the environment)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "npm"))
    try:
        from npmdir import where
        return where()
    finally:
        sys.path.pop(0)


NPM_SERVERS = _npm_servers()


def reference_servers():
    """The node_modules of the official MCP reference servers, with node to run them;
    without them the test is skipped and the summary says so loudly."""
    needs("node", "nodejs")
    modules = os.path.join(NPM_SERVERS, "node_modules")
    if not os.path.exists(os.path.join(NPM_SERVERS, ".installed")):
        MISSING_PROGRAMS["the MCP reference servers (tests/npm/install.sh, run by make "
                         "test)"] = "nodejs and npm, and the npm registry once"
        pytest.skip(f"the MCP reference servers are not installed in {NPM_SERVERS}")
    return modules


# The npm registry and the Python package index on 127.0.0.1 that a launcher (npx, uvx)
# installs an MCP server from, with no network (tests/registries.py)
from tests.registries import npm_registry, python_index  # noqa: E402,F401  (the fixtures)


def needs(program, package):
    """The path of a system program the test needs (or of a file, given by its absolute
    path); without it the test is skipped, and the summary says so loudly."""
    import shutil
    found = program if os.path.isabs(program) and os.path.isfile(program) \
        else shutil.which(program)
    if found is None:
        MISSING_PROGRAMS[program] = package
        pytest.skip(f"{program} is not installed (Debian's {package})")
    return found


def pytest_sessionfinish(session):
    if BACKEND["server"] is not None:
        BACKEND["server"].stop()
        BACKEND["server"] = None
    if hasattr(session.config, "workerinput"):
        if BACKEND["missing"]:
            session.config.workeroutput["postgresql_missing"] = BACKEND["missing"]
        session.config.workeroutput["missing_programs"] = dict(MISSING_PROGRAMS)


def pytest_testnodedown(node, error):
    output = getattr(node, "workeroutput", {})
    if output.get("postgresql_missing"):
        BACKEND["missing"] = output["postgresql_missing"]
    MISSING_PROGRAMS.update(output.get("missing_programs", {}))


def pytest_terminal_summary(terminalreporter):
    if MISSING_PROGRAMS:
        terminalreporter.section("PROGRAMS MISSING: TESTS SKIPPED", sep="!", red=True,
                                 bold=True)
        for program, package in sorted(MISSING_PROGRAMS.items()):
            terminalreporter.write_line(
                f"{program} is not installed: the tests that need it were SKIPPED "
                f"(.ci/run installs Debian's {package})", red=True, bold=True)
    if BACKEND["missing"]:
        terminalreporter.section("PostgreSQL NOT TESTED", sep="!", red=True, bold=True)
        terminalreporter.write_line(
            f"the tests that need a PostgreSQL server were SKIPPED: {BACKEND['missing']} "
            "(.ci/run installs Debian's postgresql package)", red=True, bold=True)


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch, request):
    for name in CLEAN:
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith(CLEAN_PREFIXES)]:
        monkeypatch.delenv(name)
    if os.geteuid() == 0:
        # As root, tools run as nobody (agentctl(7), SANDBOX): a test's directories are
        # made writable by it, as a root operator gives an agent its working directory.
        os.chmod(tmp_path, 0o777)
        previous = os.umask(0)
        request.addfinalizer(lambda: os.umask(previous))
    db = tmp_path / "agents.db"
    if BACKEND["name"] == "postgresql":
        db = postgresql_database(request)
    monkeypatch.setenv("AGENTCTL_DB", str(db))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    # no test reads the user's tools, MCP servers or cache: the shipped tools only
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return db


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def lines(self):
        return self.out.splitlines()


def agent(program, *args, stdin=b"", capsys=None):
    """Run a program in-process, as its console script would: returns
    (exit status, stdout, stderr)."""
    module = import_module(f"agentctl.cli.{program}")
    old_in, old_out, old_err = sys.stdin, sys.stdout, sys.stderr
    out, err = io.BytesIO(), io.BytesIO()
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin if isinstance(stdin, bytes)
                                            else stdin.encode()), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
    wrappers = (sys.stdin, sys.stdout, sys.stderr)
    try:
        code = module.main([str(a) for a in args])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdin, sys.stdout, sys.stderr = old_in, old_out, old_err
        for wrapper in wrappers:
            wrapper.detach()     # else closing the wrapper closes the buffer
    return Result(code, out.getvalue().decode("utf-8", "replace"),
                  err.getvalue().decode("utf-8", "replace"))


def started(program, *args, **kwargs):
    """A program of the checkout's bin/ running on its own, as a shell would start
    it (text pipes for stdout and stderr unless given)."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("text", True)
    # as a shell starts a foreground job: SIGINT as it comes (a suite run in the
    # background has it ignored, and the ignoring is inherited)
    kwargs.setdefault("preexec_fn", lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return subprocess.Popen([sys.executable, os.path.join(BIN, program), *args],
                            env=dict(os.environ), **kwargs)


def make(*args):
    """make in the checkout with this Python, one at a time among the tests (make install
    builds in the checkout's tree, and two builds at once break each other): a lock on
    the Makefile."""
    import fcntl
    with open(os.path.join(ROOT, "Makefile")) as makefile:
        fcntl.flock(makefile, fcntl.LOCK_EX)
        return subprocess.run(["make", "-C", ROOT, f"PYTHON={sys.executable}", *args],
                              capture_output=True, text=True, timeout=600)


def shell(script, env=None, timeout=120, stdin=subprocess.DEVNULL):
    """Run a shell script with the checkout's bin/ first on PATH."""
    full = dict(os.environ)
    full["PATH"] = BIN + os.pathsep + os.path.dirname(sys.executable) + os.pathsep + full["PATH"]
    full.update(env or {})
    proc = subprocess.run(["bash", "-c", script], env=full, stdin=stdin, timeout=timeout,
                          capture_output=True, text=True)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@contextmanager
def write_locked(path):
    """Another connection holding the database's write lock, as a long writer would
    (on PostgreSQL, the one writer's advisory lock)."""
    if str(path).startswith("postgresql://"):
        import psycopg
        from agentctl.store.pg import WRITE_LOCK
        holder = psycopg.connect(str(path), autocommit=True)
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
    else:
        import sqlite3
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def stored(path):
    """Everything the database holds, as bytes: the SQLite file and its WAL, or every
    row of every table on PostgreSQL (a secret must be in neither)."""
    if str(path).startswith("postgresql://"):
        from agentctl.store.copy import TABLES
        from agentctl.store.db import connect
        conn = connect(str(path))
        try:
            return repr([list(conn.execute(f"SELECT * FROM {t}").fetchall())
                         for t in TABLES]).encode()
        finally:
            conn.close()
    return b"".join(p.read_bytes() for p in path.parent.iterdir()
                    if p.name.startswith(path.name))


@pytest.fixture
def conn(home):
    from agentctl.store.db import connect
    c = connect(str(home))
    yield c
    c.close()


def fork(*args, stdin=b""):
    """agent-fork that must succeed; returns the child's id."""
    result = agent("fork", *args, stdin=stdin)
    assert result.code == 0, result.err
    return result.out.strip()


# -- what an agent has, read from the database or through a program -------------------------------

def row(conn, ref):
    """Agent `ref`'s row: a name, an id, or a prefix of one (registry.resolve)."""
    from agentctl.store import registry
    return registry.resolve(conn, ref)


def status(conn, ref):
    return row(conn, ref)["status"]


def mails(conn, ref, kind):
    """The bodies of the mail of `kind` (exit, failure, budget ...) sent to `ref`, in order."""
    return [r[0] for r in conn.execute(
        "SELECT body FROM mail WHERE recipient_id = ? AND kind = ? ORDER BY id",
        (row(conn, ref)["id"], kind))]


def unread(conn, ref):
    """How many mails `ref` has not read."""
    return conn.execute("SELECT count(*) FROM mail WHERE recipient_id = ? AND read_at IS NULL",
                        (row(conn, ref)["id"],)).fetchone()[0]


def tool_results(conn, ref):
    """What the tool calls of agent `ref` answered, in order: the results its conversation
    holds (none voided)."""
    return [r[0] for r in conn.execute(
        "SELECT content FROM messages WHERE agent_id = ? AND kind = 'tool_result' AND void = 0 "
        "ORDER BY id", (row(conn, ref)["id"],))]


def events(conn, ref, kind, *columns):
    """The events of `kind` of agent `ref`, in order: the data of each (a dict), or with
    `columns` a tuple of those columns."""
    rows = conn.execute(f"SELECT {', '.join(columns) or 'data'} FROM events "
                        "WHERE agent_id = ? AND kind = ? ORDER BY id", (row(conn, ref)["id"], kind))
    return [tuple(r) if columns else json.loads(r[0]) for r in rows]


def offered(who, mcp=False):
    """The names of the tools agent-run offers agent `who` (--list-tools), sorted: all but the
    built-in ones, or with `mcp` the MCP servers' alone (named SERVER__TOOL)."""
    listed = agent("run", "--list-tools", "--format", "json", who)
    assert listed.code == 0, listed.err
    return sorted(t["name"] for t in json.loads(listed.out)
                  if ("__" in t["name"] if mcp else t["source"] != "built-in"))


def mode(path):
    """A file's permission bits."""
    import stat
    return stat.S_IMODE(os.stat(path).st_mode)


# -- the scripted model --------------------------------------------------------------------------

def script(tmp_path, *rules, name="script.jsonl"):
    """The offline model scripted:FILE (agent-run(1)) that follows `rules`, written one a
    line to tmp_path/name: a dict as JSON, a str as it is (a comment, a blank line, a
    broken rule). Returns the model's spec, "scripted:" and the file's path."""
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rules))
    return f"scripted:{path}"


def calling(calls):
    """A rule of two steps: every (name, arguments) of `calls` called at once, then "done"
    said."""
    return {"steps": [{"content": "", "tool_calls": [{"name": n, "arguments": a}
                                                     for n, a in calls]},
                      {"content": "done"}]}


def scripted_calls(monkeypatch, record=lambda messages: messages):
    """A list that gets record(messages) for each call the scripted model is sent from now on,
    in this process (a None is left out): by default the messages themselves."""
    from agentctl.models import offline
    sent = []
    real = offline.ScriptedModel.complete

    def spy(self, messages, tools, on_text=None, cache=None):
        item = record(messages)
        if item is not None:
            sent.append(item)
        return real(self, messages, tools, on_text, cache)
    monkeypatch.setattr(offline.ScriptedModel, "complete", spy)
    return sent


# -- pausing for a human: requests (agent-answer) -----------------------------------------------

ASKING = {"match": "^go", "steps": [
    {"content": "", "tool_calls": [{"name": "ask", "arguments": {"question": "Which color?"}}]},
    {"content": "done asking"}]}


def pending_ids():
    """The ids of the requests waiting for an answer (agent-answer -q)."""
    return agent("answer", "-q").lines


@pytest.fixture
def files(tmp_path, monkeypatch):
    """The shipped tools, a working directory, and a writer that needs approval."""
    work = tmp_path / "work"
    work.mkdir()
    model = script(tmp_path, {"match": "^write", "steps": [
        {"content": "", "tool_calls": [{"name": "write_file",
                                        "arguments": {"path": "out.txt", "content": "hi\x1b]0;x"}}]},
        {"content": "wrote it"}]}, name="writer.jsonl")
    return work, model


@pytest.fixture
def priced(tmp_path, monkeypatch):
    """An operator's price file for the fake API's models and the scripted ones."""
    path = tmp_path / "prices"
    path.write_text("# model  input output cache-read cache-write (dollars per million)\n"
                    "anthropic:claude-test  3 15 0.30 3.75   # as Sonnet\n"
                    "scripted:*  1000 1000\n")
    monkeypatch.setenv("AGENTCTL_PRICES", str(path))
    return path


# -- waiting for a state, never for a time ----------------------------------------------------
#
# A test waits for what it needs (a row, an event, a file, a process asleep at the
# database), not for a time that a loaded machine may exceed. The ceiling of a wait is
# reached only when what is waited for never comes: the test then fails saying so.

PATIENCE = 60.0         # seconds


def wait_until(condition, what, timeout=PATIENCE):
    """Call condition() until it returns something true, and return that. Between calls,
    sleeps that grow from 5 ms to a quarter of a second: a quiet machine waits little,
    a loaded one as long as it needs. After `timeout` seconds the test fails, saying
    `what` was waited for."""
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        value = condition()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"waited {timeout:g} s for {what}", pytrace=False)
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.25)


def clock_slack():
    """How far apart two programs' clocks may be: nothing on SQLite (each takes the
    host's). On PostgreSQL each takes the server's, offset by clock.skew, measured over
    one round trip as it connects: a loaded machine can make that round trip long, and
    the offset wrong by up to half of it (50 ms seen at a load of 20 on 2 cores)."""
    return 0.5 if BACKEND["name"] == "postgresql" else 0.0


def database_now(conn):
    """The database's clock: the server's on PostgreSQL, the host's on SQLite."""
    if getattr(conn, "dialect", "sqlite") == "postgresql":
        return conn.execute("SELECT extract(epoch from clock_timestamp())::float8").fetchone()[0]
    return time.time()


def clock_passes(conn, when, what="the time"):
    """Wait until `when` (a Unix time the database holds: a mail's due time, a deadline)
    has passed for every program: on the database's clock, by clock_slack() more."""
    wait_until(lambda: database_now(conn) > when + clock_slack(), f"{what} to pass")


def process_state(pid):
    """The state of a process, as ps shows it (R running or runnable, S asleep, D in
    disk I/O, T stopped, Z a zombie), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def ended(pid):
    """Whether a process is gone, or dead and not yet waited for (a zombie)."""
    return process_state(pid) in (None, "Z", "X")


_marks = iter(range(1, 10 ** 6))


def marker():
    """A sleep no other test's process has in its command line: a sandboxed tool's own
    pids ($$, $!) are its pid namespace's, so a test knows its processes by this."""
    return f"{600 + os.getpid() % 1000}.{next(_marks)}"


def running(mark):
    """The host pids of the live processes whose command line holds `mark`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if mark.encode() in words and not ended(int(entry)):
            found.append(int(entry))
    return found


def _socket_ports(pid):
    """The local TCP ports of a process's sockets."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return set()
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:             # closed since it was listed
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def backends(pid, url, conn=None):
    """What PostgreSQL's pg_stat_activity says of the connections of process `pid` to
    the database at `url`: (state, wait_event_type, state_change, query) each. On
    `conn` (a connection of agentctl's) if given, else on one of its own."""
    ports = sorted(_socket_ports(pid))
    if not ports:
        return []
    query = ("SELECT state, wait_event_type, state_change, query FROM pg_stat_activity "
             "WHERE datname = current_database() AND client_port IN "
             f"({', '.join(str(p) for p in ports)})")
    if conn is not None:
        return [tuple(r) for r in conn.execute(query).fetchall()]
    import psycopg
    with psycopg.connect(str(url), autocommit=True) as own:
        return [tuple(r) for r in own.execute(query).fetchall()]


def has_database_open(pid, db):
    """Whether process `pid` has the database open: the SQLite file, or a connection to
    the PostgreSQL database."""
    if str(db).startswith("postgresql://"):
        return bool(backends(pid, db))
    path = os.path.realpath(db)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.path.realpath(f"/proc/{pid}/fd/{fd}", strict=True) == path:
                return True
        except OSError:             # closed since it was listed
            pass
    return False


def asleep_at_database(pid, db, lock=False, conn=None):
    """Whether process `pid` is blocked on the database: asleep, with the database open,
    and on PostgreSQL its connections idle (a waiter's LISTEN: agent-mail --wait,
    agent-wait, agent-log -f, the wait tool), or with `lock` one of them waiting for a
    lock (a writer behind another). Seen twice, 20 ms apart, the same: a process between
    two queries is not asleep that long with its connection unchanged."""
    def seen():
        if process_state(pid) != "S":
            return None
        if not str(db).startswith("postgresql://"):
            return has_database_open(pid, db) and "open"
        rows = backends(pid, db, conn)
        if not rows:
            return None
        if lock:
            waiting = any(state == "active" and event == "Lock" for state, event, _, _ in rows)
        else:
            waiting = all(state == "idle" for state, _, _, _ in rows)
        return waiting and rows
    first = seen()
    if not first:
        return False
    time.sleep(0.02)
    return seen() == first
