"""agent-run --format stream-json (agent-run(1), STREAM-JSON): the turn as it happens,
one JSON object a line, written the moment each thing happens, for a program that
drives and watches a turn. A released machine format: fields are added, never
renamed or given another meaning.

Each line is one of the turn's happenings as agentctl already records them: an
event of the event log (as agent-log --format jsonl prints it), a message of the
history (as agent-replay --format jsonl prints it), a piece of the model's streamed
text, and last the turn's record (as agent-run --format json prints it), or the
error agent-run exits with.
"""

import json
import sys

from agentctl import keys
from agentctl.cli import eventlog
from agentctl.errors import AgentctlError
from agentctl.store import history
from agentctl.turn.watch import Watcher


class Stream(Watcher):
    rows = True
    text = True

    def __init__(self, conn, out=None):
        self.conn, self.out = conn, out or sys.stdout
        self.names = eventlog.Names(conn)
        self.agent_id = self.turn_id = None
        self.shown = set()          # the messages written: each once
        self.text_stream = keys.Stream(self._text)   # a key the model repeats is never shown

    def line(self, record):
        self.out.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.out.flush()

    def begin(self, conn, agent, turn, resumed, model):
        """The turn's messages so far (its prompt, its inbox; a resumed turn's steps)."""
        self.agent_id, self.turn_id = agent["id"], turn["id"]
        self._messages(history.of_turn(conn, turn["id"]))

    def committed(self, rows):
        for table, row in rows:
            if table == "messages":
                self._messages([row])
            else:
                event = eventlog.item(row, self.names)
                self.line({"type": "event", **{k: event[k] for k in eventlog.MACHINE}})

    def _messages(self, rows):
        for row in rows:
            if row["id"] in self.shown or row["agent_id"] != self.agent_id:
                continue        # (a child's prompt, written by a fork: the child's)
            self.shown.add(row["id"])
            self.line({"type": "message", **dict(row)})

    def streamed(self, chunk):
        self.text_stream(chunk)

    def called(self, reply=None, error=None):
        self.text_stream.flush()        # what was held back, in case a key began there

    def _text(self, text):
        if text:
            self.line({"type": "text", "agent": self.agent_id, "turn": self.turn_id,
                       "text": text})

    def end(self, outcome=None, error=None):
        self.text_stream.flush()
        if outcome is not None:
            self.line({"type": "result", **outcome.record()})
        elif isinstance(error, AgentctlError):
            self.line({"type": "error", "exit": error.code, "error": keys.redact(str(error))})
