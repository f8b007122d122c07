"""Timers: mail deferred by agent-send --at/--in, the WAKE column, and
agent-run --all running what came due."""

import datetime
import json
import re
import subprocess
import sys
import time

import pytest

from agentctl.clock import parse_duration, parse_time
from agentctl.errors import UsageError
from agentctl.clock import until

from .conftest import (ROOT, agent, asleep_at_database, clock_passes, clock_slack, fork, script,
                       shell, wait_until)

REFUSING = {"reply": {"fail": "error"}}        # every request refused for good: exit 69


def mail_count(ref, *options):
    result = agent("mail", "-c", *options, ref)
    return int(result.out)


def test_deferred_mail_is_invisible_until_its_time(conn):
    fork("-n", "a", "-m", "echo")
    sent = agent("send", "--in", "1h", "a", "later")
    assert sent.code == 0 and sent.out.strip().isdigit()
    assert (mail_count("a"), agent("mail", "-c", "a").code) == (0, 1)
    assert agent("mail", "a").out == ""
    assert agent("mail", "-a", "a").out == ""
    assert agent("mail", "-r", "a", sent.out.strip()).code == 1
    assert agent("run", "a").err == "agent-run: a: no pending input\n"
    assert agent("run", "--all").code == 1
    listed = json.loads(agent("mail", "--deferred", "--format", "json", "a").out)
    assert [m["subject"] for m in listed] == ["later"]
    due = datetime.datetime.fromisoformat(listed[0]["due"].replace("Z", "+00:00")).timestamp()
    assert 3590 < due - time.time() <= 3600 + clock_slack()
    assert mail_count("a", "--deferred") == 1
    ps = json.loads(agent("ps", "--format", "json", "-o", "name,mail,wake").out)
    assert ps[1] == {"name": "a", "mail": 0, "wake": listed[0]["due"]}
    assert agent("mail", "--deferred", "-r", "a").code == 2


def test_an_agent_that_has_exited_wakes_no_more(conn):
    fork("-n", "a")
    fork("-n", "b")
    conn.execute("UPDATE agents SET wake_at = ? WHERE name = 'a'", (time.time() + 600,))
    conn.commit()
    assert agent("send", "--in", "1h", "b", "later").code == 0
    wake = {r["name"]: r["wake"] for r in json.loads(
        agent("ps", "--format", "json", "-o", "name,wake").out)}
    assert wake["a"] is not None and wake["b"] is not None
    assert agent("kill", "a", "b").code == 0
    rows = json.loads(agent("ps", "--format", "json", "-o", "name,stat,wake").out)
    assert [(r["name"], r["stat"], r["wake"]) for r in rows[1:]] == [("a", "Z", None),
                                                                    ("b", "Z", None)]
    assert conn.execute("SELECT wake_at FROM agents WHERE name = 'a'").fetchone()[0] is None


def due(conn, body):
    return conn.execute("SELECT deliver_at FROM mail WHERE body = ?", (body,)).fetchone()[0]


def test_mail_that_comes_due_after_its_recipient_exited_is_never_delivered(conn):
    fork("-n", "early")
    fork("-n", "late")
    assert agent("send", "--in", "1", "early", "came while alive").code == 0
    clock_passes(conn, due(conn, "came while alive"), "the mail's time")
    assert agent("kill", "early").code == 0
    assert agent("send", "--in", "1", "late", "comes after the end").code == 0
    assert agent("kill", "late").code == 0
    clock_passes(conn, due(conn, "comes after the end"), "the mail's time")
    assert mail_count("early") == 1                     # delivered before the exit: kept
    assert mail_count("late") == 0 and agent("mail", "-a", "late").out == ""
    assert agent("mail", "--deferred", "late").out == ""
    mail = {r["name"]: r["mail"] for r in json.loads(
        agent("ps", "--format", "json", "-o", "name,mail").out)}
    assert (mail["early"], mail["late"]) == (1, 0)
    assert conn.execute("SELECT count(*) FROM mail").fetchone()[0] == 2     # nothing deleted


def test_a_time_in_the_past_delivers_at_once(conn):
    fork("-n", "a", "-m", "echo")
    assert agent("send", "--at", "2001-02-03T04:05", "a", "now").code == 0
    for far in ("0001-01-01", "0001-01-01T00:00", "0001-01-01T00:00+01:00", "1900-01-01T00:00Z"):
        assert agent("send", "--at", far, "a", "long ago").code == 0, far   # the year 1, local
    assert mail_count("a") == 5
    assert agent("mail", "--deferred", "a").out == ""
    assert agent("run", "a").out.startswith("[INBOX - 5 new]")


def test_deferred_mail_that_came_due_is_run_by_all(conn):
    fork("-n", "a", "-m", "echo")
    fork("-n", "b", "-m", "echo")
    agent("send", "--in", "2", "a", "wake up")     # (2: its times, in whole seconds, differ)
    agent("send", "--in", "1h", "b", "not yet")
    assert agent("run", "--all").code == 1
    assert agent("ps", "-f").lines[0].split()[-2:] == ["WAKE", "BUDGET"]
    result = wait_until(lambda: (ran := agent("run", "--all", "--json")).code == 0 and ran,
                        "agent-run --all to run the mail come due")
    record = json.loads(result.out)
    assert record["mail_read"] == 1 and "wake up" in record["text"]
    # the inbox dates the mail by when it came due, and says when it was sent
    header = record["text"].splitlines()[2]
    due, sent = re.fullmatch(r"1\. mail 1 from the operator at (\S+) \(\d+s ago\), "
                             r"sent (\S+) for then:", header).groups()
    assert due > sent, header
    assert mail_count("a") == 0 and mail_count("b", "--deferred") == 1
    assert agent("run", "--all").code == 1


def test_mail_wait_sees_deferred_mail_come_due(conn):
    fork("-n", "a")
    start = time.monotonic()
    agent("send", "--in", "1", "a", "soon")
    result = agent("mail", "--wait", "60", "-c", "a")
    assert (result.code, result.out) == (0, "1\n")         # not the wait's timeout
    assert 1 - clock_slack() < time.monotonic() - start < 30


def test_mail_wait_sees_mail_deferred_while_it_waits(conn, home):
    """The deferral is committed after the wait began: its time counts too."""
    fork("-n", "a")
    proc = subprocess.Popen([sys.executable, "-c", "from agentctl.cli.mail import main; "
                             "raise SystemExit(main(['--wait', '60', '-c', 'a']))"],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    wait_until(lambda: asleep_at_database(proc.pid, home), "agent-mail --wait to wait")
    start = time.monotonic()
    assert agent("send", "--in", "1", "a", "soon").code == 0
    out, _ = proc.communicate(timeout=90)
    assert (proc.returncode, out) == (0, "1\n")              # not the wait's timeout
    assert 1 - clock_slack() < time.monotonic() - start < 30


def test_no_zone_is_local_time_and_a_zone_is_kept():
    result = shell("export TZ=Asia/Tokyo; agent-fork -n a >/dev/null; "
                   "agent-send --at 2030-01-01T09:00 a local >/dev/null; "
                   "agent-send --at 2030-01-01T09:00Z a utc >/dev/null; "
                   "agent-send --at 2030-01-01T09:00+01:00 a paris >/dev/null; "
                   "agent-mail --deferred --format tsv --no-headers -o subject,due a")
    assert result.code == 0, result.err
    assert result.lines == ["local\t2030-01-01T00:00:00Z", "utc\t2030-01-01T09:00:00Z",
                            "paris\t2030-01-01T08:00:00Z"]


@pytest.mark.parametrize("args, message", [
    (["--at", "tomorrow"], "bad time: 'tomorrow'"),
    (["--at", "25:00"], "bad time: '25:00'"),
    (["--in", "3x"], "bad duration: '3x'"),
    (["--in", "-5m"], "bad duration: '-5m'"),
    (["--at", "10:00", "--in", "5m"], "--at and --in don't go together"),
    (["--in", "99999999999d"], "that time is out of range"),     # agent-ps could not show it
])
def test_bad_times_are_usage_errors_and_send_nothing(conn, args, message):
    fork("-n", "a")
    result = agent("send", *args, "a", "x")
    assert result.code == 2 and result.err.startswith(f"agent-send: {message}"), result.err
    assert conn.execute("SELECT count(*) FROM mail").fetchone()[0] == 0


def test_bulk_lines_may_carry_at(conn):
    fork("-n", "a")
    lines = ('{"to": "a", "body": "now"}\n'
             '{"to": "a", "body": "later", "at": "2030-01-01T00:00Z"}\n')
    assert agent("send", "--jsonl", stdin=lines).code == 0
    assert mail_count("a") == 1 and mail_count("a", "--deferred") == 1
    bad = agent("send", "--jsonl", stdin='{"to": "a", "body": "x", "at": "soon"}\n')
    assert bad.code == 2 and bad.err.startswith("agent-send: line 1: bad time: 'soon'")
    assert agent("send", "--jsonl", "--in", "1h", stdin='{"to": "a", "body": "y"}\n').code == 0
    assert (mail_count("a"), mail_count("a", "--deferred")) == (1, 2)


def test_parsing():
    # A fixed local "now": 10:00:00 on a given day.
    now = datetime.datetime(2030, 6, 1, 10, 0).timestamp()
    assert parse_time("09:30", now) == datetime.datetime(2030, 6, 2, 9, 30).timestamp()
    assert parse_time("10:30", now) == datetime.datetime(2030, 6, 1, 10, 30).timestamp()
    assert parse_time("10:00", now) == datetime.datetime(2030, 6, 2, 10, 0).timestamp()
    assert parse_time("23:59:30", now) == datetime.datetime(2030, 6, 1, 23, 59, 30).timestamp()
    assert parse_time("2030-06-01 12:00", now) == datetime.datetime(2030, 6, 1, 12).timestamp()
    assert [parse_duration(d) for d in ("90", "90s", "15m", "2h", "1d", "1.5m")] == \
        [90, 90, 900, 7200, 86400, 90]
    for bad in ("", "9", "24:00", "12:60", "2030-13-01"):
        with pytest.raises(UsageError):
            parse_time(bad, now)
    # The sleep tool's clock: a time with no zone, and HH:MM, in UTC.
    utc = datetime.timezone.utc
    noon = datetime.datetime(2030, 6, 1, 12, 0, tzinfo=utc).timestamp()
    assert parse_time("2030-06-01T13:00", noon, zone=utc) == noon + 3600
    assert parse_time("11:00", noon, zone=utc) == noon + 23 * 3600
    assert parse_time("12:30:00", noon, zone=utc) == noon + 1800


def test_wake_is_the_earlier_of_the_timer_and_deferred_mail(conn, tmp_path):
    fork("-n", "a", "-m", script(tmp_path, {"reply": {"tool_calls": [
        {"name": "sleep", "arguments": {"seconds": 600}}]}}), "nap")
    assert agent("run", "a").code == 0

    def wake():
        row = json.loads(agent("ps", "--format", "json", "-o", "name,wake").out)[1]
        when = datetime.datetime.fromisoformat(row["wake"].replace("Z", "+00:00"))
        human = agent("ps", "-f", "-o", "name,wake").lines[2].split()[-2:]
        return when.timestamp() - time.time(), human

    # (ahead: what is left of the 600 s since agent-run set the timer, in two units:
    # "in 10m", "in 9m59s" a second later, "in 10m1s" if clocks differ by a second)
    ahead, human = wake()
    assert 590 < ahead <= 600 + clock_slack() and human[0] == "in"
    assert re.fullmatch(r"10m(1s)?|9m(\d+s)?", human[1]), human
    agent("send", "--in", "1h", "a", "later")
    assert 590 < wake()[0] <= 600 + clock_slack()
    agent("send", "--in", "2m", "a", "sooner")
    ahead, human = wake()
    assert 110 < ahead <= 120 + clock_slack() and human[0] == "in"
    assert re.fullmatch(r"2m(1s)?|1m(\d+s)?", human[1]), human
    assert agent("ps", "-o", "name,wake").lines[1].split() == ["init", "-"]


@pytest.mark.parametrize("ahead, shown", [
    (0.2, "in 1s"), (45, "in 45s"), (90, "in 1m30s"), (3599.5, "in 1h"), (7199, "in 1h59m"),
    (7200, "in 2h"), (97205, "in 1d3h"), (0, "due"), (-5, "due"), (None, "-")])
def test_wake_and_due_show_two_units(ahead, shown):
    """A timer set for 2h reads "in 1h59m" a second later, not "in 1h"."""
    assert until(None if ahead is None else 1000 + ahead, now=1000) == shown


def test_every_reading_of_the_time_is_clock_now(monkeypatch):
    """until, after and parse_time read the time through clock.now(), the one source (a
    test that fixes it saw agent-ps's wake column move a second between two runs, on
    PostgreSQL under load: each run measures the skew again)."""
    from agentctl import clock
    monkeypatch.setattr(clock, "now", lambda: 1000.0)
    assert (until(1090.0), clock.after(5), parse_time("1970-01-01T00:20:00+00:00")) == \
        ("in 1m30s", 1005.0, 1200.0)
    assert parse_time("00:16:40", zone=datetime.timezone.utc) == 1000.0 + 86400


def test_a_voided_turn_leaves_its_timer_due_again(conn, tmp_path):
    """A turn the API refused (exit 69) gives back what it took: its timer too."""
    fork("-n", "a", "--restart", "on-failure", "-m", script(tmp_path, REFUSING))
    conn.execute("UPDATE agents SET wake_at = ? WHERE name = 'a'", (time.time() - 5,))
    conn.commit()
    assert agent("run", "a").code == 69
    row = conn.execute("SELECT wake_at, retry_at FROM agents WHERE name = 'a'").fetchone()
    assert row["wake_at"] is not None and row["wake_at"] <= time.time()
    assert agent("run", "a").code == 69                   # still something to do


def test_a_prompt_that_reads_like_a_timer_sets_none_when_its_turn_is_voided(conn, tmp_path):
    fork("-n", "a", "-m", script(tmp_path, REFUSING), "[TIMER] You asked to be woken at noon.")
    assert agent("kill", "-s", "HUP", "a").code == 0      # the turn writes the prompt again
    assert agent("run", "a").code == 69
    assert conn.execute("SELECT wake_at FROM agents WHERE name = 'a'").fetchone()[0] is None


def test_an_inbox_lists_mail_in_the_order_it_became_mail(conn):
    fork("-n", "a", "-m", "echo")
    agent("send", "--in", "1", "a", "deferred, sent first")
    agent("send", "a", "direct, sent second")
    clock_passes(conn, due(conn, "deferred, sent first"), "the mail's time")
    text = agent("run", "a").out
    assert text.index("direct, sent second") < text.index("deferred, sent first"), text
    assert "1. mail 2 from the operator" in text and "2. mail 1 from the operator" in text
