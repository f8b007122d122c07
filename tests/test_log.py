"""agent-log: every change of state is an event, in the transaction of the change;
listed, filtered and followed."""

import json
import os
import re
import signal
import sqlite3
import threading
import time

import pytest

from agentctl import eventkinds
from agentctl.eventkinds import KINDS
from agentctl.ids import INIT_ID
from agentctl.store import db, events
from agentctl.store.db import transaction

from .conftest import (ROOT, PATIENCE, agent, clock_slack, fork, script, shell, started,
                       wait_until)


def kinds(*args):
    result = agent("log", "--format", "jsonl", *args)
    assert result.code == 0, result.err
    return [(json.loads(line)["name"], json.loads(line)["kind"]) for line in result.lines]


PIPELINE = [("lead", "fork"),                                   # agent-fork lead
            ("lead", "turn-start"), ("lead", "call"),           # a model call:
            ("w1", "fork"), ("lead", "tool"),                   # the lead forks w1 (a tool)
            ("lead", "call"), ("lead", "mail"), ("lead", "tool"),   # and mails it
            ("lead", "call"), ("lead", "turn-end"),
            ("w1", "turn-start"), ("w1", "read"), ("w1", "call"), ("w1", "timer"),
            ("w1", "tool"), ("w1", "turn-end"),
            ("init", "mail"),                                   # agent-send w1
            ("w1", "signal"), ("w1", "status"),                 # STOP
            ("w1", "signal"), ("w1", "status"),                 # CONT
            ("w1", "turn-start"), ("w1", "read"), ("w1", "call"),
            ("w1", "tool"),                                     # the exit tool
            ("w1", "turn-end"), ("w1", "exit"), ("w1", "mail"),     # the lead is told
            ("w1", "reap")]                                     # agent-wait w1


def run_pipeline(tmp_path, forked=lambda: None):
    """The pipeline; forked() is called after its first event (agent-fork lead)."""
    model = script(
        tmp_path,
        {"match": "^Plan", "steps": [
            {"content": "", "tool_calls": [{"name": "fork", "arguments": {"name": "w1"}}]},
            {"content": "", "tool_calls": [{"name": "send",
                                            "arguments": {"to": "w1", "body": "Survey"}}]},
            {"content": "planned"}]},
        {"match": "Survey", "steps": [
            {"content": "", "tool_calls": [{"name": "sleep", "arguments": {"seconds": 3600}}]},
            {"content": "sleeping"}]},
        {"match": "finish", "steps": [
            {"content": "", "tool_calls": [{"name": "exit", "arguments": {"result": "found"}}]},
            {"content": "bye"}]})
    fork("-n", "lead", "-m", model, "Plan")
    forked()
    assert agent("run", "lead").code == 0
    assert agent("run", "w1").code == 0
    assert agent("send", "w1", "finish").code == 0
    assert agent("kill", "-s", "STOP", "w1").code == 0
    assert agent("kill", "-s", "CONT", "w1").code == 0
    assert agent("run", "w1").code == 0
    assert agent("wait", "--timeout", "5", "w1").code == 0


def test_a_pipeline_leaves_the_exact_sequence_of_events(tmp_path):
    run_pipeline(tmp_path)
    assert kinds() == PIPELINE


def test_a_follower_sees_the_pipeline_as_it_runs(tmp_path, home):
    """agent-log -f following from the pipeline's first event prints every event, in
    order, once."""
    lines, followers = [], []

    def follow():
        follower = started("agent-log", "-f", "-n", "1", "--format", "jsonl")
        followers.append(follower)
        lines.append(follower.stdout.readline())    # the first event: it is following
        reader = threading.Thread(target=lambda: lines.extend(follower.stdout), daemon=True)
        reader.start()
        followers.append(reader)
    try:
        run_pipeline(tmp_path, forked=follow)
        wait_until(lambda: len(lines) >= len(PIPELINE), "the follower to print every event")
    finally:
        if followers:
            followers[0].send_signal(signal.SIGINT)
            followers[0].wait(timeout=PATIENCE)
            followers[-1].join(timeout=PATIENCE)
    follower = followers[0]
    seen = [(json.loads(line)["name"], json.loads(line)["kind"]) for line in lines]
    assert seen == PIPELINE
    assert (follower.returncode, follower.stderr.read()) == (0, "")  # ^C: silent, cleanly


def test_text_lines_and_the_columns(tmp_path):
    run_pipeline(tmp_path)
    lines = agent("log", "w1").lines
    assert " w1            fork        forked from lead (agent, model scripted:" in lines[0]
    assert any("turn-end    turn 1 done: 3 steps" in line for line in agent("log", "lead").lines)
    assert lines[-1].endswith("w1            reap        collected by a waiter")
    assert any(line.endswith("exit        exited 0 (became Z)") for line in lines)
    tsv = agent("log", "--format", "tsv", "-o", "seq,kind,data", "--kind", "exit").lines
    assert tsv[0] == "seq\tkind\tdata" and len(tsv) == 2
    assert json.loads(tsv[1].split("\t")[2]) == {"code": 0, "status": "Z"}
    full = json.loads(agent("log", "--format", "json", "-n", "1").out)
    assert [set(e) for e in full] == [{"seq", "time", "agent", "name", "kind", "actor", "data",
                                       "summary"}]
    assert agent("log", "-q").lines == [str(n) for n in range(1, len(PIPELINE) + 1)]
    assert agent("log", "-0", "-n", "2").out == f"{len(PIPELINE) - 1}\0{len(PIPELINE)}\0"


def test_filters(tmp_path):
    run_pipeline(tmp_path)
    assert kinds("--kind", "fork,exit") == [("lead", "fork"), ("w1", "fork"), ("w1", "exit")]
    assert kinds("--kind", "fork", "--kind", "reap") == [("lead", "fork"), ("w1", "fork"),
                                                         ("w1", "reap")]
    assert kinds("-n", "2") == PIPELINE[-2:]
    assert kinds("--after", "20") == PIPELINE[20:]
    assert kinds("--after", "20", "-n", "1") == PIPELINE[-1:]
    assert kinds("lead") == [e for e in PIPELINE if e[0] == "lead"]
    assert kinds("--tree", "lead") == [e for e in PIPELINE if e[0] != "init"]
    assert kinds("--since", "1h") == PIPELINE
    assert kinds("--since", "2999-01-01T00:00") == []
    assert kinds("-n", "0") == []


@pytest.mark.parametrize("args, code, message", [
    (["--prune-before", "1h", "-n", "3"], 2, "--prune-before goes with no other option"),
    (["-f", "--format", "json"], 2, "-f prints events as they come: use --format jsonl, not json"),
    (["--tree"], 2, "--tree goes with an AGENT"),
    (["--since", "soon"], 2, "bad time: 'soon'"),
    (["--after", "-1"], 2, "Invalid value for '--after'"),
    (["nobody"], 1, "no such agent: nobody"),
    (["--format", "table"], 2, "Invalid value for '--format'"),
    (["-o", "nope"], 2, "unknown column: nope"),
    (["--kind", "fork,trun-end"], 2, "unknown kind: trun-end (one of fork, turn-start"),
])
def test_bad_arguments_are_one_line(args, code, message):
    fork("-n", "a")
    result = agent("log", *args)
    assert (result.code, result.out) == (code, ""), result
    assert result.err.startswith("agent-log: ") and message in result.err, result.err
    assert result.err.count("\n") == 1


def test_follow_ends_when_its_reader_goes_away():
    """agent-log -f | head -3 returns at once, though no event comes after the third."""
    for n in range(5):
        fork("-n", f"a{n}")
    start = time.monotonic()
    result = shell("agent-log -f | head -3; echo \"rc=${PIPESTATUS[0]}\"", timeout=PATIENCE)
    took = time.monotonic() - start
    assert len(result.out.splitlines()) == 4 and result.out.endswith("rc=141\n"), result
    # (well under a second on a quiet machine: the bound is for a loaded one)
    assert result.err == "" and took < 20, (result, took)


def test_follow_prints_a_new_event_within_250_ms(home):
    fork("-n", "a")
    follower = started("agent-log", "-f", "-n", "1", "--format", "jsonl")
    try:
        assert json.loads(follower.stdout.readline())["kind"] == "fork"     # it is following
        latencies = []
        for n in range(5):
            sent = time.time()
            assert agent("kill", "-s", "HUP", "a").code == 0
            event = json.loads(follower.stdout.readline())
            latencies.append(time.time() - event["time"])
            assert event["kind"] == "signal" and event["time"] >= sent - 0.01 - clock_slack()
    finally:
        follower.kill()
        follower.communicate()
    # make bench measures the latency itself (E4: 250 ms); here, on a machine the other
    # tests (and more) may load, the median holds twice that and no event is 5 s late
    assert sorted(latencies)[2] < 0.5 and max(latencies) < 5.0, latencies


def test_prune_keeps_the_newest_and_each_accounts_budget_event_and_never_reuses_numbers(
        tmp_path, conn):
    model = script(tmp_path, {"reply": {"content": "ok",
                                           "usage": {"input_tokens": 40, "output_tokens": 20}}})
    fork("-n", "boss", "-m", model)
    fork("-p", "boss", "-n", "kid", "--budget", "10", "go")
    assert agent("run", "kid").code == 0         # over budget: a budget event
    fork("-n", "later")
    budget_seq = conn.execute("SELECT id FROM events WHERE kind = 'budget'").fetchone()[0]
    newest = conn.execute("SELECT max(id) FROM events").fetchone()[0]
    result = agent("log", "--prune-before", "2999-01-01T00:00")
    assert result.code == 0 and int(result.out) == newest - 2, result
    assert [r[0] for r in conn.execute("SELECT id FROM events ORDER BY id")] == \
        [budget_seq, newest]
    agent("send", "kid", "more")
    assert agent("run", "kid").code == 3         # refused, and the parent is not told again
    assert conn.execute("SELECT count(*) FROM mail WHERE kind = 'budget'").fetchone()[0] == 1
    # an event removed never gives its number to a new one
    conn.execute("DELETE FROM events WHERE id = ?", (newest,))
    conn.commit()
    fork("-n", "after")
    assert conn.execute("SELECT max(id) FROM events").fetchone()[0] > newest


def test_a_refused_change_writes_no_event(conn):
    fork("-n", "a")
    agent("kill", "a")
    before = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    assert agent("send", "a", "hi").code == 3               # a has exited
    assert agent("kill", "a").code == 3
    assert agent("fork", "-p", "a", "-n", "b").code == 3
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == before


def test_a_bulk_send_is_one_event_with_the_count_and_the_range():
    fork("-n", "a")
    fork("-n", "b")
    lines = "".join(json.dumps({"to": to, "body": f"m{n}"}) + "\n"
                    for n, to in enumerate("abab" * 25))
    assert agent("send", "--jsonl", stdin=lines).code == 0
    event = json.loads(agent("log", "--format", "jsonl", "--kind", "mail").lines[-1])
    assert (event["name"], event["data"]) == ("init", {"count": 100, "first": 1, "last": 100})
    assert event["summary"] == "sent 100 mails, ids 1-100"


def test_the_migration_keeps_every_event_and_its_number(tmp_path):
    path = str(tmp_path / "old.db")
    conn = db.connect(path)
    conn.close()
    raw = sqlite3.connect(path)      # back to schema 7: the events table as it was released
    raw.executescript("""
        DROP TABLE events;
        CREATE TABLE events (id INTEGER PRIMARY KEY, agent_id TEXT NOT NULL REFERENCES agents(id),
            kind TEXT NOT NULL, detail TEXT, actor_id TEXT REFERENCES agents(id),
            created_at REAL NOT NULL);
        CREATE INDEX events_agent ON events(agent_id, id);
        INSERT INTO events VALUES (5, 'AAAAAAAAAAAAAAAAAAAAAA', 'signal', 'HUP', NULL, 1.0);
        INSERT INTO events VALUES (9, 'AAAAAAAAAAAAAAAAAAAAAA', 'signal', 'CONT', NULL, 2.0);
        DELETE FROM _sqlite_migrations WHERE name = '0008_event_log';
        PRAGMA user_version = 7;
    """)
    raw.close()
    assert agent("fork", "--db", path, "-n", "a").code == 0
    result = agent("log", "--db", path, "--format", "tsv", "-o", "seq,kind,detail")
    assert result.lines == ["seq\tkind\tdetail", "5\tsignal\tHUP", "9\tsignal\tCONT",
                            "10\tfork\tAAAAAAAAAAAAAAAAAAAAAA 0"], result


def test_a_follower_over_a_run_of_200_agents_sees_every_event_once(tmp_path, home):
    """agent-run --all -j 4 over 200 agents, followed from before it starts."""
    lines = "".join(json.dumps({"to": f"a{n}", "body": "hi"}) + "\n" for n in range(200))
    from agentctl.ids import INIT_ID
    from agentctl.ops import lifecycle
    from agentctl.store import registry
    from agentctl.store.db import transaction
    conn = db.connect(str(home))
    with transaction(conn):             # (in one transaction: 200 agent-forks take 20 s)
        for n in range(200):
            lifecycle.fork(conn, registry.get(conn, INIT_ID), name=f"a{n}", model="echo")
    conn.close()
    assert agent("send", "--jsonl", stdin=lines).code == 0
    follower = started("agent-log", "-f", "-n", "1", "--format", "jsonl")
    out = [follower.stdout.readline()]      # the newest event: it is following (a loaded
    reader = threading.Thread(target=lambda: out.extend(follower.stdout), daemon=True)
    reader.start()          # machine may take a while to start it); a pipe left unread
    try:                    # would stop the follower when full
        # (a minute on a quiet machine; 200 agent-run processes passed 300 s at load 30)
        result = shell("agent-run --all -j 4 >/dev/null", timeout=1200)
        assert result.code == 0, result.err
        newest = db.connect(str(home)).execute("SELECT max(id) FROM events").fetchone()[0]
        wait_until(lambda: any(json.loads(line)["seq"] == newest for line in list(out)),
                   "the follower to print the newest event")
    finally:
        follower.send_signal(signal.SIGINT)
        follower.wait(timeout=PATIENCE)
        reader.join(timeout=PATIENCE)
    seen = [json.loads(line)["seq"] for line in out]
    conn = db.connect(str(home))
    wanted = [r[0] for r in conn.execute("SELECT id FROM events WHERE kind IN "
                                         "('turn-start', 'read', 'turn-end') ORDER BY id")]
    assert len(wanted) == 600
    assert seen == [r[0] for r in conn.execute(
        "SELECT id FROM events WHERE id > ? ORDER BY id", (min(seen) - 1,))]
    assert set(wanted) <= set(seen) and len(seen) == len(set(seen))


# -- each kind's payload, declared where events are stored ----------------------------

def newest_event(conn):
    return conn.execute("SELECT detail, data FROM events ORDER BY id DESC LIMIT 1").fetchone()


@pytest.mark.parametrize("kind, data, detail", [
    ("fork", {"parent": INIT_ID, "at": 0, "role": "agent", "model": "echo"}, f"{INIT_ID} 0"),
    ("signal", {"signal": "HUP"}, "HUP"),
    ("exit", {"code": 0, "status": "Z"}, "exited 0"),
    ("exit", {"code": 137, "signal": "KILL", "status": "X"}, "killed by KILL"),
    ("reparent", {"old": "B" * 22, "new": INIT_ID}, f"{'B' * 22} {INIT_ID}"),
    ("budget", {"spent": 120, "budget": 100}, "exhausted 120 100"),
    ("reap", {"by": "wait"}, None),
    ("mail", {"to": INIT_ID, "mail": 7, "at": 1.5}, None),
    ("mail", {"count": 3, "first": 1, "last": 3}, None),
])
def test_each_kind_writes_its_released_detail_and_its_fields_read_back(conn, kind, data, detail):
    """The detail text agentctl(5) documents is made of the declared fields; an event
    from before the event log, which has only that text, reads back what it holds."""
    with transaction(conn):
        events.record(conn, INIT_ID, kind, **data)
    written, payload = newest_event(conn)
    assert written == detail
    assert events.fields(kind, written, payload) == data
    held = {k: v for k, v in data.items() if detail and f"{v}" in detail.split()}
    assert events.fields(kind, written, None) == held


@pytest.mark.parametrize("kind, data, message", [
    ("frok", {"parent": INIT_ID}, "event 'frok': no such kind"),
    ("exit", {"code": 0, "status": "Z", "why": "done"}, "event exit: its data is "
                                                         "'code signal? status', not code "),
    ("exit", {"status": "Z"}, "event exit: its data is 'code signal? status', not status"),
    ("mail", {"to": INIT_ID, "mail": 1, "count": 1}, "event mail: its data is"),
    ("status", {"old": "S", "new": None}, "event status: its data is 'old new turn?', not old"),
    ("signal", {"signal": ["TERM"]}, "event signal: signal must be a number or a text, not list"),
])
def test_record_refuses_data_its_kind_does_not_declare(conn, kind, data, message):
    """A field misspelt, missing or of two shapes at once is a bug: nothing is written."""
    before = newest_event(conn)
    with pytest.raises(ValueError, match=re.escape(message)):
        with transaction(conn):
            events.record(conn, INIT_ID, kind, **data)
    assert newest_event(conn) == before


# -- each kind's line, declared with its payload (agentctl/eventkinds.py) ------------------

# A value of each field of an event's data, of the type its writers give it.
SAMPLES = {"parent": INIT_ID, "at": 1_790_000_000, "role": "agent", "model": "echo", "turn": 3,
           "outcome": "done", "steps": 2, "input_tokens": 1200, "output_tokens": 30,
           "mail_read": 1, "seconds": 1.5, "error": "HTTP 404: no such model",
           "cache_read_tokens": 1000, "cache_write_tokens": 100, "cost": 0.0123,
           "unpriced": 1, "estimated": 1, "tool": "read_file", "call": "call_1",
           "to": INIT_ID, "mail": 7, "type": "exit", "count": 2, "first": 7, "last": 8,
           "signal": "TERM", "old": "S", "new": "T", "code": 0, "status": "Z", "by": "set",
           "summarised": 10, "keep_from": 11, "spent": 120, "budget": 100, "unit": "usd",
           "limit": 3, "delay": 2.0, "setting": "budget", "request": 5,
           "decision": "approved", "endpoint": "openai:https://api.openai.com/v1",
           "until": 1_790_000_060, "reason": "HTTP 429", "retry": 1_790_000_030,
           "peer": INIT_ID, "same": 3, "host": "pypi.org", "port": 443,
           "address": "151.101.0.223", "sent": 517, "received": 1_234_567,
           "batch": "batch_6a1f", "state": "ended", "tier": "batch", "paths": 3,
           "token": "0H5JpONDTGSLCv8DXTenlw", "into": INIT_ID}


def field_names(shape):
    return [n.rstrip("?") for n in shape.split()]


def shapes():
    """(kind, data) of every shape of every kind: with every field it may hold, and with
    only those it must."""
    for kind, declared in KINDS.items():
        for shape in declared.fields.split("|"):
            yield kind, {n: SAMPLES.get(n, n) for n in field_names(shape)}
            yield kind, {n: SAMPLES.get(n, n) for n in shape.split() if not n.endswith("?")}


def test_every_field_of_every_kind_has_a_sample():
    assert {n for kind in KINDS.values() for n in field_names(kind.fields.replace("|", " "))} \
        == set(SAMPLES)


@pytest.mark.parametrize("kind, data", list(shapes()))
def test_every_shape_of_every_kind_has_its_line(conn, kind, data):
    """Stored and read back as agent-log reads it, an event of each shape has a line of
    its own, whoever did it: not the empty summary set, held and release once had."""
    with transaction(conn):
        for actor in (None, INIT_ID):
            events.record(conn, INIT_ID, kind, actor, **data)
    for row in events.select(conn, kinds=[kind], last=2):
        fields = events.fields(kind, row[3], row[6])
        line = eventkinds.line(kind, fields, row[4], lambda agent_id: "lead")
        assert line and "None" not in line, line


def test_every_kind_is_one_the_man_page_describes():
    """agent-log(1), Kinds, describes each kind."""
    text = open(os.path.join(ROOT, "man", "agent-log.1")).read()
    section = text.split(".SS Kinds\n", 1)[1].split(".SS ", 1)[0]
    described = re.findall(r"^\.BR? (.+)$", section, flags=re.M)
    named = {w.replace("\\-", "-") for d in described for w in re.findall(r"[a-z\\-]+", d)}
    assert set(KINDS) <= named


def test_a_setting_changed_a_held_agent_and_its_release_each_have_their_line(
        conn, tmp_path, monkeypatch):
    """agent-log printed an empty summary for each of these."""
    lead = fork("-n", "lead")
    fork("-p", "lead", "-n", "w", "-m", script(tmp_path, {"steps": [{"fail": "error"}]}),
         "go")
    assert agent("run", "w").code == 69                 # held, its turn kept
    assert agent("set", "w", "budget=100").code == 0    # by the operator: and let go
    monkeypatch.setenv("AGENT_ID", lead)
    assert agent("set", "w", "budget=50").code == 0     # by its parent
    lines = agent("log", "--kind", "held,set,release", "w").lines
    error = f"model API error: scripted: simulated error ({tmp_path / 'script.jsonl'}:1)"
    assert [line.split(None, 4)[3:] for line in lines] == [
        ["held", f"held after a failed turn (turn 1): {error}"],
        ["set", "budget: - -> 100 by the operator"],
        ["release", "released by the operator (its settings changed)"],
        ["set", "budget: 100 -> 50 by lead"]]
    summaries = [json.loads(line)["summary"] for line in
                 agent("log", "--format", "jsonl", "--kind", "set", "w").lines]
    assert summaries == ["budget: - -> 100 by the operator", "budget: 100 -> 50 by lead"]
