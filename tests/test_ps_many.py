"""agent-ps over many agents (issue 42): rows read as tuples of the statement's fields,
seen() asked only of the rows it may change, each column made whole for the table."""

import itertools
import json
import time

from agentctl import clock
from agentctl.cli import ps
from agentctl.cli.output import Table, render
from agentctl.ops import proctable
from agentctl.store import proctable as stored

from .conftest import agent, fork


def test_the_statement_reads_its_fields_in_that_order(conn, monkeypatch):
    fork("-n", "a", "hello")
    cursors = []
    make = conn.cursor
    monkeypatch.setattr(conn, "cursor", lambda: cursors.append(make()) or cursors[-1])
    found = stored.rows(conn)
    cursor = cursors[-1]
    description = cursor.description
    assert [d[0] for d in description] == list(stored.FIELDS)
    assert len(set(stored.FIELDS)) == len(stored.FIELDS)
    a = dict(zip(stored.FIELDS, found[-1]))
    assert (a["name"], a["parent_name"], a["status"], a["msgs"], a["mail"]) == \
        ("a", "init", "S", 1, 0)


def _row(**given):
    row = dict.fromkeys(stored.FIELDS)
    row.update(id="x", parent_id="p", created_at=0.0, **given)
    return tuple(row[f] for f in stored.FIELDS)


def test_a_row_is_seen_in_bulk_as_seen_alone():
    """as_seen() passes by the rows seen() leaves as they are: each row, of every
    status and deadline, comes out as seen() makes it."""
    now = time.time()
    cases = itertools.product(
        "SRTPZX", (None, "nohost:1"), (None, now - 5, now + 500), (None, "STOP"),
        (None, now - 1, now + 60), (None, now - 90_000, now - 10), (None, 5.0),
        ("S", "X"))
    rows = [_row(status=status, lease_owner=owner, lease_until=until, pending_signal=signal,
                 kill_at=kill_at, exited_at=exited, reap_after=reap, parent_status=parent)
            for status, owner, until, signal, kill_at, exited, reap, parent in cases
            if not (status == "Z" and exited is None)]
    alone = [tuple(map(proctable.seen(dict(zip(stored.FIELDS, row)), now).get, stored.FIELDS))
             for row in rows]
    assert proctable.as_seen(rows, now) == alone
    assert sum(a != b for a, b in zip(rows, alone)) > 100    # many rows changed by seen()
    # a listing reads only SEEN besides what it shows: seen() reads no other field
    read = proctable.fields(["name"])
    assert set(read) == {"id", "name", *proctable.SEEN}
    narrow = [tuple(row[stored.FIELDS.index(f)] for f in read) for row in rows]
    assert proctable.as_seen(narrow, now, read) == \
        [tuple(row[stored.FIELDS.index(f)] for f in read) for row in alone]


def test_only_a_row_seen_may_change_is_made_a_dict(conn, monkeypatch):
    for i in range(30):
        fork("-n", f"w{i}")
    conn.execute("UPDATE agents SET status = 'R', lease_owner = 'nohost:1', lease_until = ? "
                 "WHERE name = 'w3'", (time.time() - 1,))
    conn.commit()
    asked = []
    seen = proctable.seen
    monkeypatch.setattr(proctable, "seen", lambda row, now: asked.append(row["id"]) or
                        seen(row, now))
    monkeypatch.setattr(proctable, "items", None)   # no dict of each row for these columns
    for args in ([], ["-q"], ["-o", "name,stat"], ["--format", "json"]):
        asked.clear()
        result = agent("ps", *args)
        assert result.code == 0, result.err
        assert len(asked) == 1, args
    assert agent("ps", "-o", "name,stat", "--format", "tsv").lines[5] == "w3\tS"


def test_every_column_reads_the_same_from_tuples_as_from_dicts(conn):
    """The table of tuples (agent-ps's own) and of dicts (its tree, its providers) give
    every column alike, in every format."""
    fork("-n", "lead", "-r", "lead", "--budget", "500", "plan")
    fork("-p", "lead", "-n", "w1", "job")
    agent("send", "--in", "1h", "w1", "later")
    agent("kill", "-s", "STOP", "w1")
    now = time.time()
    found = proctable.rows(conn, everything=True)
    made = {"age": lambda t: [int(now - c) for c in t["created_at"]],
            "wake": lambda t: list(map(proctable.wake, t["wake_at"], t["mail_at"]))}
    items = proctable.items(found)
    for column in ps.COLUMNS:
        for fmt in ("table", "tsv", "json"):
            shown = []
            for table in (Table(found, proctable.FIELDS, made), Table(items, made=made)):
                out = _Out()
                render(table, [column], fmt=fmt, out=out)
                shown.append(out.text)
            assert shown[0] == shown[1], (column.key, fmt)
    tsv = agent("ps", "-o", "name,stat,wake,budget", "--format", "jsonl").lines
    assert [json.loads(line)["stat"] for line in tsv] == ["S", "S", "T"]


def test_each_column_reads_only_the_fields_it_names(conn, monkeypatch):
    """agent-ps reads the stored fields its columns name (Whole.reads), and what seen()
    reads: every column, in every format, shows what it shows when every field is read."""
    fork("-n", "lead", "-r", "lead", "--budget", "500", "--allow", "read_*", "--env", "LANG",
         "plan")
    fork("-p", "lead", "-n", "w1", "--reap-after", "1h", "--idle-exit", "1d", "job")
    fork("-p", "lead", "-n", "w2", "--budget", "100", "job")
    agent("send", "--in", "1h", "w1", "later")
    agent("send", "w2", "now")
    agent("kill", "-s", "STOP", "w1")
    agent("kill", "-s", "KILL", "w2")
    conn.execute("UPDATE agents SET last_failure = 'boom', failures = 2, restarts = 1, "
                 "retry_at = ?, held_at = ?, tokens_in = 5, tokens_out = 7, "
                 "tokens_cached = 3, cost = 1200, unpriced = 1, "
                 "wake_at = ? WHERE name = 'lead'", (time.time() + 60,) * 3)
    conn.commit()
    now = time.time()
    monkeypatch.setattr(clock, "now", lambda: now)      # the same ages in both runs
    read = []
    rows = stored.rows
    monkeypatch.setattr(stored, "rows", lambda *a, fields, **k: read.append(fields) or
                        rows(*a, fields=fields, **k))
    fields = proctable.fields
    for column in ps.COLUMNS:
        for fmt in ("table", "tsv", "json"):
            args = ("ps", "-a", "-o", column.key, "--format", fmt)
            shown = agent(*args)
            assert shown.code == 0, shown.err
            monkeypatch.setattr(proctable, "fields", lambda shown: stored.FIELDS)
            whole = agent(*args)
            monkeypatch.setattr(proctable, "fields", fields)
            assert shown.out == whole.out, (column.key, fmt)
    assert len(read[0]) < len(stored.FIELDS)   # the id's column: the id, and seen()'s
    agent("ps", "-o", "name,stat")
    assert not {"msgs", "mail", "mail_at", "spent", "budget"} & set(read[-1])
    assert not any(column.reads() is None for column in ps.COLUMNS)


class _Out:
    text = ""

    def write(self, text):
        self.text += text
