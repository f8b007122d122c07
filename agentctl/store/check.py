"""What `agent-db check` asks of a database file, without creating, migrating or
writing it: SQLite's integrity check, the foreign keys, the schema version, and
text that is not UTF-8 (agentctl writes none, so a row that holds some is damaged)."""

import os
import sqlite3
from urllib.parse import quote

from agentctl.errors import DatabaseFault
from agentctl.store.db import SCHEMA_VERSION, Connection, fault

LIMIT = 100         # findings reported at most; the integrity check stops there too


def open_read_only(path):
    """The file at `path`, opened read-only: never created."""
    if not os.path.exists(path):
        raise DatabaseFault(f"{path}: no such database")
    if not os.access(path, os.R_OK):
        raise DatabaseFault(f"{path}: can't read the database")
    uri = "file:" + quote(os.fsencode(os.path.abspath(path))) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=5.0, isolation_level=None, factory=Connection)
    conn.path = path
    conn.text_factory = bytes       # every text value as it is stored, to be checked
    return conn


def findings(conn):
    """Each problem found, as a line of text (none: the database is sound), then
    a summary of what was checked."""
    found = []
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = [_text(r[0]) for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name")]
    except sqlite3.OperationalError as e:
        if "unable to open" in str(e):      # a read-only directory, the -shm file missing
            raise fault(e, conn.path) from e
        return [f"can't be read: {_error(e)}"], "nothing checked"
    except (sqlite3.Error, UnicodeDecodeError) as e:
        return [f"can't be read: {_error(e)}"], "nothing checked"
    if version == 0 and tables:
        return [f"not an agentctl database (it has tables of its own: {', '.join(tables[:3])})"], \
            "nothing checked"
    if version > SCHEMA_VERSION:
        found.append(f"written by a newer agentctl (schema {version}, this one knows "
                     f"{SCHEMA_VERSION}): checked as SQLite only")
    for step in (_integrity, _foreign_keys, lambda c: _not_utf8(c, tables)):
        try:
            found += step(conn)
        except (sqlite3.Error, UnicodeDecodeError) as e:
            found.append(f"can't be read: {_error(e)}")
        if len(found) >= LIMIT:
            break
    return found[:LIMIT], _summary(conn, version, tables)


def _integrity(conn):
    rows = [_text(r[0]) for r in conn.execute(f"PRAGMA integrity_check({LIMIT})")]
    return [] if rows == ["ok"] else rows


def _foreign_keys(conn):
    return [f"{_text(table)} row {rowid}: refers to a row of {_text(parent)} that does not exist"
            for table, rowid, parent, _ in conn.execute("PRAGMA foreign_key_check")]


def _not_utf8(conn, tables):
    found = []
    for table in tables:
        cursor = conn.execute(f'SELECT rowid, * FROM "{table}"')
        names = [d[0] for d in cursor.description][1:]
        for row in cursor:
            for name, value in zip(names, row[1:]):
                if isinstance(value, bytes) and not _utf8(value):
                    found.append(f"{table} row {row[0]}: {name} holds text that is not UTF-8")
                    if len(found) >= LIMIT:
                        return found
    return found


def _summary(conn, version, tables):
    counts = []
    for table in ("agents", "messages", "mail"):
        if table in tables:
            try:
                n = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            except (sqlite3.Error, UnicodeDecodeError):
                continue
            counts.append(f"{n} {table if table != 'mail' else 'mails'}")
    return ", ".join([f"schema {version}"] + counts)


def _error(exc):
    if isinstance(exc, UnicodeDecodeError):       # SQLite's message quoted damaged bytes
        return "its schema is damaged"
    return str(exc)


def _utf8(raw):
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
