"""The event log (agentctl(5), events; agent-log(1)): a row for every change of
state, written in the transaction that makes the change, numbered by a sequence
that only grows (AUTOINCREMENT: pruning never hands a number out again). What
each kind's data holds is declared with its line in agentctl/eventkinds.py (KINDS);
the released detail text made of it is declared here: record() writes by the
declarations, fields() reads by them."""

import functools
import math
import re

from agentctl import clock, jsonin
from agentctl.eventkinds import KINDS
from agentctl.store.db import marks, noted

# The detail text of the kinds released before the event log (agentctl(5)), made of
# their fields: the first template whose fields an event has. (Those events have no
# data: fields() reads their fields back from it.)
DETAILS = {
    "fork": ("{parent} {at}",),
    "signal": ("{signal}",),
    "exit": ("killed by {signal}", "exited {code}"),
    "reparent": ("{old} {new}",),
    "budget": ("exhausted {spent} {budget}",),
}
NUMBERS = frozenset(("at", "code", "spent", "budget"))     # whole numbers in a detail


def _shapes(spec):
    """[(the fields required, the fields allowed)] of a kind's fields (Kind.fields)."""
    shapes = []
    for shape in spec.split("|"):
        names = shape.split()
        shapes.append((frozenset(n for n in names if not n.endswith("?")),
                       frozenset(n.rstrip("?") for n in names)))
    return shapes


_SHAPES = {name: _shapes(kind.fields) for name, kind in KINDS.items()}


@functools.cache
def _templates(kind):
    """[(a detail template of `kind`, the fields it names)], made at their first use."""
    return [(t, re.findall(r"{(\w+)}", t)) for t in DETAILS.get(kind, ())]


@functools.cache
def _patterns(kind):
    """The detail templates of `kind` as patterns that read their fields back, compiled
    at their first use (an old event read), not at every program's start."""
    return [re.compile(re.sub(r"\\{(\w+)\\}", r"(?P<\1>\\S+)", re.escape(t)))
            for t in DETAILS.get(kind, ())]


COLUMNS = "e.id, e.agent_id, e.kind, e.detail, e.actor_id, e.created_at, e.data, a.name"

# JSON without importing json (a program's start-up): what an event carries is flat,
# numbers and short texts.
_ESCAPES = {**{c: f"\\u{c:04x}" for c in range(32)}, ord('"'): '\\"', ord("\\"): "\\\\",
            8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r", 0x2028: "\\u2028",
            0x2029: "\\u2029"}


def _value(value):
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "null"
    return '"' + str(value).encode("utf-8", "replace").decode("utf-8").translate(_ESCAPES) + '"'


def payload(data):
    """A flat dict as a JSON object; None values left out."""
    return "{" + ", ".join(f"{_value(k)}: {_value(v)}" for k, v in data.items()
                           if v is not None) + "}"


def check(kind, data):
    """Raise ValueError (a bug) unless `data` is a shape of `kind` that KINDS declares,
    of numbers, texts and None."""
    shapes = _SHAPES.get(kind)
    if shapes is None:
        raise ValueError(f"event {kind!r}: no such kind (eventkinds.KINDS)")
    given = {k for k, v in data.items() if v is not None}
    if not any(required <= given and allowed.issuperset(data) for required, allowed in shapes):
        raise ValueError(f"event {kind}: its data is {KINDS[kind].fields!r}, not "
                         f"{' '.join(sorted(given)) or 'empty'}")
    for key in given:
        if not isinstance(data[key], (int, float, str)):
            raise ValueError(f"event {kind}: {key} must be a number or a text, "
                             f"not {type(data[key]).__name__}")


def detail(kind, data):
    """The released detail text of an event of `kind` (DETAILS), or None."""
    for template, names in _templates(kind):
        if all(data.get(n) is not None for n in names):
            return template.format(**data)
    return None


def record(conn, agent_id, kind, actor=None, **data):
    """One event, in the caller's transaction: its data as KINDS declares it, and
    the detail made of it."""
    check(kind, data)
    cursor = conn.execute("INSERT INTO events (agent_id, kind, detail, actor_id, created_at, "
                          "data) VALUES (?, ?, ?, ?, ?, ?)",
                          (agent_id, kind, detail(kind, data), actor, clock.now(),
                           payload(data) if data else None))
    noted(conn, "events", cursor.lastrowid)


def fields(kind, text, data):
    """An event's fields by name: its data (decoded, or JSON text), or for an event
    written before the event log, which has none, those its detail `text` holds."""
    if data:
        if isinstance(data, str):
            return jsonin.loads(data, what="event data")
        return data
    for pattern in _patterns(kind):
        found = pattern.fullmatch(text or "")
        if found:
            return {k: int(v) if k in NUMBERS and v.isdigit() else v
                    for k, v in found.groupdict().items()}
    return {}


def latest(conn, agent_id, kind):
    """The fields of the agent's newest event of `kind`, or None."""
    row = conn.execute("SELECT detail, data FROM events WHERE agent_id = ? AND kind = ? "
                       "ORDER BY id DESC LIMIT 1", (agent_id, kind)).fetchone()
    return row and fields(kind, row[0], row[1])


def _where(agents, kinds, since, after):
    clauses, params = [], []
    if agents is not None:
        clauses.append(f"e.agent_id IN {marks(agents)}")
        params += list(agents)
    if kinds:
        clauses.append(f"e.kind IN {marks(kinds)}")
        params += list(kinds)
    if since is not None:
        clauses.append("e.created_at >= ?")
        params.append(since)
    if after is not None:
        clauses.append("e.id > ?")
        params.append(after)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def select(conn, agents=None, kinds=None, since=None, after=None, last=None):
    """Events in sequence order, as tuples of COLUMNS (a listing may be 100,000 long):
    of `agents` (ids; None: all), of `kinds`, created at or after `since`, numbered
    above `after`; only the `last` N of those."""
    where, params = _where(agents, kinds, since, after)
    query = f"SELECT {COLUMNS} FROM events e JOIN agents a ON a.id = e.agent_id{where}"
    cursor = conn.cursor()
    cursor.row_factory = None
    if last is None:
        return cursor.execute(query + " ORDER BY e.id", params).fetchall()
    rows = cursor.execute(query + " ORDER BY e.id DESC LIMIT ?", (*params, last)).fetchall()
    return rows[::-1]


def numbered(conn, seqs):
    """The events numbered `seqs`, in sequence order, as tuples of COLUMNS."""
    if not seqs:
        return []
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor.execute(f"SELECT {COLUMNS} FROM events e JOIN agents a ON a.id = e.agent_id "
                          f"WHERE e.id IN {marks(seqs)} ORDER BY e.id",
                          list(seqs)).fetchall()


def newest(conn):
    """The newest event's number (0: none)."""
    return conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0]


def prune(conn, before):
    """Delete the events created before `before` (the toolkit's one deletion), but
    the newest event and each agent's newest budget event (budgets read it).
    Returns how many were deleted."""
    return conn.execute(
        "DELETE FROM events WHERE created_at < ? "
        "AND id != (SELECT max(id) FROM events) "
        "AND id NOT IN (SELECT max(id) FROM events WHERE kind = 'budget' GROUP BY agent_id)",
        (before,)).rowcount
