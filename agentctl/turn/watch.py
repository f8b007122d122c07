"""Those who watch a turn as it happens: agent-run --format stream-json and the
OpenTelemetry traces (agent-run(1), The stream and TRACING).

A watcher is told of the turn at the points where the turn records it: each row of
the event log and of the messages that the run commits (store.db.noted: a row is
seen once its transaction commits, never if it rolls back), and the moments no row
records: the turn beginning in this run, its model and tools known, a model call
starting, retried and returning, its text as it streams, a tool call starting and
returning, the run ending. There is no second event model: the rows are the event
log's and the history's.
"""

from agentctl.models.base import Gate
from agentctl.store import events, history


class Watcher:
    """What a watcher is told; each method does nothing unless a watcher overrides it.
    `rows` and `text` say whether it wants the committed rows and the streamed text
    (the turn then streams the model's reply, as it does at a terminal)."""

    rows = False
    text = False

    def begin(self, conn, agent, turn, resumed, model):
        """The turn (its row) starts in this run: new, or `resumed`; `model` is the
        models.base.Model its calls go to (its name, the options they send)."""

    def offered(self, model, toolset):
        """The turn's model (its name) and what it offers (a turn.toolset.Toolset) are
        known: its steps come next."""

    def committed(self, rows):
        """Rows the run committed, in the order it wrote them: ("events", a tuple of
        events.COLUMNS) or ("messages", a message row)."""

    def streamed(self, chunk):
        """A piece of the text of the model's reply, as it comes."""

    def calling(self, messages, tools):
        """A model call starts (the summary of a compaction's too)."""

    def called(self, reply=None, error=None):
        """The model call returned `reply`, or raised `error`."""

    def retrying(self, attempt, tries, status, reason, delay):
        """A try of the model call failed and another follows (models.base.Gate); told
        in the call's thread."""

    def tool(self, call):
        """A tool call (its tool_call message row) starts to run."""

    def tool_done(self, call, text=None, error=None):
        """The tool call returned the result `text` (None: it recorded none), or
        raised `error` (the turn paused, or was killed)."""

    def end(self, outcome=None, error=None):
        """The run of the turn is over: its Outcome, or the error agent-run exits with."""

    def traceparent(self):
        """The W3C trace context of the span running now, if the watcher traces."""
        return None


class Watch:
    """The watchers of one run, told together; the connection's `watch` while the run
    lasts (store.db.noted)."""

    def __init__(self, watchers):
        self.watchers = [w for w in watchers if w is not None]
        self.rows = any(w.rows for w in self.watchers)
        self.text = any(w.text for w in self.watchers)
        self.conn = None
        self.written = []

    def __bool__(self):
        return bool(self.watchers)

    def attach(self, conn):
        self.conn = conn
        conn.watch = self if self.rows else None
        _running[0] = self

    def detach(self):
        if self.conn is not None and self.conn.watch is self:
            self.conn.watch = None
        if _running[0] is self:
            _running[0] = None

    # -- the rows, from the storage layer
    def wrote(self, table, rowid):
        self.written.append((table, rowid))

    def discarded(self):
        self.written = []

    def committed(self):
        written, self.written = self.written, []
        if not written:
            return
        found = {("events", row[0]): row for row in
                 events.numbered(self.conn, [i for t, i in written if t == "events"])}
        found.update((("messages", row["id"]), row) for row in
                     history.numbered(self.conn, [i for t, i in written if t == "messages"]))
        rows = [(table, found[table, i]) for table, i in written if (table, i) in found]
        for w in self.watchers:
            if w.rows:
                w.committed(rows)

    # -- the moments between
    def begin(self, conn, agent, turn, resumed, model):
        for w in self.watchers:
            w.begin(conn, agent, turn, resumed, model)

    def offered(self, model, toolset):
        for w in self.watchers:
            w.offered(model, toolset)

    def streamed(self, chunk):
        for w in self.watchers:
            if w.text:
                w.streamed(chunk)

    def calling(self, messages, tools):
        for w in self.watchers:
            w.calling(messages, tools)

    def called(self, reply=None, error=None):
        for w in self.watchers:
            w.called(reply, error)

    def retrying(self, attempt, tries, status, reason, delay):
        for w in self.watchers:
            w.retrying(attempt, tries, status, reason, delay)

    def gate(self, shared):
        """The gate the turn hands its model (models.base.Gate): `shared` (ops.gate.Gate,
        None for a model that calls no API or with $AGENTCTL_ENDPOINT_STATE off), with
        the watchers told of each retry."""
        return Told(shared, self) if shared is not None or self.watchers else None

    def tool(self, call):
        for w in self.watchers:
            w.tool(call)

    def tool_done(self, call, text=None, error=None):
        for w in self.watchers:
            w.tool_done(call, text, error)

    def end(self, outcome=None, error=None):
        for w in self.watchers:
            w.end(outcome, error)


class Told(Gate):
    """The endpoint's gate, if any, and the watchers told of each retry."""

    def __init__(self, shared, watch):
        self.shared, self.watch = shared, watch

    def acquire(self):
        if self.shared is not None:
            self.shared.acquire()

    def release(self, limits, backoff):
        return self.shared is not None and self.shared.release(limits, backoff)

    def retrying(self, attempt, tries, status, reason, delay):
        self.watch.retrying(attempt, tries, status, reason, delay)


NOBODY = Watch(())
_running = [None]       # the Watch of the run in this process


def traceparent():
    """The trace context of the tool call running now (a fork tool's), for the child
    it makes to continue (agents.trace); None when no watcher traces the run."""
    watch = _running[0]
    if watch is None:
        return None
    return next((t for t in (w.traceparent() for w in watch.watchers) if t), None)
