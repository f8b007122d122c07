"""agent-run: execute one turn of one agent, then exit."""

import json
import os
import sys

import click

from agentctl import keys
from agentctl.cli.options import Count, complete_agents
from agentctl.cli.output import Column, render
from agentctl.cli.program import connect, program, run as run_program
from agentctl.cli.stdio import Interrupted, for_terminal, warn
from agentctl.errors import UsageError
from agentctl.ids import INIT_ID
from agentctl.ops import asks, budget, deadlines, lease
from agentctl.store import asks as asks_store, registry
from agentctl.store.db import transaction
from agentctl.text import first_line
from agentctl.turn import runner
from agentctl.turn.toolset import Toolset
from agentctl.turn.watch import Watch
from agentctl.voice import shown_call


@program("agent-run")
@click.option("--all", "everything", is_flag=True,
              help="One turn for every agent with pending input or a due timer.")
@click.option("-j", "--jobs", type=click.IntRange(1, 64), default=1, show_default=True,
              help="With --all: how many turns run at once.")
@click.option("-m", "--model", metavar="MODEL", help="The model for this turn (overrides the agent's).")
@click.option("--max-steps", type=Count(1), default=20, show_default=True,
              help="At most this many model calls in the turn.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "jsonl", "stream-json"]),
              default="text", metavar="FORMAT",
              help="text (the final reply, default), json / jsonl: each turn's record, one "
                   "JSON object a line, or stream-json: the turn as it happens, a JSON "
                   "object a line.")
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
@click.option("--no-prompt", is_flag=True,
              help="Never ask at the terminal: a request pauses the agent, as under cron.")
@click.option("--list-tools", is_flag=True,
              help="Run nothing: list the tools AGENT's next turn would offer (--format "
                   "json: with their schemas).")
@click.option("--check", is_flag=True,
              help="With --list-tools: contact every configured MCP server now, in AGENT's "
                   "sandbox, and list each (ok and its tools, or why not); exit 1 when one "
                   "fails.")
@click.argument("agent", required=False, shell_complete=complete_agents)
def cli(db_path, everything, jobs, model, max_steps, fmt, as_json, no_prompt, list_tools,
        check, agent):
    """Run one turn of AGENT (default self): take all its pending input at
    once, call the model, run its tool calls, persist, release. Prints the
    turn's final assistant text."""
    if as_json and fmt == "stream-json":
        raise UsageError("--json is --format json: not with --format stream-json")
    as_json = as_json or fmt != "text"
    # --all's claim this run takes over (a run it started): not for the turn's tools
    handed = os.environ.pop(lease.HANDED, None)
    if everything:
        if agent:
            raise UsageError("--all takes no AGENT")
        if fmt == "stream-json":
            raise UsageError("--format stream-json streams one turn: not with --all "
                             "(give each agent-run one AGENT)")
        from agentctl.cli import runall  # (start-up: 4 ms, only for --all)
        return runall.run_all(db_path, jobs, model, max_steps, as_json)
    if jobs != 1:
        raise UsageError("-j goes with --all")
    if check and not list_tools:
        raise UsageError("--check goes with --list-tools")
    agent = agent or os.environ.get("AGENT_ID")
    if not agent:
        raise UsageError("missing AGENT (and AGENT_ID is not set)")
    conn = connect(db_path, create=False)
    if list_tools:
        if fmt == "stream-json":
            raise UsageError("--list-tools lists: --format table, json or jsonl")
        fmt = fmt if fmt != "text" or not as_json else "json"
        return _check(conn, agent, fmt) if check else _list_tools(conn, agent, fmt)
    deadlines.carry_out(conn)
    stream = sys.stdout.isatty() and not as_json
    streamed, interrupted = [], []

    def show(text):
        sys.stdout.write(for_terminal(text))
        sys.stdout.flush()

    shown = keys.Stream(show)       # a key the model repeats is never shown

    def on_text(chunk):
        streamed.append(chunk)
        shown(chunk)

    def ask(row):
        """The operator asked at the terminal, on a line of its own after streamed text;
        ^C at the question leaves the request waiting and the agent paused (P)."""
        shown.flush()
        if streamed and not streamed[-1].endswith("\n"):
            show("\n")
            streamed.append("\n")
        try:
            return _prompt(row, registry.label(registry.get(conn, row["agent_id"])))
        except (KeyboardInterrupt, Interrupted):
            sys.stderr.write("\n")
            interrupted.append(row["id"])
            return None

    prompt = None if no_prompt or not _terminals() else ask
    if prompt is not None:
        _answer_waiting(conn, agent, prompt)
        if interrupted:
            raise Interrupted()
    lines = None
    if fmt == "stream-json":
        from agentctl.cli import streamjson  # (start-up: 2 ms, only for --format stream-json)
        lines = streamjson.Stream(conn)
    watchers = [lines, _tracer()]
    try:
        outcome = runner.run(conn, agent, model=model, max_steps=max_steps,
                             on_text=on_text if stream else None,
                             warn=lambda line: warn("agent-run", line), prompt=prompt,
                             watch=Watch(watchers), handed=handed)
    finally:
        shown.flush()
    if fmt == "stream-json":
        pass        # its record was its last line
    elif as_json:
        click.echo(json.dumps(outcome.record(), ensure_ascii=False))
    elif streamed:
        click.echo("")
    elif outcome.text:
        click.echo(for_terminal(outcome.text))
    if outcome.cut:
        warn("agent-run", f"{registry.label(registry.get(conn, outcome.agent_id))}: a reply "
                          "was cut at the token limit (AGENTCTL_MAX_TOKENS, or the server's)")
    if outcome.status == "over_budget":
        me = registry.get(conn, outcome.agent_id)
        warn("agent-run", f"{registry.label(me)}: turn ended over budget "
                          f"({budget.words(budget.account(conn, me))})")
    if outcome.status == "paused":
        me = registry.get(conn, outcome.agent_id)
        asked = asks_store.pending(conn, me["id"])
        if asked:
            warn("agent-run", f"{registry.label(me)}: paused: request {asked[0]['id']} "
                              "waits for an answer (agent-answer)")
    if outcome.status == "task":
        warn("agent-run", f"{registry.label(registry.get(conn, outcome.agent_id))}: a call's "
                          "MCP task still runs: the agent's next run polls it")
    if outcome.status == "killed":
        warn("agent-run", f"{registry.label(registry.get(conn, outcome.agent_id))}: "
                          "killed by KILL during its turn (voided)")
        return 3
    if interrupted:
        raise Interrupted()         # the request waits; agent-run says so and exits 130
    return 0


def _tracer():
    """The run's OpenTelemetry tracer (turn.tracing), or None: its code is loaded only
    when a variable of OpenTelemetry's is set (OTEL_*), which tracing.start() reads."""
    if not any(name.startswith("OTEL_") for name in os.environ):
        return None
    from agentctl.turn import tracing  # (start-up: 0.5 ms, only with an OTEL_ variable)
    return tracing.start(lambda line: warn("agent-run", line))


def _terminals():
    """Whether agent-run may ask at the terminal: stdin, stdout and stderr all are one
    (as sudo asks for a password); under cron, in a pipe or with --all it never does."""
    try:
        return sys.stdin.isatty() and sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _prompt(row, who):
    """Ask the operator at the terminal: (how, text), or None (end of input: pause)."""
    if row["kind"] == "question":
        sys.stderr.write(for_terminal(f"agent-run: {who} asks: {row['question']}\n",
                                      sys.stderr) + "answer> ")
    elif row["kind"] == asks_store.ELICITATION:
        from agentctl.ops import elicitation  # (start-up: 1 ms, only for such a question)
        sys.stderr.write(for_terminal(
            f"agent-run: {who}: the MCP server of {row['tool']} asks: {row['question']}\n"
            f"(its form: {elicitation.fields(row['arguments'])}; a JSON object, or the "
            "text of its one field)\n", sys.stderr) + "answer> ")
    else:
        sys.stderr.write(for_terminal(f"agent-run: {who} asks to run "
                                      f"{shown_call(row['tool'], row['arguments'])}\n",
                                      sys.stderr) + "approve? [y/N, or a reason to deny] ")
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        return None
    line = line.strip()
    if row["kind"] in ("question", asks_store.ELICITATION):
        return ("answer", line) if line else None
    if line.lower() in ("y", "yes"):
        return "approve", None
    return "deny", (line if line.lower() not in ("", "n", "no") else "denied at the terminal")


def _answer_waiting(conn, ref, prompt):
    """A paused agent of the operator's: ask its requests here, then run it."""
    agent = registry.resolve(conn, ref)
    if agent["status"] != "P" or agent["parent_id"] != INIT_ID:
        return
    for row in asks_store.pending(conn, agent["id"]):
        while True:
            decided = prompt(row)
            if decided is None:
                return
            try:
                with transaction(conn):
                    asks.decide(conn, row["id"], None, *decided)
                break
            except UsageError as e:     # (an answer that doesn't fit its form: again)
                warn("agent-run", str(e))


def _list_tools(conn, ref, fmt):
    """The tools the agent's next turn would offer: a table, or JSON with the schemas.
    (MCP servers its grants reach are started, to list theirs, and stopped.)"""
    toolset = Toolset(conn, registry.resolve(conn, ref), lambda line: warn("agent-run", line))
    try:
        rows = [{"id": n, "name": n,
                 "source": source if where is None else f"{source} {where}",
                 "confined": confined, "description": description, "parameters": schema}
                for n, source, where, confined, description, schema in toolset.listing()]
        unsafe = toolset.sandbox_problem()
        if unsafe:
            warn("agent-run", f"warning: no sandbox: {unsafe}: each call of its external "
                              "tools will fail")
    finally:
        toolset.close()
    columns = [Column("name", "NAME"), Column("source", "SOURCE"),
               Column("confined", "CONFINED", human=lambda r: "yes" if r["confined"] else "NO"),
               Column("description", "DESCRIPTION",
                      human=lambda r: first_line(r["description"], 70))]
    if fmt in ("json", "jsonl"):
        columns.append(Column("parameters", "PARAMETERS"))
    render(rows, columns, fmt="table" if fmt == "text" else fmt)
    return 0


def _check(conn, ref, fmt):
    """Every configured MCP server contacted now: a row each, and a line on stderr for
    each that fails; 1 when one does."""
    said = set()        # (a server the turn's listing started, and failed, is said once)

    def once(line):
        if line not in said:
            said.add(line)
            warn("agent-run", line)
    toolset = Toolset(conn, registry.resolve(conn, ref), once)
    try:
        rows = [{"id": name, "server": name, "transport": transport,
                 "status": "ok" if error is None else "failed", "tools": tools,
                 "seconds": seconds, "error": error}
                for name, transport, tools, seconds, error in toolset.check()]
    finally:
        toolset.close()
    for row in rows:
        if row["error"]:
            once(row["error"])
    render(rows, [Column("server", "SERVER"), Column("transport", "TRANSPORT"),
                  Column("status", "STATUS"), Column("tools", "TOOLS"),
                  Column("seconds", "SECONDS", human=lambda r: f"{r['seconds']:.2f}"),
                  Column("error", "ERROR", human=lambda r: first_line(r["error"] or "-", 60))],
           fmt="table" if fmt == "text" else fmt)
    return 1 if any(row["error"] for row in rows) else 0


def main(argv=None):
    return run_program(cli, argv)
