"""agent-doc: shared documents (put, get, ls, log, rm)."""

import sys

import click

from agentctl import clock
from agentctl.clock import age, iso
from agentctl.cli.options import Count, output_options
from agentctl.cli.output import Column, pick, render
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import for_terminal, read_body, warn
from agentctl.errors import AgentctlError, UsageError
from agentctl.ops import docs
from agentctl.store.db import transaction

@program("agent-doc", cls=click.Group, no_args_is_help=False)
@click.pass_context
def cli(ctx, db_path):
    """Shared markdown documents, with an owner, a visibility and every version
    kept. The actor is self ($AGENT_ID), else the operator, who sees everything."""
    ctx.obj = db_path


def complete_docs(ctx, param, incomplete):
    """Shell completion: the names of the documents the actor can see."""
    try:
        conn, me = _open((ctx.parent or ctx).params.get("db_path"))   # no callback has run
        return [r["name"] for r in docs.listing(conn, me) if r["name"].startswith(incomplete)]
    except Exception:
        return []


def _open(db_path, create=False):
    """The connection and the actor's id (None: the operator); a database is made
    only to write (`create`: put), never to read one."""
    conn = connect(db_path, create)
    me = actor(conn)
    return conn, me["id"] if me else None


@cli.command("put")
@click.option("-v", "--visibility", type=click.Choice(docs.VISIBILITIES), metavar="VIS",
              help="private, subtree or global (default: private for a new document, "
                   "else unchanged); only the owner may change it.")
@click.option("--if-version", type=Count(0), metavar="N",
              help="Write only if the document is at version N now (0: it does not "
                   "exist); else exit 3.")
@click.argument("name", shell_complete=complete_docs)
@click.argument("text", required=False, metavar="[TEXT | -]")
@click.pass_context
def put(ctx, visibility, if_version, name, text):
    """Write a new version of NAME from TEXT, or from stdin (for -, or no TEXT
    and a pipe), and print its version number."""
    docs.check_name(name)
    body = read_body(text)
    if body is None:
        raise UsageError("missing TEXT (give it, or - to read it from stdin)")
    conn, me = _open(ctx.obj, create=True)
    with transaction(conn):
        version = docs.put(conn, me, name, body, visibility=visibility, if_version=if_version)
    click.echo(version)


@cli.command("get")
@click.option("-V", "--version", "version", type=Count(1), metavar="N",
              help="Print version N instead of the newest.")
@click.argument("name", shell_complete=complete_docs)
@click.pass_context
def get(ctx, version, name):
    """Print the document NAME (a newline is added if it lacks a final one)."""
    docs.check_name(name)       # (a bad name is a usage error, database or not)
    conn, me = _open(ctx.obj)
    body = docs.get(conn, me, name, version)["body"]
    sys.stdout.write(for_terminal(body if body.endswith("\n") else body + "\n"))


@cli.command("rm")
@click.argument("names", nargs=-1, required=True, metavar="NAME...",
                shell_complete=complete_docs)
@click.pass_context
def rm(ctx, names):
    """Remove each document NAME (its owner, or the operator); its versions stay."""
    conn, me = _open(ctx.obj)
    status = 0
    for name in names:
        try:
            with transaction(conn):
                docs.rm(conn, me, name)
        except AgentctlError as e:
            warn("agent-doc", str(e))
            status = status or e.code
    return status


@cli.command("ls")
@output_options
@click.argument("pattern", required=False)
@click.pass_context
def ls(ctx, fmt, columns, quiet, null, no_headers, pattern):
    """List the documents you can see, by name; PATTERN is a glob (* matches /
    too), and one ending in / lists everything under it.

    Columns: name version owner visibility size updated (default), and author
    with -o.
    """
    conn, me = _open(ctx.obj)
    now = clock.now()
    rows = [dict(r, id=r["name"], owner=docs.who(r, "owner"), author=docs.who(r, "author"),
                 age=now - r["created_at"]) for r in docs.listing(conn, me, pattern)]
    table = [Column("name", "NAME"), Column("version", "VERSION"), *_who(),
             Column("size", "SIZE"),
             Column("updated", "UPDATED", human=lambda r: age(r["age"]),
                    machine=lambda r: iso(r["created_at"]))]
    chosen = pick(table, columns, ["name", "version", "owner", "visibility", "size", "updated"])
    render(rows, chosen, fmt=fmt, quiet=quiet, null=null, no_headers=no_headers)


@cli.command("log")
@output_options
@click.argument("name", shell_complete=complete_docs)
@click.pass_context
def log(ctx, fmt, columns, quiet, null, no_headers, name):
    """List the versions of NAME, oldest first (-q: the version numbers).

    Columns: version author owner visibility size created (default), and
    removed with -o. A version that removed the document has no size.
    """
    conn, me = _open(ctx.obj)
    rows = [dict(r, id=r["version"], owner=docs.who(r, "owner"), author=docs.who(r, "author"))
            for r in docs.versions(conn, me, name)]
    table = [
        Column("version", "VERSION"), *_who(),
        Column("size", "SIZE", human=lambda r: "removed" if r["removed"] else str(r["size"])),
        Column("created", "CREATED", machine=lambda r: iso(r["created_at"])),
        Column("removed", "REMOVED", machine=lambda r: bool(r["removed"]),
               human=lambda r: "yes" if r["removed"] else "no"),
    ]
    chosen = pick(table, columns, ["version", "author", "owner", "visibility", "size", "created"])
    render(rows, chosen, fmt=fmt, quiet=quiet, null=null, no_headers=no_headers)


def _who():
    """The author, owner and visibility columns: names for people, ids for machines."""
    return [Column("author", "AUTHOR", human=lambda r: r["author"],
                   machine=lambda r: r["author_id"]),
            Column("owner", "OWNER", human=lambda r: r["owner"], machine=lambda r: r["owner_id"]),
            Column("visibility", "VISIBILITY")]


def main(argv=None):
    return run(cli, argv)
