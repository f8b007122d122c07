"""Where SQLite's SQL and PostgreSQL's differ (agentctl(5), BACKENDS): each difference
named once, a member of both dialects, and the statements built from them.

A connection carries its dialect as `conn.sql` (db.Connection: SQLite, pg.Connection:
PostgreSQL), and a module writes the difference by name, `f"... <= {conn.sql.now}"`,
so that each backend receives SQL that is already its own: nothing rewrites a
statement's text after it is written. Each member is a constant (or a function of
constants), so a statement's text is the same every time (statement caches).

Every other spelling in the storage layer is one both backends read alike; a test
finds SQLite's own spellings anywhere else (tests/test_postgresql.py)."""


class SQLite:
    """A SQLite file's spellings (db.Connection.sql)."""

    name = "sqlite"

    # The current Unix time, in seconds (a real number): conditions on times need
    # no parameter.
    now = "((julianday('now') - 2440587.5) * 86400.0)"

    # LIKE that ignores ASCII case (SQLite's LIKE does).
    ilike = "LIKE"

    # A parameter that is text, where nothing else says so: the first row of a
    # recursive CTE, whose columns take their types from it.
    text_param = "?"

    # Whether the rows one executemany() inserts in a write transaction have
    # consecutive ids (SQLite: one writer, max(id) + 1 onwards).
    consecutive_ids = True

    # The statement that defers the checks of foreign keys to the commit, in a
    # write transaction (agent-db copy), or None.
    defer_foreign_keys = "PRAGMA defer_foreign_keys = ON"

    @staticmethod
    def octet_length(expr):
        """The length of the text `expr` in bytes (UTF-8)."""
        return f"length(CAST({expr} AS BLOB))"

    @staticmethod
    def greatest(*exprs):
        """The largest of `exprs`, none of them NULL (the two differ on NULL)."""
        return f"max({', '.join(exprs)})"

    @staticmethod
    def glob(expr, pattern):
        """(condition, parameter): `expr` matches the GLOB `pattern` (* any text,
        ? one character, [...] a set, [^...] not in it), case sensitive."""
        return f"{expr} GLOB ?", pattern


class PostgreSQL:
    """A PostgreSQL database's spellings (pg.Connection.sql)."""

    name = "postgresql"
    now = "extract(epoch from clock_timestamp())"
    ilike = "ILIKE"
    text_param = 'CAST(? AS TEXT) COLLATE "C"'
    consecutive_ids = False     # a sequence's numbers may have gaps: each id is read
    defer_foreign_keys = None   # (agent-db copy inserts rows in an order that needs none)

    @staticmethod
    def octet_length(expr):
        return f"octet_length({expr})"

    @staticmethod
    def greatest(*exprs):
        return f"greatest({', '.join(exprs)})"

    @staticmethod
    def glob(expr, pattern):
        return f"{expr} ~ ?", glob_regex(pattern)


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
