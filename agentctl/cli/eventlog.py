"""The event log as the programs print it: agent-log's text lines and its columns,
which agent-top's log key and agent-run's stream-json print too. Each event's line
is its kind's (agentctl.eventkinds)."""

import time

from agentctl import eventkinds, jsonin
from agentctl.cli.output import Column
from agentctl.ids import short
from agentctl.store import events, registry


class Names:
    """Agent names by id, each read once (a line names other agents: a parent, a
    recipient, an actor)."""

    def __init__(self, conn):
        self.conn, self.known = conn, {}

    def __call__(self, agent_id):
        if agent_id is None:
            return None
        if agent_id not in self.known:
            self.known.update(registry.names(self.conn, [agent_id]))
            self.known.setdefault(agent_id, None)
        return self.known[agent_id] or short(agent_id)


def text_lines(rows, names):
    """The default text lines, without a dict per event: 100,000 events are listed in
    well under a second."""
    decode, stamps, out = decoder(), {}, []
    for row in rows:
        seq, agent_id, kind, detail, actor, created, data, name = row
        second = int(created)
        stamp = stamps.get(second)
        if stamp is None:
            stamp = stamps[second] = local(second)
        text = eventkinds.line(kind, fields(row, decode), actor, names, detail)
        out.append(f"{stamp}  {name or short(agent_id):<12}  {kind:<10}  {text}".rstrip()
                   + "\n")
    return "".join(out)


def fields(row, decode):
    """An event's fields by name (store.events.fields) from its row."""
    return events.fields(row[2], row[3], decode(row[6]) if row[6] else None)


def item(row, names):
    """An event as a dict of COLUMNS' keys."""
    seq, agent_id, kind, detail, actor, created, data, name = row
    data = decoder()(data) if data else None
    return {"id": seq, "seq": seq, "time": created, "agent": agent_id, "name": name,
            "kind": kind, "actor": actor, "detail": detail, "data": data,
            "summary": eventkinds.line(kind, events.fields(kind, detail, data), actor, names,
                                       detail)}


def decoder():
    """The C scanner itself: json.loads' checks of whitespace around the object cost
    more than the scan, and agentctl writes the payloads (one object, no space)."""
    import json  # (start-up: 1 ms, only for events with data: agent-log -q reads none)
    scan = json.JSONDecoder().scan_once
    return lambda text: scan(text, 0)[0]


def local(t):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


COLUMNS = [
    Column("seq", "SEQ"),
    Column("time", "TIME", human=lambda r: local(r["time"])),
    Column("agent", "AGENT", human=lambda r: short(r["agent"])),
    Column("name", "NAME", human=lambda r: r["name"] or short(r["agent"]),
           machine=lambda r: r["name"]),
    Column("kind", "KIND"),
    Column("summary", "SUMMARY"),
    Column("actor", "ACTOR"),
    Column("detail", "DETAIL"),
    Column("data", "DATA", human=lambda r: "-" if r["data"] is None else jsonin.dumps(r["data"])),
]
DEFAULT = ["time", "name", "kind", "summary"]
MACHINE = ["seq", "time", "agent", "name", "kind", "actor", "data", "summary"]
