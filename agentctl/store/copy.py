"""agent-db copy: every row of one database into another that holds none yet (a
SQLite file into PostgreSQL, to move up without losing history), ids kept.

The source is read in one snapshot; the destination is written in one
transaction, so a copy that fails leaves it as it was."""

from agentctl.errors import UsageError
from agentctl.ids import INIT_ID
from agentctl.store.db import marks, snapshot, transaction

# Every table, as agent-db copy names them (a new one is added at the end).
TABLES = ("agents", "messages", "turns", "mail", "documents", "events", "tool_runs",
          "requests", "batched", "layers", "endpoints")
# In an order that keeps every reference to a row already copied: endpoints before
# the agents that name one, agents by age (a parent, a history parent and a budget's
# account are older than the agent), turns before the tool runs, requests and batched
# calls that point at them, layers by id (a layer's below is older).
COPIED = ("endpoints",) + TABLES[:-1]
ORDER = {"agents": "created_at, id", "requests": "created_at, id",
         "batched": "created_at, id"}
BATCH = 1000


def holds_nothing(conn):
    """Whether the database holds nothing but init (as agentctl makes a new one)."""
    if conn.execute("SELECT count(*) FROM agents WHERE id != ?", (INIT_ID,)).fetchone()[0]:
        return False
    return not any(conn.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone()
                   for t in TABLES if t != "agents")


def copy(source, target, shown_target):
    """Copy every row of `source` into `target`; returns {table: rows copied}."""
    if not holds_nothing(target):
        raise UsageError(f"{shown_target}: holds agents or history already; "
                         "copy into a new, empty database")
    counts = {}
    with snapshot(source), transaction(target):
        if target.sql.defer_foreign_keys:
            target.execute(target.sql.defer_foreign_keys)
        target.execute("DELETE FROM agents WHERE id = ?", (INIT_ID,))   # the source's instead
        for table in COPIED:
            columns = None
            counts[table] = 0
            rows = source.execute(f"SELECT * FROM {table} ORDER BY {ORDER.get(table, 'id')}")
            while True:
                batch = rows.fetchmany(BATCH)
                if not batch:
                    break
                if columns is None:
                    columns = list(batch[0].keys())
                    insert = (f"INSERT INTO {table} ({', '.join(columns)}) "
                              f"VALUES {marks(columns)}")
                target.executemany(insert, [tuple(r) for r in batch])
                counts[table] += len(batch)
        if target.dialect == "postgresql":
            from agentctl.store import pg  # (an optional extra: postgres)
            pg.set_sequences(target)
    return {table: counts[table] for table in TABLES}
