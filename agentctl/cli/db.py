"""agent-db: the database itself (check, copy)."""

import os
import sys

import click

from agentctl.cli.program import program, run
from agentctl.cli.stdio import for_terminal, warn
from agentctl.store import check as checking, copy as copying
from agentctl.errors import NotFound, UsageError
from agentctl.store.db import Error, connect, is_url, resolve_path, shown


@program("agent-db", cls=click.Group, no_args_is_help=False)
@click.pass_context
def cli(ctx, db_path):
    """The database itself: check a SQLite file, copy one database into another."""
    ctx.obj = db_path


@cli.command("check")
@click.argument("path", required=False, metavar="[PATH]")
@click.pass_context
def check(ctx, path):
    """Check the database at PATH (default: --db, else $AGENTCTL_DB, else the
    default database) without creating, migrating or writing it: SQLite's
    integrity check, the foreign keys, the schema version, and text that is not
    UTF-8. Print each problem found and exit 1, or one line saying it is sound
    and exit 0."""
    path = resolve_path(path or ctx.obj)
    if is_url(path):
        raise UsageError(f"{shown(path)}: agent-db check reads a SQLite file; a PostgreSQL "
                         "server checks its own (amcheck)")
    conn = checking.open_read_only(path)
    try:
        found, summary = checking.findings(conn)
    except Error as e:
        found, summary = [f"can't be read: {e}"], "nothing checked"
    finally:
        conn.close()
    for line in found:
        sys.stdout.write(for_terminal(f"{path}: {line}\n"))
    if found:
        warn("agent-db", f"{path}: {len(found)} problem{'s' if len(found) != 1 else ''} "
                         f"found ({summary})")
        return 1
    sys.stdout.write(f"{path}: ok ({summary})\n")
    return 0


@cli.command("copy")
@click.argument("source", metavar="SRC")
@click.argument("target", metavar="DST")
def copy(source, target):
    """Copy every row of the database SRC (a SQLite file, or a postgresql:// URL) into
    DST, which must hold nothing yet (a new SQLite file, or an empty PostgreSQL
    database): agents, conversations, mail, turns, documents, the event log, ids
    kept. DST is written in one transaction: a copy that fails leaves it as it was.
    Prints the rows copied, table by table."""
    if source == target:
        raise UsageError("SRC and DST are the same database")
    if not is_url(source) and not os.path.isfile(source):
        raise NotFound(f"{source}: no such database")
    counts = copying.copy(connect(source), connect(target), shown(target))
    sys.stdout.write(" ".join(f"{table}={n}" for table, n in counts.items()) + "\n")
    return 0


def main(argv=None):
    return run(cli, argv)
