"""PostgreSQL (agentctl(5), BACKENDS): a database named by a postgresql:// URL.

Imported only for such a URL; it speaks to the server through libpq (store/libpq.py),
loaded at the first connection. The connection it returns is used by the rest of the
storage layer as SQLite's is: the same statements, the same transactions, rows read by
name or position. What differs is kept here:

- SQL: `?` placeholders and `IS ?` (translate(), once per statement text); where
  the two backends' SQL differs, a module writes conn.sql's spelling
  (store/dialect.py), so that no statement's text is rewritten.
- Writers take turns, as on SQLite: a write transaction holds one advisory
  lock until it ends (BEGIN IMMEDIATE's write lock), so every rule the
  programs check inside a transaction holds across hosts as it does across
  processes, ids are handed out in commit order (agent-log's sequence), and a
  wait for the lock ends at AGENTCTL_BUSY_TIMEOUT ("database is locked", 75).
  Readers never wait.
- A write transaction ends with NOTIFY: whoever waits for a change (agent-wait,
  agent-mail -w, agent-log -f) LISTENs instead of polling.
- Time is the server's: the difference between its clock and this host's is
  measured when the connection opens (clock.skew).
- Text can't hold NUL on PostgreSQL: a NUL is stored as U+FFFD, as bytes that
  are not UTF-8 are.
"""

import re
import sqlite3
import time
from contextlib import contextmanager
from functools import lru_cache

from agentctl import clock
from agentctl.errors import DatabaseFault
from agentctl.ids import INIT_ID
from agentctl.store import libpq, pgschema
from agentctl.store.dialect import PostgreSQL

CHANNEL = "agentctl"
WRITE_LOCK = int.from_bytes(b"agentctl", "big") >> 1     # the one writer's advisory lock

# Tables whose id the database hands out: an INSERT returns it (cursor.lastrowid).
_SEQUENCED = re.compile(r"\s*INSERT INTO (%s)\b" % "|".join(pgschema.SEQUENCED))
_WRITES = re.compile(r"\s*(INSERT|UPDATE|DELETE)\b", re.I)
_QUOTED = re.compile(r"('(?:[^']|'')*')")


class Error(sqlite3.OperationalError):
    """A PostgreSQL error, as the programs translate the storage layer's (db.fault)."""

    def __init__(self, message, tempfail=False):
        super().__init__(message)
        self.tempfail = tempfail


class IntegrityError(sqlite3.IntegrityError):
    pass


def _first_line(exc):
    return (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]


# SQLSTATEs: lock_not_available, query_canceled (lock_timeout), disk_full
_LOCKED, _FULL = ("55P03", "57014"), "53100"


def translated(exc):
    """A libpq error as the storage layer's error; an error in our SQL (a bug)
    is raised as it is."""
    if exc.kind == "integrity":
        return IntegrityError(_first_line(exc))
    if exc.sqlstate in _LOCKED:
        return Error("database is locked")
    if exc.sqlstate == _FULL:
        return Error("database or disk is full")
    if exc.kind == "operational":
        return Error(f"the database server can't be reached: {_first_line(exc)}", tempfail=True)
    if exc.kind == "database":
        return Error(f"database error: {_first_line(exc)}")
    return exc


@lru_cache(maxsize=1024)
def translate(sql):
    """The storage layer's statement with %s placeholders (libpq.py numbers them):
    (text, whether it returns the new row's id). Only what any statement needs: `?`
    as %s and `IS ?` as IS NOT DISTINCT FROM (outside quotes), a literal % doubled,
    RETURNING id for a table whose ids a sequence hands out. What is SQLite's own the
    statement no longer holds: it was written with conn.sql's PostgreSQL spellings
    (store/dialect.py)."""
    parts = _QUOTED.split(sql)
    for i in range(0, len(parts), 2):       # outside quotes only
        part = parts[i].replace("%", "%%")
        part = re.sub(r"\bIS NOT \?", "IS DISTINCT FROM ?", part)
        part = re.sub(r"\bIS \?", "IS NOT DISTINCT FROM ?", part)
        parts[i] = part.replace("?", "%s")
    for i in range(1, len(parts), 2):
        parts[i] = parts[i].replace("%", "%%")
    sql = "".join(parts)
    return sql, bool(_SEQUENCED.match(sql)) and "RETURNING" not in sql


def _param(value):
    if value is True or value is False:
        return int(value)
    if type(value) is str and "\0" in value:
        return value.replace("\0", "\ufffd")
    return value


class _Row(tuple):
    """A row read by position or by column name, as sqlite3.Row is."""

    __slots__ = ()
    _index = {}

    def __getitem__(self, key):
        if type(key) is str:
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self):
        return list(self._index)


@lru_cache(maxsize=512)
def _row_class(names):
    return type("Row", (_Row,), {"__slots__": (), "_index": {n: i for i, n in enumerate(names)}})


class Cursor:
    """What the storage layer uses of sqlite3's cursor."""

    def __init__(self, conn):
        self.connection = conn
        self.row_factory = conn.row_factory
        self.lastrowid = None
        self.rowcount = -1
        self._rows = []
        self.description = None     # (name, None x 6) of each column of the rows, as sqlite3's

    def execute(self, sql, params=()):
        conn = self.connection
        control = conn.CONTROL.get(sql.strip().upper())
        query, returning = (sql, False) if control else translate(sql)
        if conn.tracer is not None:
            conn.tracer(query, params)
        if control is not None:
            try:
                getattr(conn, control)()
            except libpq.Error as e:
                raise translated(e) from e
            return self
        self.description = None
        with self._alone(query):
            result = conn.raw.execute(query + " RETURNING id" if returning else query,
                                      [_param(p) for p in params])
            self.rowcount = result.rowcount
            if returning:
                self.lastrowid = result.rows[-1][0] if result.rows else None
            elif result.names is not None:       # a statement that returns rows
                self.description = [(name,) + (None,) * 6 for name in result.names]
                rows = result.rows
                if self.row_factory:
                    make = _row_class(result.names)
                    rows = [make(row) for row in rows]
                self._rows = rows
        return self

    def executemany(self, sql, seq):
        query, _ = translate(sql)
        seq = [[_param(p) for p in params] for params in seq]
        if self.connection.tracer is not None:
            self.connection.tracer(query, seq)
        with self._alone(query):
            self.rowcount = sum(self.connection.raw.execute(query, params).rowcount
                                for params in seq)
        return self

    @contextmanager
    def _alone(self, query):
        """A write outside a transaction is one of its own (it takes the write lock)."""
        conn = self.connection
        alone = _WRITES.match(query) and not conn.in_transaction
        try:
            if alone:
                conn.begin_write()
            yield
            if alone:
                conn.commit()
        except libpq.Error as e:
            if alone and conn.in_transaction:
                conn.rollback()
            raise translated(e) from e

    def fetchmany(self, size):
        taken, self._rows = self._rows[:size], self._rows[size:]
        return taken

    def fetchone(self):
        return self.fetchmany(1)[0] if self._rows else None

    def fetchall(self):
        taken, self._rows = self._rows, []
        return taken

    def __iter__(self):
        return iter(self.fetchall())


class Connection:
    """A PostgreSQL connection that the storage layer uses as it uses sqlite3's: `sql`
    names PostgreSQL's spellings where SQLite's differ (store/dialect.py); every
    statement goes through one call, Cursor.execute(many), and `tracer`, when set,
    is called with each as it is sent (translated) and its parameters."""

    dialect = "postgresql"
    sql = PostgreSQL
    tracer = None
    watch = None        # as db.Connection's
    CONTROL = {"BEGIN IMMEDIATE": "begin_write", "BEGIN": "begin_read",
               "COMMIT": "commit", "ROLLBACK": "rollback"}

    def __init__(self, raw, url):
        self.raw = raw
        self.path = url
        self.row_factory = True     # rows by name; None: plain tuples
        self._writing = False
        self._listening = False
        self._changes = 0

    def execute(self, sql, params=()):
        return Cursor(self).execute(sql, params)

    def executemany(self, sql, seq):
        return Cursor(self).executemany(sql, seq)

    def cursor(self):
        return Cursor(self)

    def __enter__(self):        # as sqlite3's: the block's statements, each committed
        return self

    def __exit__(self, *exc):
        return False

    @property
    def in_transaction(self):
        return self.raw.transaction_status() != libpq.IDLE

    def begin_write(self):
        self.raw.execute("BEGIN")
        self._writing = True
        self.raw.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))

    def begin_read(self):
        self.raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")

    def commit(self):
        if self._writing:
            self.raw.execute(f"NOTIFY {CHANNEL}")
        self._writing = False
        self.raw.execute("COMMIT")

    def rollback(self):
        self._writing = False
        self.raw.execute("ROLLBACK")

    def close(self):
        self.raw.close()

    def _listen(self):
        if not self._listening:
            self.raw.execute(f"LISTEN {CHANNEL}")
            self._listening = True

    def changes(self):
        """A number that grows when another connection commits a change (it counts
        their notifications come so far; LISTEN from the first call). This
        connection's own commits are not counted, as SQLite's data_version does not."""
        try:
            self._listen()
            self._changes += self._others(self.raw.notifies(0))
        except libpq.Error as e:
            raise translated(e) from e
        return self._changes

    def _others(self, pids):
        return sum(1 for pid in pids if pid != self.raw.backend_pid)

    def wait_for_change(self, timeout):
        """Block until a change is committed or `timeout` seconds pass."""
        try:
            self._listen()
            came = self._others(self.raw.notifies(max(timeout, 0)))
        except libpq.Error as e:
            raise translated(e) from e
        self._changes += came
        return came > 0


def connect(url, shown, busy_seconds):
    """Open the database at `url` (`shown` is how messages name it); the server's
    clock is measured (clock.skew), a lock waited for at most `busy_seconds`."""
    options = {} if "connect_timeout" in url else {"connect_timeout": max(1, int(busy_seconds))}
    try:
        raw = libpq.Connection(url, client_encoding="UTF8", **options)
    except libpq.Missing:
        raise DatabaseFault(f"{shown}: PostgreSQL needs libpq, which is not installed: the "
                            "system's (Debian: libpq5), or from agentctl's checkout, make "
                            "install EXTRAS=postgres (or pip install '.[postgres]')") from None
    except libpq.Error as e:
        raise _unreachable(e, shown, url) from None
    try:
        raw.execute(f"SET lock_timeout = {max(1, int(busy_seconds * 1000))}")
        before = time.time()
        server = raw.execute("SELECT extract(epoch from clock_timestamp())::float8").rows[0][0]
        clock.skew = server - (before + time.time()) / 2
    except libpq.Error as e:
        raw.close()
        raise translated(e) from e
    return Connection(raw, url)


def _unreachable(exc, shown, url):
    """A connection that failed, as an error that names the database as `shown` (libpq
    quotes a URL it can't parse whole, its password too) and says whether a later try
    may succeed (no server yet, no connection slot free: 75)."""
    text = _first_line(exc).replace(url, shown)
    text = re.sub(r"^connection failed: ", "", text)
    text = re.sub(r"(://[^/@:\s\"]*):[^/@\s\"]*@", r"\1@", text)     # user:password@ in a quote
    text = re.sub(r"(?i)\b(password=)[^&\s\"]*", r"\1...", text)
    if re.search(r"refused|timeout|timed out|could not translate host|no route|"
                 r"too many (clients|connections)|remaining connection slots|"
                 r"the database system is (starting|shutting)", text, re.I):
        return Error(f"the database server can't be reached: {text}", tempfail=True)
    return DatabaseFault(f"{shown}: can't open the database: {text}")


# (pg_tables, not to_regclass: the catalog cache may not have seen the tables another
# migrator committed while this one waited for the lock)
_HAS_SCHEMA = ("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE "
               "schemaname = current_schema() AND tablename = 'agentctl_schema')")


def version(conn):
    """The schema version of the database (0: none yet)."""
    try:
        if not conn.raw.execute(_HAS_SCHEMA).rows[0][0]:
            return 0
        return conn.raw.execute("SELECT max(version) FROM agentctl_schema").rows[0][0] or 0
    except libpq.Error as e:
        raise translated(e) from e


def tables(conn):
    """The first few tables of the database's schema, by name."""
    try:
        return [r[0] for r in conn.raw.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() ORDER BY table_name LIMIT 4").rows]
    except libpq.Error as e:
        raise translated(e) from e


def migrate(conn, newest):
    """Make or bring agentctl's tables up to `newest`, one migrator at a time."""
    try:
        conn.begin_write()
        current = version(conn)
        if current < newest:
            pgschema.apply(conn.raw, current, lambda: conn.raw.execute(
                "INSERT INTO agents (id, name, role, status, created_at) "
                "VALUES (%s, 'init', 'kernel', 'S', %s)", (INIT_ID, clock.now())))
        conn.commit()
    except libpq.Error as e:
        raise translated(e) from e
    finally:
        if conn.in_transaction:
            conn.rollback()


def set_sequences(conn):
    """Set each sequence past the largest id its table holds (after agent-db copy)."""
    for table in pgschema.SEQUENCED:
        conn.raw.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                         f"coalesce((SELECT max(id) FROM {table}), 0) + 1, false)")
