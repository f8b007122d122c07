"""agent-mail: check, list, read and filter a mailbox."""

import sys
import time

import click

from agentctl import clock
from agentctl.clock import age, iso, until
from agentctl.cli.options import Seconds, complete_agents, output_options
from agentctl.cli.output import Column, pick, render
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import for_terminal
from agentctl.errors import NotFound, UsageError
from agentctl.ops import authority, mail
from agentctl.store import mailbox, registry
from agentctl.store.db import INTEGER_MAX, transaction
from agentctl.store.waits import wait_for_commit
from agentctl.text import cut, first_line


@program("agent-mail")
@click.option("-c", "--check", is_flag=True, help="Print the unread count; exit 0 if any, 1 if none.")
@click.option("-r", "--read", "read", is_flag=True,
              help="Print the bodies and mark exactly those read.")
@click.option("--peek", is_flag=True, help="With -r: print without marking read.")
@click.option("-a", "--all", "everything", is_flag=True, help="Include mail already read.")
@click.option("--from", "sender", metavar="SENDER", shell_complete=complete_agents,
              help="Only mail from SENDER (- for the operator); the rest stays unread.")
@click.option("--wait", "wait", type=Seconds(), metavar="SECONDS",
              help="Block until matching unread mail arrives (exit 1 on timeout).")
@click.option("--deferred", is_flag=True,
              help="List (or -c count) the mail deferred by agent-send --at instead.")
@output_options
@click.argument("args", nargs=-1, metavar="[AGENT] [ID...]", shell_complete=complete_agents)
def cli(db_path, check, read, peek, everything, sender, wait, deferred, fmt, columns, quiet,
        null, no_headers, args):
    """List the unread mail of AGENT (default self): id, sender, age, first line.

    Words of digits are mail ids: with -r, exactly those are read.
    """
    words = [a for a in args if is_mail_id(a)]
    refs = [a for a in args if not is_mail_id(a)]
    if len(refs) > 1:
        raise UsageError(f"one AGENT at a time (got {', '.join(refs)})")
    if words and not read:
        raise UsageError("mail ids go with -r")
    beyond = [w for w in words if len(w.lstrip("0")) > len(str(INTEGER_MAX))]
    if beyond:      # no mail has such an id (and int() refuses a few thousand digits)
        raise NotFound(f"no such mail: {cut(beyond[0], 40)}")
    ids = [int(w) for w in words]
    if deferred and (read or wait is not None or everything):
        raise UsageError("--deferred doesn't go with -r, -a or --wait: it is not mail yet")
    conn = connect(db_path, create=False)
    me = actor(conn)
    owner = registry.resolve(conn, refs[0]) if refs else me
    if owner is not None:
        authority.check(conn, me, owner, "read the mail of")
    if owner is None and not ids:
        raise UsageError("missing AGENT (and AGENT_ID is not set)")
    owner_id = owner["id"] if owner else None
    filtering = sender is not None
    sender_id = None
    if filtering and sender != "-":
        sender_id = registry.resolve(conn, sender)["id"]

    def criteria(read_too=False):       # ids: exactly those, read before or not
        return dict(ids=ids, sender=filtering, sender_id=sender_id,
                    unread_only=not (read_too or ids), waiting=deferred)

    def matching(read_too=False):
        return mailbox.select(conn, owner_id, **criteria(read_too))

    def all_there(rows):
        """The rows, when they hold every mail id asked for; else nothing is read."""
        missing = sorted(set(ids) - {r["id"] for r in rows})
        if missing:
            whose = f" for {owner['name']}" if owner and owner["name"] else ""
            raise NotFound(f"no such mail{whose}: {', '.join(map(str, missing))}")
        return rows

    def take():
        """The mail to print; with -r, marked read in the same transaction, before it
        is printed: of two readers of one mailbox, each mail goes to one."""
        if not read or peek:
            return all_there(matching(read_too=everything))
        with transaction(conn):
            return all_there(mail.take(conn, owner_id, **criteria(read_too=everything)))

    def arrived():
        """What --wait waits for: matching unread mail; with ids, every one of them."""
        found = matching()
        return len({r["id"] for r in found}) == len(set(ids)) if ids else bool(found)

    deadline = None if wait is None else time.monotonic() + wait
    while True:
        if deadline is not None:
            if not wait_for_commit(conn, deadline, arrived,
                                   next_due=lambda: mailbox.next_deferred(conn, owner_id)):
                if check:
                    click.echo(0)   # -c always prints the count
                return 1
        if check:
            count = mailbox.count_unread(conn, owner_id, sender=filtering, sender_id=sender_id) \
                if not (ids or deferred) else len(matching())
            click.echo(count)
            return 0 if count else 1
        rows = take()
        if rows or deadline is None or ids:
            break           # else another reader took what woke this one: wait on
    if read:
        if fmt == "table" and not (quiet or null):
            _print_bodies(rows)
        else:           # the machine formats, -q, -0: the one rendering path
            render([_item(r) for r in rows], pick(_columns(), columns, DEFAULT_READ),
                   fmt=fmt, quiet=quiet, null=null, no_headers=no_headers)
        return 0
    items = [_item(r) for r in rows]
    chosen = pick(_columns(), columns,
                  DEFAULT_DEFERRED if deferred else DEFAULT_ALL if everything else DEFAULT)
    render(items, chosen, fmt=fmt, quiet=quiet, null=null, no_headers=no_headers)


def _item(row):
    item = dict(row)
    item["from_label"] = registry.named(row["sender_id"], row["sender_name"])
    item["subject"] = first_line(row["body"])
    item["age"] = int(clock.now() - row["created_at"])
    return item


def _print_bodies(rows):
    for r in rows:
        kind = "" if r["kind"] == "mail" else f" ({r['kind']})"
        sender = registry.named(r["sender_id"], r["sender_name"])
        sys.stdout.write(for_terminal(f"--- mail {r['id']} from {sender}{kind} "
                                      f"at {iso(r['created_at'])} ---\n{r['body']}\n"))


def _columns():
    return [
        Column("id", "ID"),
        Column("from", "FROM", human=lambda r: r["from_label"], machine=lambda r: r["sender_id"]),
        Column("to", "TO", machine=lambda r: r["recipient_id"],
               human=lambda r: registry.named(r["recipient_id"], r["recipient_name"])),
        Column("kind", "KIND"),
        Column("age", "AGE", human=lambda r: age(r["age"])),
        Column("created", "CREATED", machine=lambda r: iso(r["created_at"])),
        Column("due", "DUE", machine=lambda r: iso(r["deliver_at"]),
               human=lambda r: until(r["deliver_at"])),
        Column("read", "READ", machine=lambda r: iso(r["read_at"]),
               human=lambda r: "yes" if r["read_at"] else "no"),
        Column("subject", "SUBJECT"),
        Column("body", "BODY"),
    ]


DEFAULT = ["id", "from", "age", "subject"]
DEFAULT_ALL = ["id", "from", "age", "read", "subject"]
DEFAULT_DEFERRED = ["id", "from", "due", "subject"]
DEFAULT_READ = ["id", "from", "to", "kind", "created", "body"]


def is_mail_id(word):
    """ASCII digits only: str.isdigit() also takes '²', which int() refuses."""
    return word.isascii() and word.isdigit()


def main(argv=None):
    return run(cli, argv)
