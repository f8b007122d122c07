"""PostgreSQL itself (agentctl(5), BACKENDS): what only that backend has, on a real
server the fixture starts. (The rest of the suite runs on it too: make test's
second pass, pytest --backend postgresql.)"""

import json
import os
import subprocess
import sys
import time

import pytest

from agentctl import clock
from agentctl.store import pgschema
from agentctl.store.db import SCHEMA_VERSION, connect, transaction

from .conftest import (BIN, PATIENCE, ROOT, agent, asleep_at_database, backends, fork,
                       postgresql_server, shell, wait_until)


@pytest.fixture
def pg(monkeypatch):
    """A new database on the worker's server, agentctl's schema in it; AGENTCTL_DB."""
    url = postgresql_server().database()
    monkeypatch.setenv("AGENTCTL_DB", url)
    return url


@pytest.fixture
def empty(monkeypatch):
    """A new database with no tables at all."""
    return postgresql_server().database(empty=True)


def one_line(result):
    return result.err.count("\n") == 1 and "Traceback" not in result.err


def test_without_psycopg_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)       # import psycopg fails
    monkeypatch.delitem(sys.modules, "agentctl.store.pg", raising=False)
    monkeypatch.setenv("AGENTCTL_DB", "postgresql://me:s3cret@127.0.0.1:9/agents")
    result = agent("ps")
    assert (result.code, result.err) == (74, (
        "agent-ps: postgresql://me@127.0.0.1:9/agents: PostgreSQL needs psycopg 3, which is "
        "not installed: pip install 'agentctl[postgres]'\n"))


def test_a_password_is_never_printed(monkeypatch):
    server = postgresql_server()
    closed = server.port + 1 if server.port < 65535 else server.port - 1
    for url, code in [
            (f"postgresql://postgres:s3cret@127.0.0.1:{closed}/x", 75),       # no server
            (f"postgresql://postgres:s3cret@127.0.0.1:{server.port}/nosuch", 74),
            (f"postgresql://127.0.0.1:{server.port}/nosuch?user=postgres&password=s3cret", 74)]:
        for program, args in [("ps", []), ("send", ["x", "hi"]), ("log", [])]:
            result = agent(program, "--db", url, *args)
            assert result.code == code and one_line(result), result
            assert "s3cret" not in result.err + result.out, result
            assert "127.0.0.1" in result.err


def test_an_empty_database_is_made_agentctl_s_by_the_first_programs(empty, monkeypatch):
    """Four programs at once on a new database: the schema is made once."""
    monkeypatch.setenv("AGENTCTL_DB", empty)
    procs = [subprocess.Popen([sys.executable, os.path.join(BIN, "agent-fork"), "-n", f"a{i}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    assert [p.wait() for p in procs] == [0] * 4, [p.stderr.read() for p in procs]
    conn = connect(empty)
    assert conn.execute("SELECT count(*) FROM agents WHERE role = 'kernel'").fetchone()[0] == 1
    assert conn.execute("SELECT version FROM agentctl_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_a_database_of_another_program_is_refused_and_left_alone(empty):
    postgresql_server().sql("CREATE TABLE theirs (x int); CREATE TABLE more (y int)",
                            database=empty.rsplit("/", 1)[1])
    result = agent("fork", "--db", empty, "-n", "a")
    assert (result.code, result.err) == (74, (
        f"agent-fork: {empty}: not an agentctl database (it has tables of its own: "
        "more, theirs); give another --db\n"))
    import psycopg
    with psycopg.connect(empty) as raw:
        assert raw.execute("SELECT to_regclass('agents')").fetchone()[0] is None


def test_a_newer_schema_is_refused(pg):
    connect(pg).execute("UPDATE agentctl_schema SET version = 99")
    result = agent("ps")
    assert result.code == 74 and one_line(result)
    assert f"written by a newer agentctl (schema 99, this one knows {SCHEMA_VERSION})" \
        in result.err


def test_the_schema_is_sqlite_s_column_for_column(pg, tmp_path):
    """The two schemas agree: every table and column of one is in the other, and
    PostgreSQL's migrations end at the version SQLite's do."""
    assert pgschema.newest() == SCHEMA_VERSION
    lite = connect(str(tmp_path / "lite.db"))
    tables = [r[0] for r in lite.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                         "AND name NOT LIKE '%sqlite%'")]
    expected = {t: {r[1] for r in lite.execute(f"PRAGMA table_info({t})")} for t in tables}
    conn = connect(pg)
    actual = {}
    for table, column in conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name != 'agentctl_schema'"):
        actual.setdefault(table, set()).add(column)
    assert actual == expected


def test_times_come_from_the_server_not_the_host(pg, tmp_path, monkeypatch):
    """A host whose clock is an hour slow still agrees with the others: the mail it
    defers by a minute is due in a minute of the server's time, not at once."""
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(
        "import time\n_real = time.time\ntime.time = lambda: _real() - 3600\n")
    fork("-n", "a")
    skewed = dict(os.environ, PYTHONPATH=str(slow))
    sent = subprocess.run([sys.executable, os.path.join(BIN, "agent-send"), "--in", "60s",
                           "a", "later"], env=skewed, capture_output=True, text=True)
    assert sent.returncode == 0, sent.stderr
    assert agent("mail", "-c", "a").out == "0\n"         # not due: a minute away
    import datetime
    due = json.loads(agent("mail", "--deferred", "--format", "json", "a").out)[0]["due"]
    due = datetime.datetime.fromisoformat(due.replace("Z", "+00:00")).timestamp()
    assert 55 < due - time.time() < 65
    lease = subprocess.run([sys.executable, "-c", (
        "import sys, sitecustomize; from agentctl.store.db import connect; "
        "from agentctl import clock; connect(sys.argv[1]); "
        "print(round(clock.now() - sitecustomize._real()))"), pg],
        env=skewed, capture_output=True, text=True, cwd=ROOT)
    assert lease.stdout == "0\n", lease.stderr     # the slow host's clock.now() is the server's


# the other programs' connections to the test's database
ACTIVITY = ("SELECT pid, state_change, query FROM pg_stat_activity WHERE datname = "
            "current_database() AND pid != pg_backend_pid() AND backend_type = 'client backend'")


def waiting(url, command):
    """`command` (a program waiting on agent box) started, once it waits: asleep, its
    connection idle (LISTEN); and a connection of the test's own."""
    fork("-n", "box")
    waiter = subprocess.Popen([sys.executable, os.path.join(BIN, command[0]), *command[1:]],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    conn = connect(url)
    wait_until(lambda: asleep_at_database(waiter.pid, url, conn=conn) or waiter.poll() is not None,
               f"{command[0]} to wait")
    assert waiter.poll() is None, waiter.communicate()
    return waiter, conn


@pytest.mark.parametrize("waiter, wake, code, printed", [
    (["agent-mail", "--wait", "90", "-r", "box"], ["send", "box", "wake up"], 0, "wake up\n"),
    (["agent-wait", "--timeout", "90", "box"], ["kill", "box"], 3, "killed TERM  -\n")])
def test_a_waiter_is_woken_by_notify_and_sends_nothing_meanwhile(pg, waiter, wake, code,
                                                                 printed):
    """A waiter LISTENs: no query while nothing happens (not even its own commits
    wake it), and the commit it waits for wakes it at once."""
    waiter, conn = waiting(pg, waiter)
    first = backends(waiter.pid, pg, conn)
    time.sleep(1.5)                                         # (nothing happens meanwhile)
    assert backends(waiter.pid, pg, conn) == first          # no query for 1.5 s: it LISTENs
    sent = time.monotonic()
    assert agent(*wake).code == 0
    out, err = waiter.communicate(timeout=PATIENCE)
    assert waiter.returncode == code and out.endswith(printed), (out, err)
    # woken by the commit, not by its timeout (on a quiet machine, within 0.1 s)
    assert time.monotonic() - sent < 10


def test_a_held_write_lock_is_75_after_the_busy_timeout(pg, monkeypatch):
    from .conftest import write_locked
    fork("-n", "a")
    monkeypatch.setenv("AGENTCTL_BUSY_TIMEOUT", "0.3")
    with write_locked(pg):
        started = time.monotonic()
        result = agent("send", "a", "hi")
        took = time.monotonic() - started
    assert result.code == 75 and result.err == (f"agent-send: {pg}: database is locked "
                                                "(gave up after 0.3s)\n")
    assert 0.25 < took < 20                                 # it gave up, not waited on
    assert agent("mail", "-c", "a").out == "0\n"         # nothing half-written


def test_nul_in_text_is_stored_as_a_replacement_character(pg):
    fork("-n", "a")
    assert agent("send", "a", "-", stdin=b"one\0two").code == 0
    assert agent("mail", "-r", "a").out.endswith("---\none\ufffdtwo\n")


def test_hosts_running_all_at_once_run_each_agent_once(pg):
    """Four hosts' agent-run --all at once over 24 agents with input: each agent's
    turn runs once, whoever claims it."""
    for i in range(24):
        fork("-n", f"a{i}", "-m", "echo", f"task {i}")
    procs = [subprocess.Popen([sys.executable, os.path.join(BIN, "agent-run"), "--all", "-j", "2"],
                              env=dict(os.environ, AGENTCTL_HOST=f"host{h}"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for h in range(4)]
    codes = [p.wait(timeout=600) for p in procs]
    assert all(code in (0, 1, 75) for code in codes), [p.stderr.read() for p in procs]
    conn = connect(pg)
    turns = conn.execute("SELECT a.name, count(t.id) FROM agents a LEFT JOIN turns t "
                         "ON t.agent_id = a.id WHERE a.role != 'kernel' GROUP BY a.name").fetchall()
    assert sorted(n for _, n in turns) == [1] * 24, turns


# -- agent-db copy -----------------------------------------------------------------------------

HISTORY = """
set -e
lead=$(agent-fork -n lead -m echo -s "You lead." "plan the work")
agent-run lead >/dev/null
w1=$(agent-fork -p lead -n w1 -m echo "part one")
w2=$(agent-fork -p lead -n w2 -m echo --budget 5000 "part two")
agent-send w1 "more for w1" >/dev/null
agent-send --in 1h w2 "tomorrow" >/dev/null
agent-run --all -j 2 >/dev/null
agent-kill -s HUP w1
agent-send w1 "after the clear" >/dev/null
agent-run w1 >/dev/null
echo "notes v1" | agent-doc put notes
echo "notes v2" | agent-doc put notes
agent-kill w2
agent-fork -p w1 -n leaf "a leaf" >/dev/null
"""


def snapshot(env):
    """What the programs show of a database: every agent's replay, the event log,
    the documents, every mailbox."""
    shown = shell("for a in $(agent-ps -a -q); do agent-replay --format jsonl $a; "
                  "agent-mail -a --format tsv -o id,from,read,subject $a; done; "
                  "agent-log --format jsonl; agent-doc log notes; agent-doc get notes; "
                  "agent-ps -a -o id,name,parent,stat,exit_code,signal,msgs,mail,budget,spent", env=env)
    assert shown.code == 0 and shown.err == "", shown.err
    return shown.out


def test_copy_into_postgresql_and_back_keeps_every_replay(tmp_path, empty):
    lite = str(tmp_path / "lite.db")
    made = shell(HISTORY, env={"AGENTCTL_DB": lite})
    assert made.code == 0, made.err
    before = snapshot({"AGENTCTL_DB": lite})
    copied = shell(f"agent-db copy {lite} '{empty}'")
    assert copied.code == 0, copied.err
    assert copied.out.startswith("agents=5 messages=")
    assert snapshot({"AGENTCTL_DB": empty}) == before
    back = str(tmp_path / "back.db")
    assert shell(f"agent-db copy '{empty}' {back}").code == 0
    assert snapshot({"AGENTCTL_DB": back}) == before
    # history goes on where it stopped: new ids follow the copied ones
    copied_mail = connect(lite).execute("SELECT max(id) FROM mail").fetchone()[0]
    more = shell("agent-send lead next", env={"AGENTCTL_DB": empty})
    assert more.code == 0 and more.out == f"{copied_mail + 1}\n", more


def test_copy_refuses_a_destination_that_holds_anything(tmp_path, pg):
    lite = str(tmp_path / "lite.db")
    fork("--db", lite, "-n", "a")
    fork("-n", "mine")
    result = agent("db", "copy", lite, pg)
    assert result.code == 2 and "holds agents or history already" in result.err
    assert one_line(result)
    assert agent("ps", "-q").out.count("\n") == 2        # init and mine, nothing more
    assert agent("db", "copy", str(tmp_path / "missing.db"), pg).code == 1
    assert not os.path.exists(tmp_path / "missing.db")


def test_agent_db_check_says_it_reads_sqlite_files(pg):
    result = agent("db", "check")
    assert result.code == 2 and "agent-db check reads a SQLite file" in result.err


def test_a_url_is_never_taken_for_a_file_name(pg, tmp_path):
    """Nothing is created in the working directory (SQLite would make a file of a name)."""
    result = shell(f"cd {tmp_path} && agent-fork -n a >/dev/null && agent-ps -q && ls -A")
    assert result.code == 0 and len(result.out.split()) == 2, result


# -- many hosts, and kill -9 ---------------------------------------------------------------------

KILLS = int(os.environ.get("AGENTCTL_SOAK_KILLS", "12"))     # make soak: 60
HOST_LOOP = ("until [ -e stop ]; do agent-run --all -j 2 >/dev/null 2>>errors.$AGENTCTL_HOST; "
             "echo $? >> codes.$AGENTCTL_HOST; done")


def test_four_hosts_killed_at_random_run_every_turn_once_and_lose_nothing(pg, tmp_path):
    """Four hosts (AGENTCTL_HOST) run agent-run --all loops against one server while
    mail arrives and kill -9 hits their agent-run processes (the --all dispatchers and
    the runs of one turn they start): afterwards every mail was
    read in exactly one turn, every turn ended once with one reply, none is left open."""
    import random
    import signal
    agents = [f"h{i}" for i in range(8)]
    for name in agents:
        fork("-n", name, "-m", "echo")
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"], AGENTCTL_LEASE="1")
    loops = [subprocess.Popen(["bash", "-c", HOST_LOOP], cwd=tmp_path, start_new_session=True,
                              env=dict(env, AGENTCTL_HOST=f"host{h}")) for h in range(4)]
    rng = random.Random(20)
    sent, kills = [], 0
    try:
        while kills < KILLS:
            for _ in range(3):
                body = f"mail {len(sent)}"
                assert agent("send", rng.choice(agents), body).code == 0
                sent.append(body)
            time.sleep(rng.uniform(0.02, 0.15))
            runs = [int(pid) for loop in loops for pid in subprocess.run(
                ["pgrep", "-s", str(loop.pid), "-f", "agent-run|agentctl.cli.run"],
                capture_output=True,
                text=True).stdout.split() if int(pid) != loop.pid]
            if runs:
                try:
                    os.kill(rng.choice(runs), signal.SIGKILL)
                    kills += 1
                except ProcessLookupError:
                    pass
    finally:
        (tmp_path / "stop").touch()
        for loop in loops:
            loop.wait(timeout=600)
    errors = "".join((tmp_path / f"errors.host{h}").read_text() for h in range(4)
                     if (tmp_path / f"errors.host{h}").exists())
    assert "internal error" not in errors and "Traceback" not in errors, errors
    conn = connect(pg)

    def drained():          # the killed runs' leases expire (1 s): drain, as cron would
        left = conn.execute("SELECT (SELECT count(*) FROM mail WHERE read_at IS NULL) + "
                            "(SELECT count(*) FROM turns WHERE status = 'running')").fetchone()[0]
        if left:
            shell("agent-run --all -j 4", env={"AGENTCTL_LEASE": "1"})
        return not left
    wait_until(drained, "every mail read and every turn ended", timeout=300)
    stored = [r[0] for r in conn.execute("SELECT body FROM mail WHERE sender_id IS NULL")]
    assert sorted(stored) == sorted(sent)                        # every mail, once
    assert conn.execute("SELECT count(*) FROM mail WHERE read_turn IS NULL").fetchone()[0] == 0
    inboxes = "\n".join(r[0] for r in conn.execute(
        "SELECT content FROM messages WHERE kind = 'user' AND void = 0 AND turn_id IS NOT NULL"))
    assert [inboxes.count(f"   {body}\n") for body in sent] == [1] * len(sent)
    turns = conn.execute("SELECT t.id, t.status, (SELECT count(*) FROM messages m WHERE "
                         "m.turn_id = t.id AND m.kind = 'assistant' AND m.void = 0) FROM turns t"
                         ).fetchall()
    assert {t[1] for t in turns} == {"done"}                       # none left open
    assert {t[2] for t in turns} == {1}                            # one reply each: none twice
    assert kills >= KILLS
    codes = [int(c) for h in range(4) if (tmp_path / f"codes.host{h}").exists()
             for c in (tmp_path / f"codes.host{h}").read_text().split()]
    print(f"\nfour hosts: {len(sent)} mails read in {len(turns)} turns, each once; "
          f"{kills} agent-run processes killed; {len(codes)} agent-run --all passes "
          f"ended {dict(sorted((c, codes.count(c)) for c in set(codes)))}")


def test_eight_runs_of_one_agent_at_once_make_one_turn(pg):
    """The claim is one check-and-set among writers that take turns: of eight
    agent-run at once (from four hosts), one runs the turn."""
    fork("-n", "a", "-m", "echo", "once")
    procs = [subprocess.Popen([sys.executable, os.path.join(BIN, "agent-run"), "a"],
                              env=dict(os.environ, AGENTCTL_HOST=f"host{n % 4}"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in range(8)]
    codes = sorted(p.wait(timeout=600) for p in procs)
    assert codes[0] == 0 and codes.count(0) == 1 and set(codes[1:]) <= {1, 75}, \
        [(p.returncode, p.stderr.read()) for p in procs]
    conn = connect(pg)
    assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM messages WHERE kind = 'assistant'"
                        ).fetchone()[0] == 1


def test_a_server_that_goes_away_is_one_line_and_75(pg):
    """A waiter whose connection the server ends (a restart, an administrator) says so
    in one line and exits 75: try again later."""
    waiter, conn = waiting(pg, ["agent-mail", "--wait", "90", "-r", "box"])
    conn.execute(f"SELECT pg_terminate_backend(pid) FROM ({ACTIVITY}) AS waiting")
    out, err = waiter.communicate(timeout=PATIENCE)
    assert (waiter.returncode, out) == (75, ""), err
    assert err.startswith("agent-mail: ") and "the database server can't be reached" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_every_rewrite_meets_the_sql_it_was_written_for():
    """pg.REWRITES names SQLite spellings of the storage layer: one that no longer
    appears there (its SQL was changed) is said here, not at run time."""
    from agentctl.store import pg
    store = os.path.join(ROOT, "agentctl", "store")
    sources = "".join(open(os.path.join(store, name), encoding="utf-8").read()
                      for name in os.listdir(store)
                      if name.endswith(".py") and name != "pg.py")
    missing = [old for old, _ in pg.REWRITES if old not in sources]
    assert not missing
