"""PostgreSQL itself (agentctl(5), BACKENDS): what only that backend has, on a real
server the fixture starts. (The rest of the suite runs on it too: make test's
second pass, pytest --backend postgresql.) And what needs no server: no SQL of
SQLite's own outside its places, the two schemas as written alike."""

import ast
import ctypes
import json
import os
import re
import subprocess
import sys
import time

import pytest

from agentctl import clock
from agentctl.store import pgschema
from agentctl.store.db import SCHEMA_VERSION, connect, transaction

from .conftest import (BIN, PATIENCE, ROOT, agent, asleep_at_database, backends, fork,
                       postgresql_database, postgresql_server, shell, wait_until)


@pytest.fixture
def pg(monkeypatch, request):
    """A new database on the worker's server, agentctl's schema in it; AGENTCTL_DB."""
    url = postgresql_database(request)
    monkeypatch.setenv("AGENTCTL_DB", url)
    return url


@pytest.fixture
def empty(request):
    """A new database with no tables at all."""
    return postgresql_database(request, empty=True)


def one_line(result):
    return result.err.count("\n") == 1 and "Traceback" not in result.err


def test_without_libpq_the_error_names_the_extra(monkeypatch):
    from agentctl.store import libpq
    monkeypatch.setattr(libpq, "NAMES", ("libpq-none.so.5",))      # no system libpq
    monkeypatch.setattr(libpq, "_bundled", lambda: None)            # nor psycopg's
    monkeypatch.setattr(libpq, "_lib", None)
    monkeypatch.setenv("AGENTCTL_DB", "postgresql://me:s3cret@127.0.0.1:9/agents")
    result = agent("ps")
    assert (result.code, result.err) == (74, (
        "agent-ps: postgresql://me@127.0.0.1:9/agents: PostgreSQL needs libpq, which is not "
        "installed: the system's (Debian: libpq5), or from agentctl's checkout, make install "
        "EXTRAS=postgres (or pip install '.[postgres]')\n"))


def test_the_libpq_psycopg_bundles_is_found():
    from agentctl.store import libpq
    found = libpq._bundled()
    assert found and os.path.basename(found).startswith("libpq")
    ctypes.CDLL(found).PQlibVersion()


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


def test_a_schema_committed_between_the_two_looks_is_not_foreign(empty, monkeypatch):
    """A first program that sees no schema, then another's tables (it committed between
    the two looks), takes the database as agentctl's: it is (seen once under load)."""
    from agentctl.store import pg
    real, first = pg.tables, []

    def tables(conn):
        if not first:
            first.append(True)
            connect(empty).close()          # another first program makes the schema now
        return real(conn)
    monkeypatch.setattr(pg, "tables", tables)
    conn = connect(empty)
    assert first and conn.execute("SELECT count(*) FROM agents").fetchone()[0] == 1
    conn.close()


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


# -- the two schemas --------------------------------------------------------------------------
# Each schema read into one form: {part: {key: value}}, PostgreSQL's types in SQLite's
# words. Read from a SQLite file the migrations made, from pgschema.py's statements as
# written (no server needed), and from a server's catalogs.

# SQLite's type of a column, and PostgreSQL's for it (pgschema.py says why: 64-bit
# integers, times as double precision, text compared byte by byte)
TYPES = {"INTEGER": "bigint", "REAL": "double precision", "TEXT": 'text collate "c"'}
_PG_TYPES = {pg: lite for lite, pg in TYPES.items()}
PARTS = ("columns", "primary keys", "unique", "indexes", "references", "sequenced")


def _schema():
    return {part: {} for part in PARTS}


def _pg_type(words):
    words = " ".join(words.lower().split())
    return _PG_TYPES.get(words, f"(PostgreSQL's {words})")


def _default(text):
    """A default as written, without PostgreSQL's cast ('S'::text: 'S')."""
    return None if text is None else re.sub(r"::[a-z ]+$", "", text.strip())


def _columns(text):
    return tuple(c.strip().strip('"') for c in text.split(","))


def _words(text):
    return " ".join(text.split())


def sqlite_schema(conn):
    """The schema of a SQLite file (a primary key's column counted NOT NULL, as it is
    on PostgreSQL: agentctl writes no NULL id)."""
    schema = _schema()
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                         "AND name NOT LIKE '%sqlite%'")]
    for table in tables:
        info = conn.execute(f"PRAGMA table_info({table})").fetchall()
        key = tuple(r["name"] for r in sorted(info, key=lambda r: r["pk"]) if r["pk"])
        for r in info:
            schema["columns"][table, r["name"]] = (
                r["type"].upper(), bool(r["notnull"] or r["pk"]), _default(r["dflt_value"]))
        schema["primary keys"][table] = key
        if len(key) == 1 and schema["columns"][table, key[0]][0] == "INTEGER":
            schema["sequenced"][table] = key[0]      # INTEGER PRIMARY KEY: the rowid
        for r in conn.execute(f"PRAGMA foreign_key_list({table})"):
            schema["references"][table, r["from"]] = (r["table"], r["to"])
        for index in conn.execute(f"PRAGMA index_list({table})").fetchall():
            columns = tuple(r["name"] for r in conn.execute(f"PRAGMA index_info({index['name']})"))
            if index["origin"] == "u":
                schema["unique"][table, columns] = True
            elif index["origin"] == "c":
                sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?",
                                   (index["name"],)).fetchone()[0]
                where = re.search(r"\bWHERE\b(.*)$", sql, re.S)
                schema["indexes"][index["name"]] = (table, columns, bool(index["unique"]),
                                                    where and _words(where.group(1)))
    return schema


_CONSTRAINTS = {"NOT", "NULL", "DEFAULT", "REFERENCES", "PRIMARY", "GENERATED", "UNIQUE",
                "CHECK"}


def _ddl_column(schema, table, item):
    name, *rest = item.split()
    assert name.upper() not in _CONSTRAINTS | {"CONSTRAINT", "FOREIGN", "EXCLUDE"}, \
        f"pgschema: a constraint this test can't read yet: {item}"
    n = next((i for i, w in enumerate(rest) if w.upper() in _CONSTRAINTS), len(rest))
    type_, constraints = " ".join(rest[:n]), " ".join(rest[n:])
    default = re.search(r"(?<!BY )\bDEFAULT ('(?:[^']|'')*'|\S+)", constraints)
    key = "PRIMARY KEY" in constraints
    schema["columns"][table, name] = (_pg_type(type_), "NOT NULL" in constraints or key,
                                      default and _default(default.group(1)))
    if key:
        schema["primary keys"][table] = (name,)
    if "GENERATED BY DEFAULT AS IDENTITY" in constraints:
        schema["sequenced"][table] = name
    reference = re.search(r"\bREFERENCES (\w+)\s*\((\w+)\)", constraints)
    if reference:
        schema["references"][table, name] = reference.groups()


def _split(body):
    """A CREATE TABLE's items: split at the commas outside parentheses."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(body):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if c == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
    return items + [body[start:].strip()]


def ddl_schema(statements):
    """The schema pgschema's statements make (each statement one this reader knows)."""
    schema = _schema()
    for statement in statements:
        text = _words(statement)
        if not text:
            continue
        if m := re.fullmatch(r"CREATE TABLE (\w+) \((.*)\)", text):
            table, body = m.groups()
            for item in _split(body):
                if u := re.fullmatch(r"UNIQUE \((.*)\)", item):
                    schema["unique"][table, _columns(u.group(1))] = True
                elif k := re.fullmatch(r"PRIMARY KEY \((.*)\)", item):
                    schema["primary keys"][table] = _columns(k.group(1))
                else:
                    _ddl_column(schema, table, item)
            schema["primary keys"].setdefault(table, ())
        elif m := re.fullmatch(r"CREATE (UNIQUE )?INDEX (\w+) ON (\w+) ?\(([^)]*)\)"
                               r"(?: WHERE (.*))?", text):
            unique, name, table, columns, where = m.groups()
            schema["indexes"][name] = (table, _columns(columns), bool(unique), where)
        elif m := re.fullmatch(r"ALTER TABLE (\w+) ADD COLUMN (.*)", text):
            _ddl_column(schema, *m.groups())
        elif m := re.fullmatch(r"ALTER TABLE (\w+) ALTER COLUMN (\w+) TYPE (.*) USING .*", text):
            table, name, type_ = m.groups()
            _, not_null, default = schema["columns"][table, name]
            schema["columns"][table, name] = (_pg_type(type_), not_null, default)
        elif text.startswith("UPDATE "):
            continue        # (rows a migration sets, not the schema)
        else:
            raise AssertionError(f"pgschema: a statement this test can't read yet: {text[:60]}")
    return without_agentctl_schema(schema)


def server_schema(conn):
    """The schema of a PostgreSQL database, from its catalogs."""
    schema = _schema()
    for table, name, type_, collation, nullable, default, identity in conn.execute(
            "SELECT table_name, column_name, data_type, collation_name, is_nullable, "
            "column_default, is_identity FROM information_schema.columns "
            "WHERE table_schema = current_schema()"):
        type_ += f' collate "{collation.lower()}"' if collation else ""
        schema["columns"][table, name] = (_pg_type(type_), nullable == "NO", _default(default))
        schema["primary keys"].setdefault(table, ())
        if identity == "YES":
            schema["sequenced"][table] = name
    for table, definition in conn.execute(
            "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE connamespace = current_schema()::regnamespace"):
        if k := re.fullmatch(r"PRIMARY KEY \((.*)\)", definition):
            schema["primary keys"][table] = _columns(k.group(1))
        elif u := re.fullmatch(r"UNIQUE \((.*)\)", definition):
            schema["unique"][table, _columns(u.group(1))] = True
        elif f := re.fullmatch(r"FOREIGN KEY \((\w+)\) REFERENCES (\w+)\((\w+)\)", definition):
            schema["references"][table, f.group(1)] = (f.group(2), f.group(3))
        else:
            raise AssertionError(f"a constraint this test can't read yet: {definition}")
    for name, table, definition in conn.execute(
            "SELECT indexname, tablename, indexdef FROM pg_indexes "
            "WHERE schemaname = current_schema() AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint WHERE contype IN ('p', 'u'))"):
        m = re.fullmatch(r"CREATE (UNIQUE )?INDEX \S+ ON \S+ USING btree \((.*?)\)"
                         r"(?: WHERE (.*))?", definition)
        assert m, definition
        schema["indexes"][name] = (table, _columns(m.group(2)), bool(m.group(1)), m.group(3))
    return without_agentctl_schema(schema)


def without_agentctl_schema(schema):
    """The schema without PostgreSQL's table of its version (SQLite's: user_version)."""
    return {part: {k: v for k, v in entries.items()
                   if (k[0] if isinstance(k, tuple) else k) != "agentctl_schema"
                   and not (part == "indexes" and v[0] == "agentctl_schema")}
            for part, entries in schema.items()}


def partial_only(schema):
    """The schema with each index's condition as whether it has one (a server writes
    a condition in words of its own)."""
    return dict(schema, indexes={n: (*v[:3], v[3] is not None)
                                 for n, v in schema["indexes"].items()})


def differences(sqlite, postgresql):
    """Where the two schemas differ, a line each."""
    return [f"{part} {key}: SQLite {sqlite[part].get(key, 'none')}, "
            f"PostgreSQL {postgresql[part].get(key, 'none')}"
            for part in PARTS
            for key in sorted(set(sqlite[part]) | set(postgresql[part]), key=repr)
            if sqlite[part].get(key) != postgresql[part].get(key)]


def pgschema_statements(baseline=None):
    return (baseline or pgschema.BASELINE).split(";") + \
        [s for _, statements in pgschema.MIGRATIONS for s in statements]


@pytest.fixture(scope="module")
def lite(tmp_path_factory):
    """The schema of a SQLite file the migrations made."""
    conn = connect(str(tmp_path_factory.mktemp("lite") / "lite.db"))
    try:
        return sqlite_schema(conn)
    finally:
        conn.close()


def test_the_schemas_as_written_agree_type_for_type_and_index_for_index(lite):
    """pgschema.py's statements (read without a server) make SQLite's schema: each
    column with its type (TYPES), NOT NULL and default, the primary keys, the ids the
    database hands out, the unique constraints, the references, each index (name,
    table, columns, unique, condition); PostgreSQL's migrations end at SQLite's version."""
    assert pgschema.newest() == SCHEMA_VERSION
    assert set(lite["sequenced"]) == set(pgschema.SEQUENCED)
    assert {type_ for type_, _, _ in lite["columns"].values()} <= set(TYPES)
    assert differences(lite, ddl_schema(pgschema_statements())) == []


_T = pgschema._TEXT      # (as pgschema.BASELINE spells it)


@pytest.mark.parametrize("old, new, expected", [
    ("deliver_at   DOUBLE PRECISION", "deliver_at   BIGINT",
     "columns ('mail', 'deliver_at'): SQLite ('REAL', False, None), PostgreSQL ('INTEGER', "),
    (f"kind         {_T} NOT NULL DEFAULT 'mail'", "kind         TEXT NOT NULL DEFAULT 'mail'",
     "columns ('mail', 'kind'): SQLite ('TEXT', True, \"'mail'\"), PostgreSQL (\"(PostgreSQL's "
     "text)\""),
    (f"body         {_T} NOT NULL,", f"body         {_T},",
     "columns ('mail', 'body'): SQLite ('TEXT', True, None), PostgreSQL ('TEXT', False, None)"),
    (f"status        {_T} NOT NULL DEFAULT 'S'", f"status        {_T} NOT NULL DEFAULT 'R'",
     "columns ('agents', 'status'): SQLite ('TEXT', True, \"'S'\"), PostgreSQL ('TEXT', True, "
     "\"'R'\")"),
    ("CREATE INDEX mail_deferred ON mail(deliver_at) WHERE deliver_at IS NOT NULL AND read_at "
     "IS NULL;\n", "", "indexes mail_deferred: SQLite ('mail', ('deliver_at',), False, "),
    ("CREATE UNIQUE INDEX agents_name_taken", "CREATE INDEX agents_name_taken",
     "indexes agents_name_taken: SQLite ('agents', ('name',), True, \"status != 'X'\"), "
     "PostgreSQL ('agents', ('name',), False, "),
    ("turns_agent ON turns(agent_id, id)", "turns_agent ON turns(id, agent_id)",
     "indexes turns_agent: SQLite ('turns', ('agent_id', 'id'), False, None), PostgreSQL "
     "('turns', ('id', 'agent_id'), False, None)"),
    ("turns_open ON turns(agent_id) WHERE status = 'running'",
     "turns_open ON turns(agent_id) WHERE status = 'done'",
     "indexes turns_open: SQLite ('turns', ('agent_id',), False, \"status = 'running'\"), "
     "PostgreSQL ('turns', ('agent_id',), False, \"status = 'done'\")"),
    ("created_at DOUBLE PRECISION NOT NULL,\n    UNIQUE (name, version)\n",
     "created_at DOUBLE PRECISION NOT NULL\n",
     "unique ('documents', ('name', 'version')): SQLite True, PostgreSQL none"),
    (f"turn_id       BIGINT NOT NULL REFERENCES turns(id),\n    tool_call_id  {_T} NOT NULL,\n"
     "    tool ", f"turn_id       BIGINT NOT NULL,\n    tool_call_id  {_T} NOT NULL,\n    tool ",
     "references ('tool_runs', 'turn_id'): SQLite ('turns', 'id'), PostgreSQL none"),
    (f"CREATE TABLE messages (\n    id           {pgschema._ID}",
     "CREATE TABLE messages (\n    id           BIGINT PRIMARY KEY",
     "sequenced messages: SQLite id, PostgreSQL none"),
])
def test_the_comparison_as_written_finds_each_difference(lite, old, new, expected):
    """The comparison itself can fail: each change to pgschema's statements (a type, a
    collation, NOT NULL, a default, an index gone, not unique, its columns, its
    condition, a unique constraint, a reference, an id no longer handed out) is found,
    and nothing else."""
    assert old in pgschema.BASELINE, old
    found = differences(lite, ddl_schema(pgschema_statements(
        pgschema.BASELINE.replace(old, new, 1))))
    assert len(found) == 1 and found[0].startswith(expected), found


def test_the_schema_on_the_server_is_sqlite_s(pg, lite):
    """What the server made of pgschema's statements is SQLite's schema too (an
    index's condition compared as whether it has one: the server rewrites it)."""
    assert differences(partial_only(lite), partial_only(server_schema(connect(pg)))) == []


@pytest.mark.parametrize("change, expected", [
    ("ALTER TABLE mail ALTER COLUMN deliver_at TYPE bigint",
     "columns ('mail', 'deliver_at'): SQLite ('REAL', False, None), PostgreSQL ('INTEGER', "),
    ('ALTER TABLE mail ALTER COLUMN body TYPE text COLLATE "default"',
     "columns ('mail', 'body'): SQLite ('TEXT', True, None), PostgreSQL (\"(PostgreSQL's"),
    ("ALTER TABLE mail ALTER COLUMN body DROP NOT NULL",
     "columns ('mail', 'body'): SQLite ('TEXT', True, None), PostgreSQL ('TEXT', False, None)"),
    ("ALTER TABLE agents ALTER COLUMN status SET DEFAULT 'R'",
     "columns ('agents', 'status'): SQLite ('TEXT', True, \"'S'\"), PostgreSQL ('TEXT', True, "
     "\"'R'\")"),
    ("DROP INDEX mail_deferred", "indexes mail_deferred: SQLite ('mail', ('deliver_at',), False, "
                                 "True), PostgreSQL none"),
    ("DROP INDEX agents_name_taken; CREATE INDEX agents_name_taken ON agents(name) "
     "WHERE status != 'X'", "indexes agents_name_taken: SQLite ('agents', ('name',), True, True)"),
    ("ALTER TABLE documents DROP CONSTRAINT documents_name_version_key",
     "unique ('documents', ('name', 'version')): SQLite True, PostgreSQL none"),
    ("ALTER TABLE tool_runs DROP CONSTRAINT tool_runs_turn_id_fkey",
     "references ('tool_runs', 'turn_id'): SQLite ('turns', 'id'), PostgreSQL none"),
    ("ALTER TABLE messages ALTER COLUMN id DROP IDENTITY",
     "sequenced messages: SQLite id, PostgreSQL none"),
])
def test_the_comparison_on_the_server_finds_each_difference(pg, lite, change, expected):
    """The comparison with the server can fail: each change of the database's schema
    is found, and nothing else."""
    postgresql_server().sql(change, database=pg.rsplit("/", 1)[1])
    found = differences(partial_only(lite), partial_only(server_schema(connect(pg))))
    assert len(found) == 1 and found[0].startswith(expected), found


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



# -- SQL that is SQLite's own -----------------------------------------------------------------
# Where SQLite's SQL and PostgreSQL's differ, the storage layer writes the difference by
# name (store/dialect.py). These tests find SQLite's own spellings anywhere else, in the
# store's source and in the statements the programs run, without a PostgreSQL server.

# (a spelling, what it is): SQLite reads each as agentctl means it, PostgreSQL does not
SQLITE_ONLY = [(re.compile(pattern, re.I), what) for pattern, what in [
    (r"\bjulianday\s*\(|\b(strftime|datetime|unixepoch)\s*\(|\bdate\s*\(\s*'now'",
     "SQLite's time functions (sql.now)"),
    (r"\bGLOB\b", "GLOB (sql.glob)"),
    (r"\bAS\s+BLOB\b", "a cast to BLOB (sql.octet_length)"),
    (r"\bLIKE\b", "LIKE, which ignores ASCII case on SQLite only (sql.ilike)"),
    (r"\bWITH\s+RECURSIVE\s+\w+\s*\([^)]*\)\s*AS\s*\(\s*SELECT\s+\?",
     "a recursive CTE's first row of an untyped parameter (sql.text_param)"),
    (r"\bINSERT\s+OR\s+\w+|\bREPLACE\s+INTO\b", "INSERT OR ... / REPLACE INTO"),
    (r"\b(ifnull|iif|group_concat|instr|printf|total|typeof|zeroblob|randomblob|"
     r"last_insert_rowid|changes|total_changes|json_extract|json_each)\s*\(",
     "a function of SQLite's own"),
    (r"\bPRAGMA\b", "PRAGMA"),
    (r"\b(rowid|_rowid_)\b", "rowid"),
    (r"\bsqlite_\w+", "SQLite's own tables"),
    (r"\bAUTOINCREMENT\b", "AUTOINCREMENT"),
    (r"\bCOLLATE\s+(NOCASE|RTRIM|BINARY)\b", "a collation of SQLite's own"),
    (r"\bLIMIT\s+[^\s,()]+\s*,", "LIMIT offset, count"),
    (r"==", "== (PostgreSQL: =)"),
    (r"\bBEGIN\s+(DEFERRED|EXCLUSIVE|TRANSACTION)\b", "a BEGIN of SQLite's own"),
]]
_SCALAR = re.compile(r"\b(max|min)\s*\(", re.I)


def sqlite_only(text):
    """What in a statement's text (or a part of one) is SQLite's own SQL."""
    found = [what for pattern, what in SQLITE_ONLY if pattern.search(text)]
    for match in _SCALAR.finditer(text):     # max(a, b): greatest(a, b) on PostgreSQL
        depth, quoted = 1, False
        for c in text[match.end():]:
            if c == "'":
                quoted = not quoted
            elif quoted:
                continue
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            elif c == "," and depth == 1:
                found.append(f"{match.group(1)}() of two values (sql.greatest)")
                break
    return found


# Where SQLite's own SQL belongs, by module and the functions or classes in it ("": all):
# SQLite's dialect, the SQLite migrations, agent-db check (it reads SQLite files only),
# and what db.py does to a SQLite file alone.
SQLITE_PLACES = {
    "agentctl.store.dialect": ("SQLite",),
    "agentctl.store.migrations": ("",),
    "agentctl.store.migrate_early": ("",),
    "agentctl.store.migrate_late": ("",),
    "agentctl.store.check": ("",),
    "agentctl.store.db": ("connect", "_version", "tables", "_migrate", "_use_wal", "quick_check",
                          "path_of"),
    "agentctl.store.waits": ("data_version",),
}


def sqlite_s_place(module, scope):
    return any(place == "" or scope == place or scope.startswith(place + ".")
               for place in SQLITE_PLACES.get(module, ()))


def store_sources():
    store = os.path.join(ROOT, "agentctl", "store")
    return {f"agentctl.store.{name[:-3]}": open(os.path.join(store, name), encoding="utf-8").read()
            for name in sorted(os.listdir(store)) if name.endswith(".py")}


def literals(source):
    """(scope, line, text) of each string in `source` but docstrings (an f-string's text
    with {} for its values); scope: the function or class it stands in, qualified."""
    found, docstrings = [], set()

    def visit(node, scope):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant):
            docstrings.add(id(body[0].value))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = f"{scope}.{node.name}" if scope else node.name
        if isinstance(node, ast.JoinedStr):
            found.append((scope, node.lineno, "".join(
                v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)))
            for value in node.values:       # the expressions inside, strings of their own
                if isinstance(value, ast.FormattedValue):
                    visit(value.value, scope)
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                id(node) not in docstrings:
            found.append((scope, node.lineno, node.value))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(ast.parse(source), "")
    return found


def sqlite_sql_in(modules):
    """SQLite's own SQL in the modules' strings, outside the places it belongs."""
    return [f"{module}:{line} ({scope or 'module'}): {what}: {text.strip()[:80]}"
            for module, source in modules.items()
            for scope, line, text in literals(source)
            if not sqlite_s_place(module, scope)
            for what in sqlite_only(text)]


def test_the_store_writes_sqlite_s_own_sql_only_in_sqlite_s_places():
    """Every string of the storage layer is SQL both backends read alike, but in
    SQLite's dialect and the code only a SQLite file reaches (no server needed)."""
    assert sqlite_sql_in(store_sources()) == []


@pytest.mark.parametrize("module, planted, expected", [
    ("registry", "def f(conn):\n    return conn.execute(\"SELECT id FROM agents WHERE "
                 "created_at < julianday('now')\")", "SQLite's time functions (sql.now)"),
    ("documents", "def f(conn, p):\n    return conn.execute(f\"SELECT {_row(conn)} FROM documents "
                  "WHERE name GLOB ?\", (p,))", "GLOB (sql.glob)"),
    ("documents", "SIZE = 'length(CAST(body AS BLOB))'", "a cast to BLOB (sql.octet_length)"),
    ("registry", "def f(conn):\n    return conn.execute(\"SELECT id FROM agents WHERE \"\n"
                 "        \"max(created_at, coalesce(wake_at, 0)) > ?\", (1,))",
     "max() of two values (sql.greatest)"),
    ("registry", "Q = '''WITH RECURSIVE up(id, n) AS (\n    SELECT ?, 0 UNION ALL SELECT 1)'''",
     "a recursive CTE's first row of an untyped parameter (sql.text_param)"),
    ("turnlog", "Q = \"SELECT 1 FROM messages WHERE content NOT LIKE 'error:%'\"",
     "LIKE, which ignores ASCII case on SQLite only (sql.ilike)"),
    ("mailbox", "Q = 'INSERT OR IGNORE INTO mail (id) VALUES (?)'",
     "INSERT OR ... / REPLACE INTO"),
    ("copy", "def f(conn):\n    conn.execute('PRAGMA defer_foreign_keys = ON')", "PRAGMA"),
    ("events", "Q = 'SELECT rowid FROM events'", "rowid"),
    ("events", "Q = 'SELECT ifnull(detail, kind) FROM events'", "a function of SQLite's own"),
    ("db", "def changed(conn):\n    return conn.execute('PRAGMA data_version')", "PRAGMA"),
    ("dialect", "PostgreSQL.now = \"((julianday('now') - 2440587.5) * 86400.0)\"",
     "SQLite's time functions (sql.now)"),
])
def test_the_check_catches_sqlite_s_own_sql_planted_in_the_store(module, planted, expected):
    """The check itself can fail: each of these, added to today's store, is found (in
    db.py, outside the functions a SQLite file alone reaches; in dialect.py, outside
    SQLite's dialect)."""
    modules = store_sources()
    modules[f"agentctl.store.{module}"] += "\n\n" + planted + "\n"
    found = sqlite_sql_in(modules)
    assert len(found) == 1 and f": {expected}: " in found[0], found


def test_both_dialects_name_the_same_differences_and_postgresql_s_are_its_own():
    from agentctl.store import dialect

    def members(cls):
        return {name for name in vars(cls) if not name.startswith("_")}

    assert members(dialect.SQLite) == members(dialect.PostgreSQL)
    pg = dialect.PostgreSQL
    spelled = [pg.now, pg.ilike, pg.text_param, pg.octet_length("d.body"),
               pg.greatest("a", "b"), pg.glob("d.name", "x*")[0]]
    assert [sqlite_only(text) for text in spelled] == [[]] * len(spelled)


def spellings(cls):
    """{name: member} of a dialect's spellings of SQL."""
    return {name: value for name, value in vars(cls).items()
            if isinstance(value, (str, staticmethod)) and name[0] != "_" and name != "name"}


def marked(cls):
    """A dialect that writes cls's spellings between comments that name them
    (/*now*/.../**/): a statement's text says which parts are the dialect's."""
    members = {}
    for name, value in spellings(cls).items():
        if isinstance(value, str):
            members[name] = f"/*{name}*/{value}/**/"
        else:
            def spelled(*args, spell=value.__func__, name=name):
                text = spell(*args)
                if isinstance(text, tuple):     # (condition, parameter)
                    return (f"/*{name}*/{text[0]}/**/", *text[1:])
                return f"/*{name}*/{text}/**/"
            members[name] = staticmethod(spelled)
    return type(f"Marked{cls.__name__}", (cls,), members)


_MARKED = re.compile(r"/\*(\w+)\*/.*?/\*\*/", re.S)


def _place():
    """(module, function) of the storage layer's code that runs the statement being
    traced (the first frame in agentctl.store outside db.py's execute), or (None, '')."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("agentctl.store.") and not (
                module == "agentctl.store.db" and frame.f_code.co_name in ("execute",
                                                                         "executemany")):
            return module, frame.f_code.co_qualname
        frame = frame.f_back
    return None, ""


@pytest.fixture
def traced(monkeypatch, tmp_path):
    """Every statement the programs run in this process on a SQLite file, their
    dialect's spellings marked: {"sql": [(place, text)], "spelled": {names}}."""
    from agentctl.store import db, dialect
    seen = {"sql": [], "spelled": set()}

    def trace(sql, params):
        seen["sql"].append((_place(), sql))
        seen["spelled"] |= set(_MARKED.findall(sql))

    monkeypatch.setenv("AGENTCTL_DB", str(tmp_path / "traced.db"))
    monkeypatch.setattr(db.Connection, "sql", marked(dialect.SQLite))
    monkeypatch.setattr(db.Connection, "tracer", staticmethod(trace))
    return seen


def sqlite_sql_run(statements):
    """SQLite's own SQL in the statements run, outside the dialect's spellings and the
    places it belongs."""
    return [f"{module}.{scope}: {what}: {' '.join(sql.split())[:100]}"
            for (module, scope), sql in statements
            if module is None or not sqlite_s_place(module, scope)
            for what in sqlite_only(_MARKED.sub(" ", sql))]


def test_the_programs_run_no_sql_of_sqlite_s_own_outside_its_places(traced, tmp_path):
    """The statements the programs run (traced on a SQLite file), the dialect's
    spellings taken out, are SQL both backends read alike: mail deferred and due,
    a turn that ends, grants along a lineage, documents by a pattern, an idle agent,
    agent-db copy. Each spelling of the dialect is met on the way."""
    from agentctl.store import dialect
    fork("-n", "a", "-m", "echo", "--idle-exit", "1h", "hello")
    fork("-p", "a", "-n", "b", "-m", "echo", "--allow", "agent-*", "hi")
    assert agent("run", "a").code == 0
    assert agent("send", "a", "more").code == 0
    assert agent("send", "--in", "1h", "a", "later").code == 0
    assert agent("mail", "-c", "a").out == "1\n"
    assert agent("ps", "-a").code == 0
    assert agent("doc", "put", "notes/one", "text").code == 0
    assert "notes/one" in agent("doc", "ls", "notes/*").out
    assert agent("db", "copy", str(tmp_path / "traced.db"), str(tmp_path / "copy.db")).code == 0
    assert sqlite_sql_run(traced["sql"]) == []
    assert traced["spelled"] == set(spellings(dialect.SQLite))


@pytest.mark.parametrize("statement, expected", [
    ("SELECT count(*) FROM mail WHERE deliver_at < julianday('now')",
     "SQLite's time functions (sql.now)"),
    ("SELECT max(created_at, 0) FROM agents", "max() of two values (sql.greatest)"),
    ("SELECT rowid FROM mail", "rowid"),
])
def test_the_trace_catches_sqlite_s_own_sql_run_by_the_store(traced, monkeypatch,
                                                            statement, expected):
    """The check of the statements run can fail: one of SQLite's own, run by a store
    function (mailbox.count_unread, replaced), is found."""
    from agentctl.store import mailbox
    planted = {**vars(mailbox), "statement": statement, "count": mailbox.count_unread}
    exec("def count_unread(conn, recipient_id, **kwargs):\n"
         "    conn.execute(statement)\n"
         "    return count(conn, recipient_id, **kwargs)\n", planted)   # (in mailbox's name)
    monkeypatch.setattr(mailbox, "count_unread", planted["count_unread"])
    fork("-n", "a")
    assert agent("mail", "-c", "a").out == "0\n"
    found = sqlite_sql_run(traced["sql"])
    assert found == [f"agentctl.store.mailbox.count_unread: {expected}: {statement}"]


def test_a_url_libpq_cant_parse_is_not_echoed_with_its_password():
    """libpq quotes a URL it can't parse whole in its message: the password was printed."""
    result = agent("ps", "--db", "postgresql://bob:s3cret@[::1/agents")
    assert result.code == 74 and one_line(result), result
    assert "s3cret" not in result.err and "postgresql://bob@" in result.err


def test_no_connection_slot_is_75_a_temporary_failure():
    """"too many clients" (or a role's connection limit) passes when a connection
    closes: 75, as a server not yet up is, not 74."""
    server = postgresql_server()
    server.sql("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'full') "
               "THEN CREATE ROLE full LOGIN CONNECTION LIMIT 0; END IF; END $$")
    url = server.database().replace("postgres@", "full@")
    result = agent("ps", "--db", url)
    assert result.code == 75 and one_line(result), result
    assert "too many connections" in result.err
