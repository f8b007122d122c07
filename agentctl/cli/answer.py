"""agent-answer: list the requests of paused agents, and decide them."""

import click

from agentctl import clock, voice
from agentctl.clock import age, until
from agentctl.cli.options import output_options
from agentctl.cli.output import Column, pick, render
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import read_body
from agentctl.errors import UsageError
from agentctl.ids import short
from agentctl.ops import asks, elicitation
from agentctl.store import asks as asks_store
from agentctl.store.db import transaction
from agentctl.text import first_line


@program("agent-answer")
@click.option("-c", "--check", is_flag=True,
              help="Print how many requests wait; exit 0 if any, 1 if none.")
@click.option("--approve", "approve", is_flag=True, help="Approve the tool call REQ.")
@click.option("--deny", "deny", is_flag=True, help="Deny the tool call REQ (the model sees "
                                                   "REASON).")
@output_options
@click.argument("req", required=False, metavar="[REQ]", shell_complete=lambda ctx, param, word:
                _complete_requests(ctx, word))
@click.argument("text", required=False, metavar="[TEXT | - | REASON]")
def cli(db_path, check, approve, deny, fmt, columns, quiet, null, no_headers, req, text):
    """List the requests that wait for an answer (id, agent, kind, age, the question or
    the tool call); with REQ (an id, or a unique prefix of 4 or more), decide it:
    REQ TEXT (or - for stdin) answers a question, --approve REQ and --deny REQ
    [REASON] decide a tool call. The first decision wins. The actor is self
    ($AGENT_ID: an ancestor of the asker), else the operator."""
    if approve and deny:
        raise UsageError("--approve or --deny, not both")
    if req is None:
        if approve or deny or text is not None:
            raise UsageError("missing REQ")
        conn = connect(db_path, create=False)
        rows = [item(r) for r in asks_store.pending(conn)]
        if check:
            click.echo(len(rows))
            return 0 if rows else 1
        render(rows, pick(COLUMNS, columns, DEFAULT), fmt=fmt, quiet=quiet, null=null,
               no_headers=no_headers)
        return 0
    if check:
        raise UsageError("-c takes no REQ")
    if approve:
        if text is not None:
            raise UsageError("--approve takes no TEXT")
        how, body = "approve", None
    elif deny:
        how, body = "deny", read_body(text) if text == "-" else text
    else:
        how, body = "answer", read_body(text)
        if body is None:
            raise UsageError("missing TEXT (give it, or - to read it from stdin)")
    conn = connect(db_path, create=False)
    with transaction(conn):
        me = actor(conn)
        row = asks.decide(conn, req, me["id"] if me else None, how, body)
    click.echo(f"{row['id']} {row['decision']}")
    return 0


def _complete_requests(ctx, word):
    """Shell completion: the ids of the requests that wait."""
    try:
        conn = connect(ctx.params.get("db_path"), create=False)
        return [r["id"] for r in asks_store.pending(conn) if r["id"].startswith(word)]
    except Exception:
        return []


def item(row):
    what = row["question"] if row["kind"] == "question" else \
        voice.elicitation_what(row["tool"], row["question"], elicitation.fields(
            row["arguments"])) if row["kind"] == elicitation.KIND else \
        voice.shown_call(row["tool"], row["arguments"])
    return {"id": row["id"], "agent": row["agent_id"], "name": row["agent_name"],
            "kind": row["kind"], "age": int(clock.now() - row["created_at"]),
            "deadline": row["deadline"], "what": what}


COLUMNS = [
    Column("id", "ID"),
    Column("name", "AGENT", human=lambda r: r["name"] or short(r["agent"])),
    Column("agent", "AGENT_ID"),
    Column("kind", "KIND"),
    Column("age", "AGE", human=lambda r: age(r["age"])),
    Column("deadline", "DEADLINE", human=lambda r: until(r["deadline"]) if r["deadline"]
           else "-"),
    Column("what", "REQUEST", human=lambda r: first_line(r["what"].replace("\n", " "), 80)),
]
DEFAULT = ["id", "name", "kind", "age", "what"]


def main(argv=None):
    return run(cli, argv)
