"""Document rows (agentctl(5), documents): every put and every rm inserts a version
row; nothing is updated or deleted. Who may see and write what is ops/docs.py's."""

from agentctl import clock

ROW = ("d.id, d.name, d.version, d.owner_id, o.name AS owner_name, d.visibility, "
       "d.author_id, a.name AS author_name, d.created_at, "
       "length(CAST(d.body AS BLOB)) AS size, CASE WHEN d.body IS NULL THEN 1 ELSE 0 END AS removed")
FROM = ("FROM documents d LEFT JOIN agents o ON o.id = d.owner_id "
        "LEFT JOIN agents a ON a.id = d.author_id")


def versions(conn, name):
    """Every version row of `name`, oldest first (bodies left out)."""
    return conn.execute(f"SELECT {ROW} {FROM} WHERE d.name = ? ORDER BY d.version",
                        (name,)).fetchall()


def newest(conn, name):
    """The newest version row of `name` (body left out), or None."""
    return conn.execute(f"SELECT {ROW} {FROM} WHERE d.name = ? ORDER BY d.version DESC "
                        "LIMIT 1", (name,)).fetchone()


def version(conn, name, number):
    """One version row of `name`, body included."""
    return conn.execute(f"SELECT {ROW}, d.body {FROM} WHERE d.name = ? AND d.version = ?",
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
        where = " AND d.name GLOB ?"
        params.append(pattern if conn.dialect == "sqlite" else glob_regex(pattern))
    return conn.execute(
        f"SELECT {ROW} {FROM} WHERE d.version = (SELECT max(version) FROM documents "
        f"WHERE name = d.name) AND d.body IS NOT NULL{where} ORDER BY d.name", params).fetchall()


def glob_regex(pattern):
    """SQLite's GLOB `pattern` as an anchored POSIX regular expression (PostgreSQL's
    `~`): * any text, ? one character, [...] a set ([^...] not in it)."""
    out, i = ["^"], 0
    while i < len(pattern):
        c = pattern[i]
        end = pattern.find("]", i + 2) if c == "[" else -1
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif end != -1:
            inner = pattern[i + 1:end]
            negate = inner.startswith("^")
            inner = inner[1:] if negate else inner
            out.append("[" + ("^" if negate else "") + inner.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append("\\" + c if not c.isalnum() else c)
        i += 1
    return "".join(out) + "$"
