"""agent-send: put mail in agents' mailboxes."""

import sys

import click

from agentctl import clock, jsonin
from agentctl.cli.options import complete_agents
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import read_body
from agentctl.errors import AgentctlError, UsageError
from agentctl.ops import mail
from agentctl.store.db import transaction
from agentctl.text import valid

BATCH = 1000     # --jsonl lines per transaction


@program("agent-send")
@click.option("--from", "sender", metavar="AGENT", shell_complete=complete_agents, help="The sender (default self, else the operator).")
@click.option("--jsonl", is_flag=True,
              help='Read {"to": ..., "body": ..., "from": ..., "at": ...} lines from stdin '
                   '("from" and "at" optional, as --from and --at).')
@click.option("--at", "at", metavar="TIME",
              help="Deliver at TIME: ISO 8601 (no zone: local time) or HH:MM (next one).")
@click.option("--in", "after", metavar="DURATION",
              help="Deliver after DURATION: 90, 90s, 15m, 2h or 1d.")
@click.argument("args", nargs=-1, metavar="AGENT... [TEXT | -]", shell_complete=complete_agents)
def cli(db_path, sender, jsonl, at, after, args):
    """Deliver TEXT (or stdin, for - or no TEXT and a pipe) to each AGENT and
    print the new mail ids. With --at or --in the mail is deferred: invisible
    to its recipient until then, then ordinary unread mail."""
    _when(at, after)                    # a bad time is a usage error before the database
    conn = connect(db_path, create=False)
    deliver_at = _when(at, after)       # by the database's clock, known once connected
    if jsonl:
        if args:
            raise UsageError("--jsonl takes no arguments: everything comes from stdin")
        return _bulk(conn, sender, deliver_at)
    if not args:
        raise UsageError("missing AGENT")
    if len(args) == 1:
        refs, body = args, read_body(None)
        if body is None:
            raise UsageError("missing TEXT (give it, or - to read it from stdin)")
    else:
        refs, body = args[:-1], read_body(args[-1])
    mail.check_body(body)
    with transaction(conn):
        ids = mail.send(conn, _sender(conn, sender), refs, body, deliver_at)
    sys.stdout.write("".join(f"{i}\n" for i in ids))


def _when(at, delay):
    """The time deferred mail is due, or None for mail delivered now."""
    if at is not None and delay is not None:
        raise UsageError("--at and --in don't go together")
    if at is not None:
        return clock.parse_time(at)
    if delay is not None:
        return clock.after(clock.parse_duration(delay))
    return None


def _sender(conn, ref):
    me = actor(conn)
    if ref is None:
        return mail.sender(conn, me["id"]) if me else None
    return mail.sender(conn, ref, me)


def _bulk(conn, default_sender, default_at):
    """One transaction per batch of lines: a bad line rolls its whole batch
    back (nothing of it is half-delivered) and stops with its line number."""
    import json  # (start-up: 1 ms, only for --jsonl)
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("--jsonl reads stdin, which is a terminal")
    stream = sys.stdin.buffer
    recipients, senders = {}, {}
    number = 0
    out = sys.stdout

    def lookup(cache, ref, fn):
        if ref not in cache:
            cache[ref] = fn(ref)
        return cache[ref]

    default_id = _sender(conn, default_sender)
    me = actor(conn)
    decode = json.JSONDecoder().decode      # json.loads would sniff each line's encoding
    while True:
        lines = [stream.readline() for _ in range(BATCH)]
        lines = [line for line in lines if line]
        if not lines:
            return 0
        items = []
        with transaction(conn):
            for raw in lines:
                number += 1
                if not raw.strip():
                    continue
                try:
                    line = raw.decode("utf-8", "replace")     # as all stdin: U+FFFD
                    jsonin.check(line, what="JSON")             # no nesting to crash on
                    item = decode(line)
                    if not isinstance(item, dict) or not isinstance(item.get("to"), str) \
                            or not isinstance(item.get("body"), str):
                        raise ValueError('want an object with string "to" and "body"')
                    body = valid(item["body"])      # a JSON escape like \udca0 is no UTF-8
                    mail.check_body(body)
                    to = lookup(recipients, item["to"], lambda r: mail.recipient(conn, r))
                    frm = item.get("from")
                    if frm is not None and not isinstance(frm, str):
                        raise ValueError('"from" must be a string (an agent, or - for the operator)')
                    from_id = default_id if frm is None else lookup(
                        senders, frm, lambda r: mail.sender(conn, r, me))
                    at = item.get("at")
                    if at is not None and not isinstance(at, str):
                        raise ValueError('"at" must be a string (a TIME, as for --at)')
                    items.append((from_id, to["id"], body,
                                  default_at if at is None else _when(at, None)))
                except (ValueError, TypeError) as e:
                    raise UsageError(f"line {number}: {e}")
                except AgentctlError as e:
                    raise type(e)(f"line {number}: {e}", e.code)
            ids = mail.deliver_many(conn, items)
        out.write("".join(f"{i}\n" for i in ids))


def main(argv=None):
    return run(cli, argv)
