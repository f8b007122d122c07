"""Many runners, one provider (agent-run(1), Providers): the runs that share a database
share what they know of each endpoint. A cap on the calls in flight
($AGENTCTL_CONCURRENCY) that holds across processes and hosts, a slot of a dead run
freed, a wait for one bounded and cut short by KILL; a refusal's Retry-After that every
run waits for, the pace a provider's rate-limit headers ask for; --all that serves
other endpoints while one is full; what agent-ps and agent-log show of it. Against a
server that enforces limits as a provider does (tests/limitedapi.py) and the fake API."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from agentctl.models import limits
from agentctl.endpoint import Identity
from agentctl.ops import endpoints
from agentctl.store import endpoints as endpoint_rows
from agentctl.store.db import connect, transaction

from .conftest import BIN, agent, fork, started, stored, wait_until
from .fakeapi import OPENAI_KEY, fakeapi  # noqa: F401 (fixture)
from .limitedapi import LimitedAPI, go_duration

LOOP = ("while :; do agent-run --all -j 4 >/dev/null 2>>errors.$AGENTCTL_HOST; c=$?; "
        "echo $c >> codes.$AGENTCTL_HOST; [ $c = 1 ] && break; done")


def turns_of(conn):
    """{agent name: [(turn status, replies recorded)]}"""
    found = {}
    for name, status, replies in conn.execute(
            "SELECT a.name, t.status, (SELECT count(*) FROM messages m WHERE m.turn_id = t.id "
            "AND m.kind = 'assistant' AND m.void = 0) FROM turns t JOIN agents a "
            "ON a.id = t.agent_id ORDER BY t.id"):
        found.setdefault(name, []).append((status, replies))
    return found


@pytest.fixture
def limited(monkeypatch):
    """A server that allows 2 calls in flight and 6 a second (a burst of 3), each answered
    in 0.2 s; the openai provider pointed at it, capped at its 2."""
    api = LimitedAPI(concurrency=2, rate=6, burst=3, latency=0.2)
    for name, value in {"OPENAI_BASE_URL": api.url + "/v1", "OPENAI_API_KEY": "sk-limited-key",
                        "NO_PROXY": "127.0.0.1", "AGENTCTL_CONCURRENCY": f"{api.url}=2"}.items():
        monkeypatch.setenv(name, value)
    yield api
    api.close()


def test_loops_of_all_on_two_hosts_keep_the_cap_and_run_each_turn_once(limited, tmp_path, home):
    """Two agent-run --all -j 4 loops, as from two hosts, over 20 agents against a server
    that allows 2 calls in flight: it never sees a third, every turn is done once, and
    the rate it allows is kept to by the pace its headers ask for."""
    for i in range(20):
        fork("-n", f"a{i}", "-m", "openai:fake", f"task {i}")
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"])
    loops = [subprocess.Popen(["bash", "-c", LOOP], cwd=tmp_path,
                              env=dict(env, AGENTCTL_HOST=f"host{h}")) for h in range(2)]
    for loop in loops:
        assert loop.wait(timeout=600) == 0
    errors = "".join(p.read_text() for p in tmp_path.glob("errors.*"))
    counts = limited.counts()
    print(f"\n20 turns, 2 loops: {counts}")
    assert counts["over_concurrency"] == 0 and counts["most_in_flight"] <= 2, (counts, errors)
    assert counts["answered"] == 20, (counts, errors)
    assert counts["over_rate"] <= 5, (counts, errors)     # a start before the headers came
    assert turns_of(connect(str(home))) == {f"a{i}": [("done", 1)] for i in range(20)}, errors
    assert "Traceback" not in errors and "internal error" not in errors, errors


def test_a_refusal_makes_every_run_wait_for_its_retry_after(fakeapi, home):
    """A 429 with Retry-After: 2 sets the endpoint's not-before: a run of another agent
    sends nothing before it, agent-ps and agent-why show that agent waiting for its provider, and
    agent-log has the throttle and the recovery."""
    fork("-n", "a", "-m", "openai:gpt-test", "one")
    fork("-n", "b", "-m", "openai:gpt-test", "two")
    fakeapi.error(429, "slow down", retry_after=2).reply("first").reply("second")
    first = started("agent-run", "a")
    conn = connect(str(home))
    row = wait_until(lambda: conn.execute("SELECT not_before, reason FROM endpoints "
                                          "WHERE not_before IS NOT NULL").fetchone(),
                     "the endpoint's not-before")
    shown = agent("ps", "-o", "name,provider", "--format", "tsv", "--no-headers")
    assert "b\tthrottled\n" in shown.out, shown.out
    why = agent("why", "b")
    assert "waiting for its provider: http://127.0.0.1:" in why.out, why.out
    assert "throttled until" in why.out and "HTTP 429, Retry-After 2 s" in why.out
    assert row["reason"] == "HTTP 429, Retry-After 2 s"
    assert agent("run", "b").code == 0
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    refused, *later = fakeapi.requests
    assert len(later) == 2 and all(r["at"] >= row["not_before"] - 0.01 for r in later)
    assert refused["at"] + 2 <= row["not_before"]
    log = agent("log", "--kind", "throttle,recover", "--format", "tsv", "-o", "name,kind,summary")
    lines = log.out.splitlines()[1:]
    assert [line.split("\t")[:2] for line in lines] == [["a", "throttle"],
                                                        [lines[1].split("\t")[0], "recover"]]
    assert "throttled until" in lines[0] and "HTTP 429, Retry-After 2 s" in lines[0]
    assert conn.execute("SELECT refused_at FROM endpoints").fetchone()[0] is None


def calling(conn, name):
    return conn.execute("SELECT calling FROM agents WHERE name = ?", (name,)).fetchone()[0]


@pytest.mark.parametrize("other_host", [False, True], ids=["this host", "another host"])
def test_the_slot_of_a_run_that_died_is_free(fakeapi, home, monkeypatch, other_host):
    """With one slot, a run killed (-9) in its call frees it: at once on this host (its
    process is probed), once its lease expires when it ran on another."""
    monkeypatch.setenv("AGENTCTL_CONCURRENCY", "openai=1")
    fork("-n", "a", "-m", "openai:gpt-test", "one")
    fork("-n", "b", "-m", "openai:gpt-test", "two")
    hold = threading.Event()
    fakeapi.reply("never read", hold=hold).reply("second")
    if other_host:
        monkeypatch.setenv("AGENTCTL_LEASE", "2")
    first = started("agent-run", "a")
    monkeypatch.delenv("AGENTCTL_LEASE", raising=False)
    conn = connect(str(home))
    try:
        wait_until(lambda: calling(conn, "a") and len(fakeapi.requests) == 1,
                   "a's call in flight")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
        if other_host:
            monkeypatch.setenv("AGENTCTL_HOST", "elsewhere")
        lease_until = conn.execute("SELECT lease_until FROM agents WHERE name = 'a'").fetchone()[0]
        start = time.monotonic()
        assert agent("run", "b").code == 0
        if other_host:
            assert fakeapi.requests[1]["at"] >= lease_until - 0.01
        else:
            assert time.monotonic() - start < 30      # not the 300 s of a lease
    finally:
        hold.set()


def test_a_run_waits_for_a_slot_as_long_as_allowed_and_a_kill_ends_the_wait(fakeapi, home,
                                                                             monkeypatch):
    """With one slot taken: a run waits for it (agents.waiting; agent-ps says full 1/1),
    KILL ends that run at once, and a run allowed 1 s of waiting exits 75 saying why."""
    monkeypatch.setenv("AGENTCTL_CONCURRENCY", "openai=1")
    for name in ("a", "b", "c"):
        fork("-n", name, "-m", "openai:gpt-test", f"from {name}")
    hold = threading.Event()
    fakeapi.reply("first", hold=hold)
    first = started("agent-run", "a")
    conn = connect(str(home))
    try:
        wait_until(lambda: calling(conn, "a"), "a's call in flight")
        second = started("agent-run", "b")
        wait_until(lambda: conn.execute("SELECT waiting FROM agents WHERE name = 'b'"
                                        ).fetchone()[0], "b waiting for a slot")
        # the readers take the cap from the database, not from their own environment
        monkeypatch.delenv("AGENTCTL_CONCURRENCY")
        shown = agent("ps", "-o", "name,stat,provider")
        assert [line.split() for line in shown.lines if line.startswith("b ")] == \
            [["b", "R", "full", "1/1"]], shown.out
        why = agent("why", "b")
        assert why.code == 1 and "waiting for its provider" in why.out, why.out
        doing = [line for line in agent("top").out.splitlines() if " b " in line][0]
        assert "waiting for its provider" in doing and "full: 1 of 1" in doing, doing
        monkeypatch.setenv("AGENTCTL_CONCURRENCY", "openai=1")
        assert agent("kill", "-s", "KILL", "b").code == 0
        out, err = second.communicate(timeout=60)
        assert second.returncode == 3, err
        monkeypatch.setenv("AGENTCTL_PROVIDER_WAIT", "1")
        start = time.monotonic()
        third = agent("run", "c")
        assert third.code == 75 and 1 <= time.monotonic() - start < 30, third.err
        assert third.err.count("\n") == 1 and "full: 1 of 1 calls in flight" in third.err
        assert "AGENTCTL_PROVIDER_WAIT=1 s" in third.err
        assert len(fakeapi.requests) == 1       # neither sent a thing
    finally:
        hold.set()
    assert first.wait(timeout=60) == 0


CLOSE_UNDER_A_WAIT = """
import sys, threading, time
from agentctl.endpoint import Identity
from agentctl.errors import TempFail
from agentctl.ops.gate import Gate
from agentctl.store.db import connect

path = sys.argv[1]
connect(path).close()
slowest = 0.0
for i in range(300):
    gate = Gate(path, 1, Identity("openai", "http://127.0.0.1:9/v1", "k"))
    conn = gate._connection()
    ended = {}
    def wait():
        try:
            gate._sleep(conn, 1.0)
        except TempFail:
            ended["at"] = time.monotonic()
    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60    # until the call waits on the gate's connection
    while not getattr(gate, "sleeping", True) and time.monotonic() < deadline:
        pass
    for _ in range(i % 20):             # and then into its looks, now few, now more
        conn.execute("SELECT 1")
    closed = time.monotonic()
    gate.close()
    thread.join()
    slowest = max(slowest, ended.get("at", 99) - closed)
print(slowest)
"""


@pytest.mark.sqlite_files
def test_a_kill_that_closes_the_gate_under_a_waiting_call_ends_it_without_a_crash(tmp_path):
    """The KILL that ends a run waiting for a slot closes its gate while the call's thread
    reads from the gate's connection: closing a SQLite connection another thread is
    reading from crashed the run (SIGSEGV, 1 of 300 tries or so); the waiting thread now
    closes it itself, at once."""
    done = subprocess.run([sys.executable, "-c", CLOSE_UNDER_A_WAIT, str(tmp_path / "a.db")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert float(done.stdout) < 0.5, done.stdout


def test_all_leaves_the_agents_of_an_endpoint_throttled_past_the_wait_allowed(fakeapi, home,
                                                                             monkeypatch):
    """An endpoint that refused with Retry-After 600: a run allowed 1 s of waiting exits
    75 (its agent backs off); then --all leaves the other agent of that endpoint for a
    later run, says so once for the endpoint and counts it as temporarily failing (75),
    sending nothing; an echo agent still runs."""
    monkeypatch.setenv("AGENTCTL_PROVIDER_WAIT", "1")
    fork("-n", "a", "-m", "openai:gpt-test", "one")
    fork("-n", "b", "-m", "openai:gpt-test", "two")
    fork("-n", "e", "-m", "echo", "three")
    fakeapi.error(429, "slow down", retry_after=600)
    first = agent("run", "a")
    assert first.code == 75, first.err
    assert len(fakeapi.requests) == 1
    # agent-why of b, which never ran, with two endpoints of its provider known: the one
    # its run would call, as --all names it (it said "pending: 1 prompt", exit 0)
    with transaction(conn := connect(str(home))):
        endpoint_rows.ensure(conn, "http://192.0.2.1/v1#-", "openai", "http://192.0.2.1/v1")
    conn.close()
    why = agent("why", "b")
    assert why.code == 1 and why.out.startswith("waiting for its provider: "), why.out
    assert "HTTP 429, Retry-After 600 s" in why.out
    ran = agent("run", "--all", "-j", "2")
    assert ran.code == 75, ran.err
    # the throttle began before this --all: the run that met it said so (exit 75 above),
    # so that cron mails it once, not at every tick while it lasts
    assert ran.err == "", ran.err
    assert ran.out == "e: three\n"
    assert len(fakeapi.requests) == 1           # nothing more was sent


def test_all_serves_other_agents_while_an_endpoint_is_full(fakeapi, home, monkeypatch):
    """--all -j 4 with five agents of an endpoint capped at 1 whose call hangs, and four
    of the echo model: it starts three runs of the endpoint (one calling, two ready), and
    the fourth runner serves the echo agents meanwhile."""
    monkeypatch.setenv("AGENTCTL_CONCURRENCY", "openai=1")
    for i in range(5):
        fork("-n", f"o{i}", "-m", "openai:gpt-test", f"slow {i}")
    for i in range(4):
        fork("-n", f"e{i}", "-m", "echo", f"quick {i}")
    hold = threading.Event()
    fakeapi.reply("first", hold=hold)
    for i in range(4):
        fakeapi.reply(f"then {i}")
    run = started("agent-run", "--all", "-j", "4")
    conn = connect(str(home))
    try:
        wait_until(lambda: conn.execute("SELECT count(*) FROM turns t JOIN agents a ON "
                                        "a.id = t.agent_id WHERE a.model = 'echo' AND "
                                        "t.status = 'done'").fetchone()[0] == 4,
                   "the echo agents' turns, while the endpoint is full")
        assert len(fakeapi.requests) == 1
    finally:
        hold.set()
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert turns_of(conn) == {**{f"o{i}": [("done", 1)] for i in range(5)},
                              **{f"e{i}": [("done", 1)] for i in range(4)}}


@pytest.mark.parametrize("name, value, says", [
    ("AGENTCTL_CONCURRENCY", "openai=0", "AGENTCTL_CONCURRENCY must be KEY=N"),
    ("AGENTCTL_CONCURRENCY", "openai", "AGENTCTL_CONCURRENCY must be KEY=N"),
    ("AGENTCTL_CONCURRENCY", "ftp://x=2", "AGENTCTL_CONCURRENCY must be KEY=N"),
    ("AGENTCTL_ENDPOINT_STATE", "maybe", "AGENTCTL_ENDPOINT_STATE must be on or off"),
    ("AGENTCTL_PROVIDER_WAIT", "soon", "AGENTCTL_PROVIDER_WAIT must be a duration"),
])
def test_a_bad_setting_is_exit_2_before_any_intake(fakeapi, monkeypatch, name, value, says):
    fork("-n", "a", "-m", "openai:gpt-test", "hello")
    monkeypatch.setenv(name, value)
    result = agent("run", "a")
    assert (result.code, result.err.count("\n")) == (2, 1), result.err
    assert result.err.startswith(f"agent-run: {says}"), result.err
    assert fakeapi.requests == []
    assert agent("mail", "-c", "a").code == 1 and "a\t0" in agent(
        "ps", "-o", "name,mail", "--format", "tsv").out      # its prompt still pending


def test_off_shares_nothing_and_each_run_retries_on_its_own(fakeapi, home, monkeypatch):
    monkeypatch.setenv("AGENTCTL_ENDPOINT_STATE", "off")
    monkeypatch.setenv("AGENTCTL_CONCURRENCY", "openai=1")
    fork("-n", "a", "-m", "openai:gpt-test", "hello")
    fakeapi.error(429, "slow down", retry_after=1).reply("fine")
    assert agent("run", "a").code == 0
    conn = connect(str(home))
    assert conn.execute("SELECT count(*) FROM endpoints").fetchone()[0] == 0
    assert conn.execute("SELECT endpoint FROM agents WHERE name = 'a'").fetchone()[0] is None


def test_an_endpoint_is_named_by_its_url_and_a_fingerprint_never_the_key(fakeapi, home):
    fork("-n", "a", "-m", "openai:gpt-test", "hello")
    fakeapi.reply("hi")
    assert agent("run", "a").code == 0
    assert f"\na\t{Identity('openai', fakeapi.url + '/v1', OPENAI_KEY).name}\n" in \
        agent("ps", "-o", "name,endpoint", "--format", "tsv", "--no-headers").out
    assert OPENAI_KEY.encode() not in stored(home)


# -- what a response teaches, and which cap holds ---------------------------------------------

def row(**given):
    base = {"id": "http://x/v1#-", "not_before": None, "reason": None, "refused_at": None,
            "spacing": None, "next_at": None, "seen_at": None}
    return {**base, **given}


def test_the_test_server_writes_resets_as_openai_does():
    assert go_duration(179.56) == "2m59.56s" and go_duration(0.012) == "12ms"
    assert go_duration(1.0) == "1s" and go_duration(360.0) == "6m0s"


def test_what_a_response_teaches_the_endpoint():
    now = 1000.0
    refused = limits.Limits(429, retry_after=2.0)
    changes, event = endpoints.learn(row(), refused, now, backoff=1.0)
    assert changes == {"not_before": 1002.0, "reason": "HTTP 429, Retry-After 2 s",
                       "refused_at": 1000.0}
    assert event == ("throttle", {"endpoint": "http://x/v1#-", "until": 1002.0,
                                  "reason": "HTTP 429, Retry-After 2 s"})
    # refused again while refused: the wait grows, no second event
    changes, event = endpoints.learn(row(not_before=1002.0, refused_at=1000.0),
                                     limits.Limits(529), 1001.0, backoff=4.0)
    assert changes == {"not_before": 1005.0, "reason": "HTTP 529"} and event is None
    # answered once the wait is over: recovered
    changes, event = endpoints.learn(row(not_before=1005.0, refused_at=1000.0),
                                     limits.Limits(200), 1006.0, backoff=1.0)
    assert changes == {"refused_at": None}
    assert event == ("recover", {"endpoint": "http://x/v1#-", "seconds": 6.0})
    # a budget of requests half spent: paced as it comes back, then closer while one or
    # more are left, further apart when none is, not at all once it is more than half left
    low = limits.Limits(200, requests=limits.Budget(60, 20, 40.0))
    assert endpoints.learn(row(seen_at=now), low, now, 1.0)[0]["spacing"] == 1.0
    lower = limits.Limits(200, requests=limits.Budget(60, 20, 20.0))
    assert endpoints.learn(row(seen_at=now, spacing=1.0), lower, now, 1.0)[0]["spacing"] \
        == endpoints.FASTER
    refused = limits.Limits(429, requests=limits.Budget(60, 1, 0.01))
    assert endpoints.learn(row(seen_at=now, spacing=1.0), refused, now, 1.0)[0]["spacing"] \
        == endpoints.SLOWER     # (a refused request's reset counts none: not taken for a rate)
    plenty = limits.Limits(200, requests=limits.Budget(60, 50, 10.0))
    assert "spacing" not in endpoints.learn(row(seen_at=now), plenty, now, 1.0)[0]
    assert endpoints.learn(row(seen_at=now, spacing=1.1), plenty, now, 1.0)[0]["spacing"] is None
    # spent: nobody calls until one comes back
    spent = limits.Limits(200, requests=limits.Budget(60, 0, 30.0))
    changes = endpoints.learn(row(seen_at=now, spacing=1.0), spent, now, 1.0, sent=now - 0.5)[0]
    assert changes["not_before"] == 1000.0                  # counted from when it was sent
    assert changes["spacing"] == pytest.approx(30 / 59 * endpoints.SLOWER)  # the slower bound
    # tokens low: waited for until 5% of them are back
    tokens = limits.Limits(200, tokens=limits.Budget(1000, 0, 100.0))
    assert endpoints.learn(row(seen_at=now), tokens, now, 1.0)[0]["not_before"] == 1005.0


@pytest.mark.parametrize("setting, expected", [
    ("", None), ("openai=8,anthropic=4", 8), ("*=3,anthropic=4", 3),
    ("openai=8,http://127.0.0.1:8080=2", 2), ("http://127.0.0.1:8080/v1=1,http://127.0.0.1:8080=2", 1),
    ("http://127.0.0.1:80=2", None), ("HTTP://127.0.0.1:8080/=5", 5)])
def test_the_cap_of_an_endpoint_is_its_most_specific_entry(monkeypatch, setting, expected):
    monkeypatch.setenv("AGENTCTL_CONCURRENCY", setting)
    assert endpoints.cap("openai", "http://127.0.0.1:8080/v1") == expected
