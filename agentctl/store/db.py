"""The one database every program shares: where it lives, how it is opened.

A SQLite file by default; a postgresql:// URL names a PostgreSQL database (store/pg.py,
imported only then). Opening an up-to-date SQLite database costs one PRAGMA: the schema
version is `PRAGMA user_version`; the migrations (sqlite_utils) load only when behind."""

import os
import re
import sqlite3
import time
from contextlib import contextmanager

from agentctl import clock, env, paths
from agentctl.errors import DatabaseFault, NotFound, TempFail, UsageError
from agentctl.store.dialect import SQLite

# The number of migrations in agentctl.migrations; a test keeps them equal.
SCHEMA_VERSION = 22

Error = sqlite3.Error       # what the storage layer raises, for the programs to translate (fault)

DEFAULT_BUSY_SECONDS = 30.0
INTEGER_MAX = env.LARGEST        # SQLite's largest INTEGER: no id or count is beyond it


is_url = paths.is_url

def shown(path):
    """`path` as a message may print it: a URL without its password."""
    if not is_url(path):
        return path
    path = re.sub(r"^(\w+://[^/@:]*):[^/@]*@", r"\1@", path)
    return re.sub(r"(?i)\b(password=)[^&\s]*", r"\1...", path)


def marks(values):
    """A parameter for each of `values`, as SQL lists them: "(?, ?, ?)"."""
    return f"({', '.join('?' * len(values))})"


def resolve_path(path=None):
    """--db, else $AGENTCTL_DB, else $XDG_DATA_HOME/agentctl/agents.db."""
    if path and "\0" in path:
        raise UsageError("bad database path: it holds a NUL byte")
    path = paths.database(path)
    try:
        os.fsencode(path)
    except UnicodeEncodeError:      # a lone surrogate no byte of a file name gives
        raise UsageError("bad database path: it is no file name") from None
    return path


def busy_seconds():
    """$AGENTCTL_BUSY_TIMEOUT, a finite number of seconds (inf or nan would give up at
    once): else a usage error naming it."""
    return env.number("AGENTCTL_BUSY_TIMEOUT", DEFAULT_BUSY_SECONDS)


class Cursor(sqlite3.Cursor):
    """sqlite3's cursor, whose every statement passes its connection's tracer."""

    def execute(self, sql, params=()):
        if self.connection.tracer is not None:
            self.connection.tracer(sql, params)
        return super().execute(sql, params)

    def executemany(self, sql, seq):
        if self.connection.tracer is not None:
            seq = list(seq)
            self.connection.tracer(sql, seq)
        return super().executemany(sql, seq)


class Connection(sqlite3.Connection):
    """A connection that remembers the path it was opened with. `sql` names the
    SQL that is SQLite's own (store/dialect.py). Every statement goes through one
    call, Cursor.execute(many), as on PostgreSQL's connection (pg.py): `tracer`,
    when set, is called with each statement and its parameters; `watch`, when set, is
    told of the rows a running turn writes (noted())."""

    path = None
    dialect = "sqlite"
    sql = SQLite
    tracer = None
    watch = None

    def cursor(self, factory=Cursor):
        return super().cursor(factory)

    def execute(self, sql, params=()):
        return self.cursor().execute(sql, params)

    def executemany(self, sql, seq):
        return self.cursor().executemany(sql, seq)


def _create_private(path):
    """Create the directories (0700) and the file (0600) before SQLite does,
    so the database is never readable by others, not even for a moment.
    SQLite gives the -wal and -shm files the database file's mode."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        missing = []
        while not os.path.isdir(directory) and directory not in missing:
            missing.append(directory)
            directory = os.path.dirname(directory)
        for directory in reversed(missing):     # each made 0700, not only the last (makedirs)
            try:
                os.mkdir(directory, 0o700)
            except FileExistsError:
                pass
        if not os.path.exists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    except OSError as e:
        raise DatabaseFault(f"{path}: can't create the database: {e.strerror}")


def connect(path=None, create=True):
    """Open (creating and migrating when needed) the database at `path`. A SQLite file
    that does not exist is made only when `create`, and only in a directory that
    exists, but for the default location, whose directories are made (a mistyped --db
    is a usage error, not a new empty database). A program that only reads makes none:
    the default one missing is NotFound (nothing forked yet), one named (--db,
    $AGENTCTL_DB) a usage error (a typo, which cron would keep quiet)."""
    path = resolve_path(path)
    busy_seconds()      # a bad $AGENTCTL_BUSY_TIMEOUT: a usage error before anything else
    if is_url(path):
        return _connect_postgresql(path)
    if path != ":memory:" and not os.path.exists(path):
        if not create:
            missing = NotFound if path == paths.default_database() else UsageError
            raise missing(f"{path}: no database (nothing was forked there; agent-fork "
                          "makes it)")
        directory = os.path.dirname(path)
        if not os.path.isdir(directory) and path != paths.default_database():
            raise UsageError(f"{path}: no such directory: {directory} (only the default "
                             "database's directories are made)")
    if path != ":memory:":
        _create_private(path)
    clock.skew = 0.0        # a file's clock is this host's
    try:
        # A path that is not UTF-8 (bytes the shell gave) goes to SQLite as those bytes.
        conn = sqlite3.connect(os.fsencode(path) if path != ":memory:" else path,
                               timeout=busy_seconds(), isolation_level=None,
                               check_same_thread=False, factory=Connection)
        conn.path = path
        conn.execute("PRAGMA foreign_keys=ON")
        # WAL without an fsync per commit: a crash of the process loses
        # nothing; a power cut may lose the latest commits, never integrity.
        conn.execute("PRAGMA synchronous=NORMAL")
        # A file that is neither empty nor agentctl's is not taken over: nothing is
        # written to it (not even its journal mode) before this check.
        version = _not_foreign(path, lambda: _version(conn), lambda: tables(conn))
        if version < SCHEMA_VERSION:
            _migrate(conn)
        elif version > SCHEMA_VERSION:
            raise _newer(path, version)
    except sqlite3.Error as e:
        raise fault(e, path) from e
    except UnicodeDecodeError as e:
        # SQLite's own message quoted the damaged bytes of the schema.
        raise DatabaseFault(f"{path}: {DAMAGED} (its schema can't be read)") from e
    conn.row_factory = sqlite3.Row
    return conn


def _connect_postgresql(url):
    from agentctl.store import pg  # (start-up: 8 ms, only for a postgresql:// database)
    conn = pg.connect(url, shown(url), busy_seconds())
    try:
        version = _not_foreign(shown(url), lambda: pg.version(conn), lambda: pg.tables(conn))
        if version < SCHEMA_VERSION:
            pg.migrate(conn, SCHEMA_VERSION)
        elif version > SCHEMA_VERSION:
            raise _newer(shown(url), version)
    except BaseException:
        conn.close()
        raise
    return conn


def _not_foreign(where, read_version, list_tables):
    """The database's schema version (`read_version()`, 0 for none), once it is known not
    to be another program's: one with no version and tables (`list_tables()`, the first
    few) is not taken over. The version is read again after the tables are listed: another
    first program may have committed its schema between the two looks (seen under load,
    on either backend), and only a database still without one is refused."""
    found = read_version()
    if found == 0:
        listed = list_tables()
        found = read_version()
        if found == 0 and listed:
            named = ", ".join(listed[:3]) + (", ..." if len(listed) > 3 else "")
            raise DatabaseFault(f"{where}: not an agentctl database (it has tables of its "
                                f"own: {named}); give another --db")
    return found


def _version(conn):
    return conn.execute("PRAGMA user_version").fetchone()[0]


def tables(conn):
    """The first few tables of a SQLite database's schema, by name (pg.tables's)."""
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' "
        "AND name NOT LIKE 'sqlite_%' ORDER BY name LIMIT 4")]


def _newer(where, version):
    return DatabaseFault(f"{where}: written by a newer agentctl (schema {version}, "
                         f"this one knows {SCHEMA_VERSION}); upgrade agentctl")


def _migrate(conn):
    _use_wal(conn)
    # One migrator at a time: the others wait here, then find nothing to do.
    with transaction(conn):
        if _version(conn) >= SCHEMA_VERSION:
            return
        from agentctl.store.migrations import apply  # (start-up: 40 ms, only to migrate)
        apply(conn)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _use_wal(conn):
    """Switch a new database to WAL. Two processes switching at once both
    hold a read lock and want the write lock: SQLite sees the deadlock and
    answers "locked" at once, without its busy handler, so the loser waits
    here instead, up to the busy timeout, by when the winner has switched."""
    if conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
        return
    deadline = time.monotonic() + busy_seconds()
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


@contextmanager
def transaction(conn):
    """A write transaction that takes the write lock up front (no deadlock on
    upgrade from a read lock), waiting up to the busy timeout for it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if conn.watch is not None:
            conn.watch.discarded()
        raise
    conn.execute("COMMIT")
    if conn.watch is not None:
        conn.watch.committed()


def noted(conn, table, rowid):
    """Tell the connection's watch (those who watch a running turn: agent-run --format
    stream-json) of a row written to `table` (events, messages): it sees the row once
    its transaction commits (committed()), and never if it rolls back (discarded())."""
    if conn.watch is not None:
        conn.watch.wrote(table, rowid)
        if not conn.in_transaction:
            conn.watch.committed()


def fault(exc, path=None):
    """Translate an sqlite3 error into an agentctl error with its exit status."""
    text = str(exc)
    where = f"{shown(path)}: " if path else ""
    if getattr(exc, "tempfail", False):     # a PostgreSQL server out of reach
        return TempFail(f"{where}{text}")
    if "locked" in text or "busy" in text:
        return TempFail(f"{where}database is locked (gave up after {busy_seconds():g}s)")
    if "database or disk is full" in text or "disk I/O error" in text and _full(path):
        # Nothing is half-written: the transaction that met it was rolled back.
        return TempFail(f"{where}the disk is full: nothing was written; free some space "
                        "and try again")
    if "Could not decode to UTF-8" in text:     # (the message quotes the whole text)
        return DatabaseFault(f"{where}{DAMAGED} (it holds text that is not UTF-8)")
    if "malformed" in text:
        return DatabaseFault(f"{where}{DAMAGED} ({text})")
    if "not a database" in text:
        return DatabaseFault(f"{where}not an agentctl database ({text})")
    if "readonly" in text or "read-only" in text or \
            "unable to open" in text and path and _read_only(path):
        return DatabaseFault(f"{where}database is read-only")
    if "unable to open" in text:
        return DatabaseFault(f"{where}can't open the database")
    return DatabaseFault(f"{where}database error: {text}")


DAMAGED = "the database is damaged: agent-db check says what it finds"


def damage(exc, path):
    """The fault to report when a program met an error it did not expect: the
    database damaged (SQLite's quick check finds a fault, or a row holds text that
    is not UTF-8, which agentctl never writes), else None: a bug of ours."""
    if path is None or path == ":memory:" or is_url(path):
        return None
    if isinstance(exc, UnicodeDecodeError):
        return DatabaseFault(f"{path}: {DAMAGED} (it holds text that is not UTF-8)")
    found = quick_check(path)
    return DatabaseFault(f"{path}: {DAMAGED} ({found})") if found else None


def quick_check(path, limit=1):
    """What SQLite's quick check finds wrong with the file (a line), or None."""
    try:
        conn = sqlite3.connect(os.fsencode(path), timeout=1.0, factory=Connection)
        try:
            conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
            found = [row[0] for row in conn.execute(f"PRAGMA quick_check({int(limit)})")]
        finally:
            conn.close()
    except sqlite3.Error as e:
        return str(e)
    except UnicodeDecodeError:
        return "its schema can't be read"
    return None if found == ["ok"] else "; ".join(found)


def _full(path):
    """Whether the file system the database lives on has no space left (SQLite may
    report a write that failed for want of space as "disk I/O error")."""
    try:
        stats = os.statvfs(os.path.dirname(os.path.abspath(path or resolve_path())))
    except (OSError, ValueError):
        return False
    return stats.f_bavail * stats.f_frsize < 64 * 1024


def _read_only(path):
    """Whether the database, or the directory its -wal and -shm files live in,
    can't be written (a mode, or a read-only file system: SQLite in WAL mode
    then can't even read it, and says only "unable to open")."""
    directory = os.path.dirname(os.path.abspath(path))
    return not os.access(directory, os.W_OK) or \
        os.path.exists(path) and not os.access(path, os.W_OK)


@contextmanager
def snapshot(conn):
    """Reads that see one state of the database (a read transaction)."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        conn.execute("COMMIT")


def path_of(conn):
    """The file a connection has open, for another connection to the same database:
    the path as it was given (SQLite's own answer is text, and a path need not be)."""
    return getattr(conn, "path", None) or conn.execute("PRAGMA database_list").fetchone()[2]
