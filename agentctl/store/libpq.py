"""libpq, PostgreSQL's own client library, called through ctypes: how store/pg.py talks
to a server (agentctl(5), BACKENDS).

Why not a driver package: importing psycopg costs a program about 120 ms (its type
adapters, asyncio, logging, importlib.metadata ...) and pg8000 about 60 ms, where the
whole of agent-ps on SQLite takes about 110 ms; loading libpq here costs about 6 ms
(bench/postgres.py measures both). What matters is libpq's as with any driver built on
it: the URL and its parameters, the PG* variables, ~/.pgpass, TLS, authentication,
several hosts. This module only sends a statement with text parameters, reads its
result as text, and hands notifications over.

Which libpq: the system's (Debian's libpq5), else the copy psycopg's binary wheel
bundles (the `postgres` extra installs it); loaded at the first connection.

Every wait (to connect, for a result, for a notification) is a poll() of the socket,
so that a signal is handled while it lasts as Python handles it anywhere: the
statement under way is cancelled and the exception goes on.
"""

import ctypes
import os
import re
import select
import time
from _thread import RLock
from ctypes import POINTER, Structure, c_char_p, c_int, c_uint, c_void_p
from functools import lru_cache
from itertools import repeat

NAMES = ("libpq.so.5", "libpq.5.dylib", "libpq.dylib")     # the system's, by soname

_OK, _BAD = 0, 1                                # PQstatus
_POLL_FAILED, _POLL_READ, _POLL_WRITE, _POLL_OK = 0, 1, 2, 3    # PQconnectPoll
_EMPTY, _COMMAND, _TUPLES, _FATAL = 0, 1, 2, 7   # PQresultStatus
IDLE = 0                                        # PQtransactionStatus

# SQLSTATE classes as psycopg (and DB-API) sort them; what no class names is a
# DatabaseError.
_KINDS = {"23": "integrity",
          **dict.fromkeys(("08", "27", "28", "2F", "38", "39", "3B", "40", "53", "54", "55",
                           "57", "58", "F", "H"), "operational"),
          **dict.fromkeys(("10", "20", "21", "26", "34", "3D", "3F", "42", "44", "P"),
                          "programming")}


class Missing(ImportError):
    """No libpq could be loaded."""


class Error(Exception):
    """An error the server or libpq reported: `sqlstate` ("" when libpq's own, as a
    connection lost), `kind` integrity, operational, programming or database."""

    def __init__(self, message, sqlstate=""):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.kind = _KINDS.get(sqlstate[:2]) or _KINDS.get(sqlstate[:1]) or \
            ("database" if sqlstate else "operational")


class _Notify(Structure):
    _fields_ = [("relname", c_char_p), ("be_pid", c_int), ("extra", c_char_p)]


_SIGNATURES = {
    "PQconnectStartParams": (c_void_p, [POINTER(c_char_p), POINTER(c_char_p), c_int]),
    "PQconnectPoll": (c_int, [c_void_p]),
    "PQstatus": (c_int, [c_void_p]),
    "PQerrorMessage": (c_char_p, [c_void_p]),
    "PQsocket": (c_int, [c_void_p]),
    "PQfinish": (None, [c_void_p]),
    "PQsetNoticeProcessor": (c_void_p, [c_void_p, c_void_p, c_void_p]),
    "PQsendQuery": (c_int, [c_void_p, c_char_p]),
    "PQsendQueryParams": (c_int, [c_void_p, c_char_p, c_int, c_void_p, c_void_p, c_void_p,
                                  c_void_p, c_int]),
    "PQconsumeInput": (c_int, [c_void_p]),
    "PQisBusy": (c_int, [c_void_p]),
    "PQgetResult": (c_void_p, [c_void_p]),
    "PQresultStatus": (c_int, [c_void_p]),
    "PQresultErrorField": (c_char_p, [c_void_p, c_int]),
    "PQresultErrorMessage": (c_char_p, [c_void_p]),
    "PQntuples": (c_int, [c_void_p]),
    "PQnfields": (c_int, [c_void_p]),
    "PQfname": (c_char_p, [c_void_p, c_int]),
    "PQftype": (c_uint, [c_void_p, c_int]),
    "PQgetvalue": (c_char_p, None),     # (no argtypes: the calls per value are the cost)
    "PQgetisnull": (c_int, None),
    "PQcmdTuples": (c_char_p, [c_void_p]),
    "PQclear": (None, [c_void_p]),
    "PQtransactionStatus": (c_int, [c_void_p]),
    "PQbackendPID": (c_int, [c_void_p]),
    "PQnotifies": (POINTER(_Notify), [c_void_p]),
    "PQfreemem": (None, [c_void_p]),
    "PQgetCancel": (c_void_p, [c_void_p]),
    "PQcancel": (c_int, [c_void_p, c_char_p, c_int]),
    "PQfreeCancel": (None, [c_void_p]),
    "PQlibVersion": (c_int, []),
}

_lib = None
_QUIET = ctypes.CFUNCTYPE(None, c_void_p, c_char_p)(lambda arg, message: None)


def _bundled():
    """The libpq psycopg's binary wheel carries (its own name, beside the package), or None."""
    from importlib.util import find_spec  # (start-up: 2 ms, only without the system's libpq)
    try:
        spec = find_spec("psycopg_binary")
    except (ImportError, ValueError):
        return None
    for package in (spec and spec.submodule_search_locations) or ():
        for folder in (package + ".libs", os.path.join(package, ".dylibs")):
            found = sorted(n for n in os.listdir(folder) if n.startswith("libpq")) \
                if os.path.isdir(folder) else []
            if found:
                return os.path.join(folder, found[0])
    return None


def library():
    """libpq, loaded once (Missing when there is none)."""
    global _lib
    if _lib is None:
        lib = None
        for name in NAMES:
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                pass
        if lib is None:
            path = _bundled()
            try:
                lib = ctypes.CDLL(path) if path else None
            except OSError:
                lib = None
        if lib is None:
            raise Missing("no libpq found")
        for name, (restype, argtypes) in _SIGNATURES.items():
            function = getattr(lib, name)
            function.restype = restype
            if argtypes is not None:
                function.argtypes = argtypes
        _lib = lib
    return _lib


def _text(raw):
    return raw.decode("utf-8", "replace") if raw else ""


def _numeric(value):
    return int(value) if value.lstrip(b"-").isdigit() else float(value)


def _bytea(value):
    return bytes.fromhex(value[2:].decode()) if value.startswith(b"\\x") else value


# A column's type (its OID) -> how its text becomes a Python value; text for the rest.
_LOADERS = {16: lambda v: v == b"t", 17: _bytea, 20: int, 21: int, 23: int, 26: int,
            700: float, 701: float, 1700: _numeric}


def _dumped(value):
    """(OID, text) of a parameter: an int as the smallest integer type it fits (as psycopg
    sends it), text as unknown for the server to type from where it stands."""
    if value is None:
        return 0, None
    if value is True or value is False:
        return 16, b"true" if value else b"false"
    if isinstance(value, int):
        oid = 21 if -2**15 <= value < 2**15 else 23 if -2**31 <= value < 2**31 else \
            20 if -2**63 <= value < 2**63 else 1700
        return oid, str(value).encode()
    if isinstance(value, float):
        text = "NaN" if value != value else "Infinity" if value == float("inf") else \
            "-Infinity" if value == float("-inf") else repr(value)
        return 701, text.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return 17, b"\\x" + bytes(value).hex().encode()
    return 0, str(value).encode()


@lru_cache(maxsize=1024)
def _numbered(sql):
    """psycopg's placeholders (%s, and %% for a %) as libpq's ($1, $2 ...)."""
    count = iter(range(1, 1 << 16))
    return re.sub(r"%[%s]", lambda m: "%" if m.group() == "%%" else f"${next(count)}",
                  sql).encode()


class Result:
    """A statement's outcome: `names` of its columns (None: it returns no rows), `rows`,
    `rowcount` (what it affected or returned, -1 when it says not)."""

    __slots__ = ("names", "rows", "rowcount")

    def __init__(self, names, rows, rowcount):
        self.names, self.rows, self.rowcount = names, rows, rowcount


class Connection:
    """One connection to a server. Every call holds the connection's lock: two threads
    that share it take turns, as they would on psycopg's."""

    def __init__(self, url, **parameters):
        """Connect to `url` (a postgresql:// URL or key=value string), with `parameters`
        over what it says; waits at most connect_timeout seconds when one is given."""
        lib = library()
        self._lock = RLock()
        keys = [b"dbname", *(k.encode() for k in parameters), None]
        values = [url.encode(), *(str(v).encode() for v in parameters.values()), None]
        self._pg = lib.PQconnectStartParams((c_char_p * len(keys))(*keys),
                                            (c_char_p * len(values))(*values), 1)
        if not self._pg:
            raise MemoryError("libpq could not allocate a connection")
        timeout = parameters.get("connect_timeout") or _timeout_in(url)
        deadline = time.monotonic() + timeout if timeout else None
        try:
            state = _POLL_WRITE
            while lib.PQstatus(self._pg) != _BAD and state not in (_POLL_OK, _POLL_FAILED):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise Error("connection failed: timeout expired")
                self._wait(state == _POLL_WRITE, left)
                state = lib.PQconnectPoll(self._pg)
            if lib.PQstatus(self._pg) != _OK:
                raise self._failed("connection failed: ")
        except BaseException:
            self.close()
            raise
        lib.PQsetNoticeProcessor(self._pg, _QUIET, None)     # (libpq's own prints them)
        self.backend_pid = lib.PQbackendPID(self._pg)

    def _failed(self, prefix=""):
        text = _text(_lib.PQerrorMessage(self._pg)).strip() if self._pg else \
            "the connection is closed"
        return Error(f"{prefix}{text or 'the connection failed'}")

    def _wait(self, write, timeout):
        """Until the socket can be written (`write`) or read, at most `timeout` seconds
        (None: no bound); whether it can."""
        fd = _lib.PQsocket(self._pg)
        if fd < 0:
            raise self._failed()
        poller = select.poll()
        poller.register(fd, select.POLLOUT if write else select.POLLIN)
        # (in whole milliseconds, rounded up: no turn that waits for nothing; an hour at
        # most, which poll() can count: the callers wait again until their deadline)
        return bool(poller.poll(None if timeout is None else
                                max(0, min(int(timeout * 1000) + 1, 3_600_000))))

    def execute(self, sql, params=None):
        """Run one statement (several, without `params`); its Result. `sql` holds
        psycopg's placeholders (%s) when `params` is given."""
        lib = _lib
        with self._lock:
            if self._pg is None:
                raise Error("the connection is closed")
            if params is None:
                sent = lib.PQsendQuery(self._pg, sql.encode())
            else:
                dumped = [_dumped(p) for p in params]
                count = len(dumped)
                sent = lib.PQsendQueryParams(
                    self._pg, _numbered(sql), count, (c_uint * count)(*(d[0] for d in dumped)),
                    (c_char_p * count)(*(d[1] for d in dumped)), None, None, 0)
            if not sent:
                raise self._failed()
            return self._result()

    def _result(self):
        lib, pg = _lib, self._pg
        outcome = error = None
        try:
            while True:
                self._arrived()
                res = lib.PQgetResult(pg)
                if not res:
                    break
                try:
                    outcome, error = _read(lib, res, outcome, error)
                finally:
                    lib.PQclear(res)
        except BaseException:
            while True:         # what is left of the results, for the next statement
                res = lib.PQgetResult(pg)   # (blocks: a cancelled statement ends at once)
                if not res:
                    break
                lib.PQclear(res)
            raise
        if error is not None:
            raise error
        return outcome or Result(None, [], -1)

    def _arrived(self):
        """Wait until the next result has come; cancel the statement when the wait ends
        otherwise (a signal's exception, the connection lost)."""
        lib, pg = _lib, self._pg
        try:
            while lib.PQisBusy(pg):
                self._wait(False, None)
                if not lib.PQconsumeInput(pg):
                    raise self._failed()
        except BaseException:
            cancel = lib.PQgetCancel(pg)
            if cancel:
                lib.PQcancel(cancel, ctypes.create_string_buffer(256), 256)
                lib.PQfreeCancel(cancel)
            raise

    def transaction_status(self):
        with self._lock:
            return _lib.PQtransactionStatus(self._pg) if self._pg else IDLE

    def notifies(self, timeout=0):
        """The server pids of the notifications come so far; when none has, waits up to
        `timeout` seconds for one."""
        lib = _lib
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if self._pg is None or not lib.PQconsumeInput(self._pg):
                    raise self._failed()
                pids = []
                while True:
                    notify = lib.PQnotifies(self._pg)
                    if not notify:
                        break
                    pids.append(notify.contents.be_pid)
                    lib.PQfreemem(notify)
                left = deadline - time.monotonic()
                if pids or left <= 0:
                    return pids
                self._wait(False, left)

    def close(self):
        with self._lock:
            if self._pg is not None:
                _lib.PQfinish(self._pg)
                self._pg = None

    def __del__(self):      # one nobody closed (as psycopg's): its server slot freed
        pg, self._pg = getattr(self, "_pg", None), None
        if pg and _lib is not None:
            _lib.PQfinish(pg)


def _read(lib, res, outcome, error):
    """(outcome, error) once `res` is read: the last statement's outcome, the first error."""
    status = lib.PQresultStatus(res)
    if status == _TUPLES:
        count, width = lib.PQntuples(res), lib.PQnfields(res)
        names = tuple(_text(lib.PQfname(res, j)) for j in range(width))
        columns = [_column(lib, res, j, count) for j in range(width)]
        rows = list(zip(*columns)) if columns else [()] * count
        return Result(names, rows, count), error
    if status in (_COMMAND, _EMPTY):
        tuples = lib.PQcmdTuples(res)
        return Result(None, [], int(tuples) if tuples else -1), error
    if error is None:
        state = lib.PQresultErrorField(res, ord("C"))
        message = lib.PQresultErrorField(res, ord("M")) or lib.PQresultErrorMessage(res)
        error = Error(_text(message).strip() or "error", _text(state))
    return outcome, error


def _column(lib, res, j, count):
    """Column `j` of every row as Python values, read a column at a time: one foreign call
    a value (map() makes them without a Python frame each), a second only for an empty
    text, which may be NULL. A typed value is never empty (a number, t or f, bytea's \\x):
    empty, it is NULL."""
    handle = c_void_p(res)
    raw = list(map(lib.PQgetvalue, repeat(handle, count), range(count), repeat(j, count)))
    load = _LOADERS.get(lib.PQftype(res, j))
    if b"" not in raw:
        return list(map(load or bytes.decode, raw))
    if load is not None:
        return [load(v) if v else None for v in raw]
    isnull = lib.PQgetisnull
    return [v.decode() if v else None if isnull(handle, i, j) else "" for i, v in enumerate(raw)]


def _timeout_in(url):
    found = re.search(r"connect_timeout=(\d+)", url)
    return int(found.group(1)) if found else 0
