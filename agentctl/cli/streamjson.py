"""agent-run --format stream-json (agent-run(1), The stream): the turn as it happens,
one JSON object a line, written the moment each thing happens, for a program that
drives and watches a turn. A released machine format, versioned (VERSION): its
first line, init, says which version the lines that follow are of.

Each line is one of the turn's happenings as agentctl already records them: an
event of the event log (as agent-log --format jsonl prints it), a message of the
history (as agent-replay --format jsonl prints it, in the stream's names), a piece
of the model's streamed text, a retry of a model call, and last the turn's record
(as agent-run --format json prints it), or the error agent-run exits with. Every
line names a field the same way (NAMES): `agent` an agent's id, `turn` a turn's id,
`time` when it happened, in seconds since the epoch by the database's clock.
"""

import json
import sys
import threading

from agentctl import __version__, clock, keys
from agentctl.cli import eventlog
from agentctl.cli.program import failure
from agentctl.cli.stdio import LINE_BREAKS
from agentctl.store import history
from agentctl.turn.watch import Watcher

# MAJOR.MINOR. A minor version adds (a line type, a field, a value of a kind); a major
# version renames, removes or changes the meaning of what was there.
VERSION = "2.0"

# The types of line, in the order a run's lines may come (agent-run(1), The stream).
TYPES = ("init", "event", "message", "text", "retry", "result", "error")

# A message row's columns (store.history.MESSAGE_COLUMNS) by the stream's names.
NAMES = {"agent_id": "agent", "turn_id": "turn", "created_at": "time"}


class Stream(Watcher):
    rows = True
    text = True

    def __init__(self, conn, out=None):
        self.conn, self.out = conn, out or sys.stdout
        self.names = eventlog.Names(conn)
        self.agent = self.turn = None       # the agent's row, the turn's
        self.resumed = None
        self.held = []              # the lines the turn wrote before its tools were known
        self.shown = set()          # the messages written: each once
        self.lock = threading.Lock()    # a retry is told in the model call's thread
        self.text_stream = keys.Stream(self._text)   # a key the model repeats is never shown

    # -- the lines

    def line(self, type_, /, time=None, agent=None, turn=None, **fields):
        """A line: its type, time, agent and turn first, then `fields`; held until the
        init line is written."""
        record = {"type": type_, "time": clock.now() if time is None else time,
                  "agent": agent, "turn": turn, **fields}
        if self.held is not None and type_ != "init":
            self.held.append(record)
            return
        self._write(record)

    def _write(self, record):
        with self.lock:
            self.out.write(json.dumps(record, ensure_ascii=False) + "\n")
            self.out.flush()

    def _now(self, type_, /, **fields):
        """A line of this run's agent and turn, happening now."""
        self.line(type_, agent=self.agent and self.agent["id"],
                  turn=self.turn and self.turn["id"], **fields)

    def init(self, model=None, toolset=None):
        """The first line: the stream's version and agentctl's, the agent and its turn,
        the model and what the turn offers; what the run never came to know is null
        (it failed before: its error line follows)."""
        if self.held is None:
            return
        agent = self.agent
        tools = mcp = None
        if toolset is not None:
            tools = [{"name": name, "source": source, **_where(source, where)}
                     for name, source, where, *_ in toolset.listing()]
            mcp = [{"server": name, "transport": transport, "status": state, "error": error}
                   for name, transport, state, error in toolset.mcp_servers()]
        self._now("init", version=VERSION, agentctl=__version__,
                  name=agent and agent["name"], resumed=self.resumed, model=model,
                  tools=tools, mcp=mcp)
        held, self.held = self.held, None
        for record in held:
            self._write(record)

    # -- what the turn tells

    def begin(self, conn, agent, turn, resumed, model):
        """The turn's messages so far (its prompt, its inbox; a resumed turn's steps)."""
        self.agent, self.turn, self.resumed = agent, turn, resumed
        self._messages(history.of_turn(conn, turn["id"]))

    def offered(self, model, toolset):
        self.init(model, toolset)

    def committed(self, rows):
        for table, row in rows:
            if table == "messages":
                self._messages([row])
                continue
            event = eventlog.item(row, self.names)
            data = event["data"]
            self.line("event", event["time"], event["agent"],
                      data.get("turn") if isinstance(data, dict) else None,
                      **{k: event[k] for k in eventlog.MACHINE if k not in ("time", "agent")})

    def _messages(self, rows):
        for row in rows:
            if self.agent is None or row["id"] in self.shown or \
                    row["agent_id"] != self.agent["id"]:
                continue        # (the turn's input, before begin() shows it whole; a
                                # child's prompt, written by a fork: the child's)
            self.shown.add(row["id"])
            self.line("message", **{NAMES.get(k, k): v for k, v in dict(row).items()})

    def streamed(self, chunk):
        self.text_stream(chunk)

    def called(self, reply=None, error=None):
        self.text_stream.flush()        # what was held back, in case a key began there

    def retrying(self, attempt, tries, status, reason, delay):
        self.text_stream.flush()        # the failed try's text, before the next try's
        self._now("retry", attempt=attempt, tries=tries, status=status,
                  reason=keys.redact(reason), delay=round(delay, 3))

    def _text(self, text):
        if text:
            self._now("text", text=text)

    def end(self, outcome=None, error=None):
        self.text_stream.flush()
        self.init()         # (a run that failed before its tools were known)
        if outcome is not None:
            record = outcome.record()
            self.line("result", agent=record.pop("agent"), turn=record.pop("turn"), **record)
        elif error is not None:
            code, message, kind = failure(error)
            self._now("error", exit=code, kind=kind,
                      error=keys.redact(message).translate(LINE_BREAKS))


def _where(source, where):
    """Where a tool of `source` comes from, by the field its source names."""
    if source == "program":
        return {"path": where}
    if source == "mcp":
        return {"server": where}
    return {}
