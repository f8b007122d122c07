"""The schema, as named, append-only migrations (sqlite-utils Migrations): 0001 to
0010 in store/migrate_early.py, 0011 on in store/migrate_late.py, imported in that
order, which is the order they are applied in.

The schema is a public interface, documented in agentctl(5). A migration that
has been released is never edited: change the schema by appending one (to
migrate_late.py), and raise db.SCHEMA_VERSION to the new count.
"""

from sqlite_utils import Database

from agentctl.store import migrate_early, migrate_late  # noqa: F401 (in this order)

MIGRATIONS = migrate_early.MIGRATIONS


def apply(conn):
    MIGRATIONS.apply(Database(conn, execute_plugins=False))


def count():
    return len(MIGRATIONS._migrations)
