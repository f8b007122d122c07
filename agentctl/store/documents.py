"""Document rows (agentctl(5), documents): every put and every rm inserts a version
row; nothing is updated or deleted. Who may see and write what is ops/docs.py's."""

from agentctl import clock


def _row(conn):
    """A version row's columns (the body left out: its size in bytes instead)."""
    return ("d.id, d.name, d.version, d.owner_id, o.name AS owner_name, d.visibility, "
            "d.author_id, a.name AS author_name, d.created_at, "
            f"{conn.sql.octet_length('d.body')} AS size, "
            "CASE WHEN d.body IS NULL THEN 1 ELSE 0 END AS removed")


FROM = ("FROM documents d LEFT JOIN agents o ON o.id = d.owner_id "
        "LEFT JOIN agents a ON a.id = d.author_id")


def versions(conn, name):
    """Every version row of `name`, oldest first (bodies left out)."""
    return conn.execute(f"SELECT {_row(conn)} {FROM} WHERE d.name = ? ORDER BY d.version",
                        (name,)).fetchall()


def newest(conn, name):
    """The newest version row of `name` (body left out), or None."""
    return conn.execute(f"SELECT {_row(conn)} {FROM} WHERE d.name = ? ORDER BY d.version DESC "
                        "LIMIT 1", (name,)).fetchone()


def version(conn, name, number):
    """One version row of `name`, body included."""
    return conn.execute(f"SELECT {_row(conn)}, d.body {FROM} WHERE d.name = ? AND d.version = ?",
                        (name, number)).fetchone()


def insert(conn, name, number, owner_id, visibility, body, author_id):
    """A new version; a NULL body removes the document."""
    conn.execute("INSERT INTO documents (name, version, owner_id, visibility, body, "
                 "author_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (name, number, owner_id, visibility, body, author_id, clock.now()))


def current(conn, pattern=None):
    """The newest version row of every document not removed, by name; `pattern`
    is a GLOB."""
    where, params = "", []
    if pattern is not None:
        condition, parameter = conn.sql.glob("d.name", pattern)
        where, params = f" AND {condition}", [parameter]
    return conn.execute(
        f"SELECT {_row(conn)} {FROM} WHERE d.version = (SELECT max(version) FROM documents "
        f"WHERE name = d.name) AND d.body IS NOT NULL{where} ORDER BY d.name", params).fetchall()
