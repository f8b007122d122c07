"""agent-db: the database itself (check)."""

import sys

import click

from agentctl.cli.program import program, run
from agentctl.cli.stdio import for_terminal, warn
from agentctl.store import check as checking
from agentctl.store.db import Error, resolve_path


@program("agent-db", cls=click.Group, no_args_is_help=False)
@click.pass_context
def cli(ctx, db_path):
    """The database file itself: check it."""
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


def main(argv=None):
    return run(cli, argv)
