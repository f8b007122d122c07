"""The database: where it lives, how it is opened, migrated and refused."""

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from agentctl import clock
from agentctl.ids import INIT_ID
from agentctl.store import db, mailbox, migrations, waits
from agentctl.errors import DatabaseFault

from .conftest import ROOT, agent, mode, write_locked


def test_path_from_flag_env_then_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTCTL_DB", "/from/env.db")
    assert db.resolve_path("/from/flag.db") == "/from/flag.db"
    assert db.resolve_path() == "/from/env.db"
    monkeypatch.delenv("AGENTCTL_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert db.resolve_path() == str(tmp_path / "data" / "agentctl" / "agents.db")
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert db.resolve_path() == str(tmp_path / ".local/share/agentctl/agents.db")


def test_created_private_with_wal_and_shm_private_too(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTCTL_DB")
    result = agent("fork", "-n", "a")
    assert result.code == 0
    path = tmp_path / "xdg" / "agentctl" / "agents.db"
    assert mode(path.parent) == 0o700 and mode(path) == 0o600
    conn = db.connect(str(path))
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO events (agent_id, kind, created_at) VALUES ('AAAAAAAAAAAAAAAAAAAAAA', 'x', 0)")
    conn.execute("COMMIT")
    for suffix in ("-wal", "-shm"):
        assert mode(str(path) + suffix) == 0o600
    conn.close()


def test_db_flag_wins(tmp_path, home):
    other = tmp_path / "other.db"
    assert agent("fork", "--db", other, "-n", "x").code == 0
    assert agent("ps", "--db", other, "-q").lines[1:] != []
    if str(home).startswith("postgresql://"):   # a database that exists, its tables made
        assert agent("ps", "-q").lines == ["AAAAAAAAAAAAAAAAAAAAAA"]
    else:                                       # no file: a reader makes none
        assert agent("ps", "-q").code == 2 and not home.exists()     # (named: a typo)


@pytest.mark.sqlite_only
def test_pragmas(conn):
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30000


@pytest.mark.sqlite_only
def test_migrations_named_recorded_and_counted(conn):
    names = [r[0] for r in conn.execute(
        "SELECT name FROM _sqlite_migrations WHERE migration_set = 'agentctl' ORDER BY id")]
    assert names == [m.name for m in migrations.MIGRATIONS._migrations]
    assert migrations.count() == db.SCHEMA_VERSION
    assert conn.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION
    assert [tuple(r) for r in conn.execute("SELECT name, role FROM agents")] == [("init", "kernel")]


def test_up_to_date_open_does_not_import_sqlite_utils(home):
    db.connect(str(home)).close()
    code = ("import sys; from agentctl.store.db import connect; connect(sys.argv[1]); "
            "print('sqlite_utils' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(home)], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.stdout == "False\n", out.stderr


@pytest.mark.sqlite_only
def test_newer_schema_is_refused(home):
    db.connect(str(home)).close()
    raw = sqlite3.connect(home)
    raw.execute(f"PRAGMA user_version = {db.SCHEMA_VERSION + 1}")
    raw.close()
    result = agent("ps")
    assert result.code == 74
    assert result.err == (f"agent-ps: {home}: written by a newer agentctl (schema "
                          f"{db.SCHEMA_VERSION + 1}, this one knows {db.SCHEMA_VERSION}); "
                          "upgrade agentctl\n")


@pytest.mark.sqlite_only
def test_not_a_database(home):
    home.write_bytes(b"this is not sqlite, just some text\n" * 200)
    result = agent("ps")
    assert result.code == 74
    assert result.err.startswith(f"agent-ps: {home}: not an agentctl database")
    assert result.err.count("\n") == 1
    assert home.read_bytes().startswith(b"this is not sqlite")


def test_a_database_of_the_schema_before_is_migrated_on_open(tmp_path):
    """A migration once released is never edited: a database made before
    0005_turn_timer gets it when a program next opens it."""
    path = str(tmp_path / "agents.db")
    conn = db.connect(path)
    conn.execute("ALTER TABLE turns DROP COLUMN woke_at")
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = '0005_turn_timer'")
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()
    result = agent("fork", "--db", path, "-n", "a", "-m", "echo", "hi")
    assert result.code == 0, result.err
    assert agent("run", "--db", path, "a").code == 0
    conn = db.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION \
        == migrations.count()
    assert [tuple(r) for r in conn.execute("SELECT woke_at FROM turns")] == [(None,)]


def test_a_database_of_schema_5_gets_each_agents_depth(tmp_path):
    """0006_lifecycle counts every agent's forks from the root along forked_from."""
    path = str(tmp_path / "agents.db")
    conn = db.connect(path)
    assert agent("fork", "--db", path, "-n", "a").code == 0
    assert agent("fork", "--db", path, "-p", "a", "-n", "b").code == 0
    assert agent("fork", "--db", path, "-p", "b", "-n", "c").code == 0
    for index in ("agents_kill_at", "agents_zombies", "agents_idle"):
        conn.execute(f"DROP INDEX {index}")
    for column in ("restart", "max_restarts", "restart_window", "restarts", "window_start",
                   "window_restarts", "reap_after", "idle_exit", "max_children", "depth",
                   "kill_at", "last_failure"):
        conn.execute(f"ALTER TABLE agents DROP COLUMN {column}")
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = '0006_lifecycle'")
    conn.execute("PRAGMA user_version = 6")
    conn.commit()
    conn.close()
    assert agent("ps", "--db", path).code == 0
    conn = db.connect(path)
    assert dict(conn.execute("SELECT name, depth FROM agents").fetchall()) == \
        {"init": 0, "a": 1, "b": 2, "c": 3}


def test_directory_that_cant_be_made(tmp_path, monkeypatch):
    """Only the default location's directories are made: an explicit --db in a directory
    that does not exist is a typo (2, a reader's too: no database)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = agent("fork", "--db", blocker / "sub" / "agents.db")
    assert (result.code, result.err) == (2, f"agent-fork: {blocker}/sub/agents.db: no such "
                                            f"directory: {blocker}/sub (only the default "
                                            "database's directories are made)\n")
    assert agent("ps", "--db", blocker / "sub" / "agents.db").code == 2
    monkeypatch.delenv("AGENTCTL_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocker / "sub"))
    result = agent("fork")
    assert result.code == 74
    assert result.err == (f"agent-fork: {blocker}/sub/agentctl/agents.db: can't create the "
                          "database: Not a directory\n")


def test_locked_longer_than_busy_timeout_is_tempfail(home, monkeypatch):
    db.connect(str(home)).close()
    monkeypatch.setenv("AGENTCTL_BUSY_TIMEOUT", "0.2")
    with write_locked(home):
        result = agent("fork", "-n", "x")
    assert result.code == 75
    assert result.err == f"agent-fork: {home}: database is locked (gave up after 0.2s)\n"
    assert agent("ps", "-q").lines == ["AAAAAAAAAAAAAAAAAAAAAA"]


@pytest.mark.sqlite_only
def test_first_open_by_many_processes_at_once(tmp_path):
    """Two processes switching a new database to WAL at once deadlock, and
    SQLite answers one of them "locked" without waiting: about one round in
    eight failed so, before the switch learnt to wait. Ten rounds of eight.
    (A first open between another's two looks: the test below.)"""
    code = "import sys; from agentctl.store.db import connect; connect(sys.argv[1]).close()"
    for round in range(10):
        path = tmp_path / f"agents{round}.db"
        procs = [subprocess.Popen([sys.executable, "-c", code, str(path)], cwd=ROOT,
                                  stderr=subprocess.PIPE, text=True) for _ in range(8)]
        # each child that failed, whole (a list's repr is cut after six items: a seventh
        # child's failure read as an exit 1 with nothing on stderr)
        failed = [f"child {i}: exit {p.wait()}: {p.stderr.read()}"
                  for i, p in enumerate(procs) if p.wait() != 0]
        assert not failed, "\n".join(failed)
        conn = db.connect(str(path))
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT count(*) FROM agents").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM _sqlite_migrations").fetchone()[0] \
            == db.SCHEMA_VERSION
        conn.close()


@pytest.mark.sqlite_only
def test_a_schema_committed_between_the_two_looks_is_not_foreign(tmp_path, monkeypatch):
    """A first open that reads no schema version, then lists the tables another first
    open has just committed, takes the file as agentctl's: it is. (It was refused as
    another program's, agent-fork's exit 74: a child of the test above exited 1 so, now
    and then under load.)"""
    path = str(tmp_path / "agents.db")
    real, first = db.tables, []

    def tables(conn):
        if not first:
            first.append(True)
            db.connect(path).close()        # another first open makes the schema now
        return real(conn)
    monkeypatch.setattr(db, "tables", tables)
    conn = db.connect(path)
    assert first and conn.execute("SELECT count(*) FROM agents").fetchone()[0] == 1
    conn.close()


def test_a_foreign_database_is_refused_before_anything_is_written(tmp_path):
    import sqlite3
    for tables in (["CREATE TABLE notes (body TEXT)"],
                   ["CREATE TABLE agents (x)", "CREATE TABLE mine (y)"]):
        path = tmp_path / f"foreign{len(tables)}.db"
        other = sqlite3.connect(path)
        for sql in tables:
            other.execute(sql)
        other.commit()
        other.close()
        before = path.read_bytes()
        result = agent("ps", "--db", path)
        assert result.code == 74
        assert result.err.startswith(f"agent-ps: {path}: not an agentctl database (it has "
                                     "tables of its own: ")
        assert path.read_bytes() == before           # not even its journal mode
        assert not os.path.exists(f"{path}-wal")


def test_an_empty_file_is_made_an_agentctl_database(tmp_path):
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    assert agent("fork", "--db", path, "-n", "a").code == 0


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "soon"])
def test_a_busy_timeout_that_is_no_finite_number_is_a_usage_error(home, monkeypatch, value):
    monkeypatch.setenv("AGENTCTL_BUSY_TIMEOUT", value)
    result = agent("ps")
    assert (result.code, result.err) == (
        2, f"agent-ps: AGENTCTL_BUSY_TIMEOUT must be a number >= 0, not {value!r}\n")


@pytest.mark.sqlite_only
def test_a_full_disk_is_said_and_is_temporary_with_nothing_half_written(home, monkeypatch):
    """SQLite's own limit stands in for a full disk: the write that meets it is
    rolled back whole, and the program says the disk is full (75, try again)."""
    assert agent("fork", "-n", "a").code == 0
    real = db.connect

    def small(path=None, create=True):
        conn = real(path, create)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 1}")
        return conn
    monkeypatch.setattr(db, "connect", small)
    lines = "".join(json.dumps({"to": "a", "body": "x" * 5000}) + "\n" for _ in range(50))
    result = agent("send", "--jsonl", stdin=lines)
    assert (result.code, result.err) == (
        75, f"agent-send: {home}: the disk is full: nothing was written; free some space and try "
            "again\n")
    monkeypatch.setattr(db, "connect", real)
    conn = db.connect(str(home))
    assert conn.execute("SELECT count(*) FROM mail").fetchone()[0] == 0


def test_a_db_path_that_is_not_utf8_is_used_as_given(tmp_path):
    """--db with bytes that are not UTF-8 opens exactly that file (it was mangled into
    U+FFFD), for the heartbeat's own connection too."""
    path = os.fsencode(tmp_path) + b"/caf\xe9.db"
    for args in ([b"fork", b"--db", path, b"-n", b"a", b"-m", b"echo", b"hi"],
                 [b"run", b"--db=" + path, b"a"], [b"ps", b"--db", path, b"-o", b"name"]):
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "bin",
                                                            "agent-" + args[0].decode())]
                              + args[1:], capture_output=True, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [b"NAME", b"init", b"a"]
    assert [n for n in os.listdir(os.fsencode(tmp_path))
            if not n.endswith((b"-wal", b"-shm"))] == [b"caf\xe9.db"]     # no other file


def test_a_database_path_that_is_no_file_name_is_a_usage_error():
    """A lone surrogate (no byte of a file name gives one) crashed opening the file
    (found by the fuzzer)."""
    from .conftest import agent
    result = agent("answer", "--db", "x\ud800")
    assert (result.code, result.err) == (2, "agent-answer: bad database path: it is no file "
                                            "name\n")


def test_one_loop_waits_for_another_connections_commit(home, conn):
    """store.waits.commits, the loop under agent-mail -w, agent-wait, agent-log -f, agent-top
    and a model call's gate: once at once, then at each commit of another connection
    (not its own), until its deadline, or a pause that says to stop; again at a time
    next_due() names though nothing was committed."""
    other = db.connect(str(home))
    try:
        paused, stop = [], [None]

        def pause(seconds):
            paused.append(seconds)
            if len(paused) == 3:
                with db.transaction(other):
                    mailbox.insert(other, None, INIT_ID, "from another connection")
            return len(paused) == stop[0]

        looks = waits.commits(conn, pause=pause, most=0.01)
        assert next(looks) is None and paused == []
        with db.transaction(conn):
            mailbox.insert(conn, None, INIT_ID, "its own")
        assert next(looks) is None and len(paused) >= 3     # the other's, not its own
        stop[0] = len(paused) + 3       # (PostgreSQL's NOTIFY may come a look later)
        assert next(looks, "stopped") == "stopped" and len(paused) == stop[0]
        assert list(waits.commits(conn, time.monotonic() + 0.05)) == [None]    # the deadline
        due = waits.commits(conn, time.monotonic() + 600, next_due=lambda: clock.now() + 0.05)
        assert [next(due), next(due)] == [None, None]       # nothing committed: a time due
        assert waits.wait_for_commit(conn, time.monotonic() + 0.05, lambda: False) is False
    finally:
        other.close()
