"""agent-wait: waiting, reaping, exit status, ids from stdin."""

import json
import threading
import time

from agentctl.store import registry
from agentctl.ops import lifecycle
from agentctl.store.db import connect, transaction

from .conftest import agent, fork, shell


def finish(db_path, ref, code=0, result=None, delay=0.0):
    """Exit an agent as a finished turn would (from another connection)."""
    time.sleep(delay)
    conn = connect(str(db_path))
    with transaction(conn):
        lifecycle.exit(conn, registry.resolve(conn, ref), code=code, result=result)
    conn.close()


def test_collects_a_zombie_and_prints_its_result(conn, home):
    w = fork("-n", "w")
    finish(home, "w", result="42 pages\nmore")
    result = agent("wait", "w", "--format", "json")
    assert result.code == 0
    assert json.loads(result.out) == [{"id": w, "name": "w", "status": "exited",
                                       "result": "42 pages\nmore", "value": None}]
    assert registry.get(conn, w)["status"] == "X"
    assert conn.execute("SELECT count(*) FROM events WHERE agent_id = ? AND kind = 'reap'",
                        (w,)).fetchone()[0] == 1


def test_a_long_result_is_cut_between_words_in_the_table_only(home):
    result = "please review " + "the change " * 10 + "\nsecond line"
    for name in ("w1", "w2"):
        fork("-n", name)
        finish(home, name, result=result)
    table = agent("wait", "w1")
    assert table.lines[1].endswith(" please review the change the change the change the...")
    assert json.loads(agent("wait", "w2", "--format", "json").out)[0]["result"] == result


def test_exit_status_killed_or_failed_is_3(home):
    fork("-n", "a")
    fork("-n", "b")
    finish(home, "a")
    finish(home, "b", code=1)
    result = agent("wait", "a", "b")
    assert result.code == 3
    assert [line.split()[2:4] for line in result.lines[1:]] == [["exited", "0"], ["failed", "1"]]


def test_timeout_is_1_and_reaps_nothing_still_running(conn):
    a = fork("-n", "a")
    started = time.monotonic()
    result = agent("wait", "--timeout", "0.3", "a")
    assert result.code == 1 and result.out == ""
    assert 0.3 <= time.monotonic() - started < 30          # its timeout, not forever
    assert registry.get(conn, a)["status"] == "S"


def test_waits_until_exit(home):
    fork("-n", "a")
    started = time.monotonic()
    exiting = threading.Thread(target=finish, args=(home, "a"), kwargs={"delay": 0.4})
    exiting.start()
    result = agent("wait", "-q", "a")
    assert result.code == 0 and time.monotonic() - started >= 0.4
    exiting.join()


def test_any_returns_on_the_first(home):
    fork("-n", "a")
    b = fork("-n", "b")
    finish(home, "b")
    result = agent("wait", "--any", "-q", "a", "b")
    assert (result.code, result.out) == (0, f"{b}\n")


def test_default_is_every_child_of_self(home):
    lead = fork("-n", "lead")
    w1 = fork("-p", "lead")
    w2 = fork("-p", "lead")
    finish(home, w1)
    finish(home, w2, result="done")
    result = shell("agent-wait -q", env={"AGENT_ID": lead})     # stdin: /dev/null
    assert result.code == 0 and set(result.lines) == {w1, w2}


def test_an_empty_pipe_waits_for_nothing():
    fork("-n", "busy")
    result = shell("true | agent-wait --timeout 5")
    assert (result.code, result.out) == (0, "")


def test_ids_from_a_pipe():
    result = shell("agent-fork -n p >/dev/null; id=$(agent-fork -p p); agent-kill -s KILL $id; "
                   "agent-ps -q --parent p --status Z | agent-wait -o status --format tsv --no-headers")
    assert (result.code, result.out) == (3, "killed\n")


def test_unknown_agent(conn):
    result = agent("wait", "nobody")
    assert (result.code, result.err) == (1, "agent-wait: no such agent: nobody\n")


def test_waiting_for_init_or_for_itself_is_a_usage_error(monkeypatch):
    a = fork("-n", "a")
    result = agent("wait", "init")
    assert (result.code, result.err) == (2, "agent-wait: init never exits: it can't be waited for\n")
    monkeypatch.setenv("AGENT_ID", a)
    result = agent("wait", "--timeout", "5", "a")
    assert (result.code, result.err) == (2, "agent-wait: a: can't wait for itself ($AGENT_ID)\n")
