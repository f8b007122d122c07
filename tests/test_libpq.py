"""store/libpq.py, the PostgreSQL path's driver: values both ways, waits that a signal
ends, a server that never answers, libpq's notices kept off the terminal. On the worker's
PostgreSQL server whatever --backend says (as tests/test_postgresql.py)."""

import gc
import math
import os
import signal
import socket
import threading
import time

import pytest

from agentctl.store.db import connect, transaction

from .conftest import PATIENCE, agent, postgresql_database, wait_until


@pytest.fixture
def pg(monkeypatch, request):
    url = postgresql_database(request)
    monkeypatch.setenv("AGENTCTL_DB", url)
    return url


def test_values_go_and_come_back_as_python_s(pg):
    conn = connect(pg)
    sent = (None, 7, -40000, 2**40, -2**70, 1.5, float("inf"), "50% ü", b"\x00\xff", True)
    row = conn.execute("SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '100%', "
                       "CAST('NaN' AS DOUBLE PRECISION)", sent).fetchone()
    assert tuple(row)[:10] == (None, 7, -40000, 2**40, -2**70, 1.5, float("inf"), "50% ü",
                               b"\x00\xff", 1)
    assert row[10] == "100%" and math.isnan(row[11])
    assert [type(v) for v in row[1:5]] == [int] * 4
    conn.close()


def test_a_column_keeps_an_empty_text_apart_from_null(pg):
    """Values are read a column at a time: a NULL and an empty text both come as an empty
    value, told apart only for text; a typed column's empty value is its NULL."""
    conn = connect(pg)
    rows = conn.execute(
        "SELECT * FROM (VALUES ('a', 1, 1.5, true, CAST('\\x00' AS BYTEA)), "
        "('', NULL, NULL, NULL, CAST('' AS BYTEA)), (NULL, -2, 0.0, false, NULL)) "
        "AS v (t, n, f, b, x)").fetchall()
    assert [tuple(r) for r in rows] == [("a", 1, 1.5, True, b"\x00"), ("", None, None, None, b""),
                                        (None, -2, 0.0, False, None)]
    assert [tuple(r) for r in conn.execute("SELECT '' AS t WHERE false").fetchall()] == []
    width_none = conn.execute("SELECT FROM agents").fetchall()     # rows of no column
    assert [tuple(r) for r in width_none] == [()]
    conn.close()


def test_a_notice_of_the_server_is_not_printed(pg, capfd):
    conn = connect(pg)
    conn.execute("DO $$ BEGIN RAISE NOTICE 'a notice'; END $$")
    conn.close()
    assert "notice" not in capfd.readouterr().err


class Interrupted(Exception):
    pass


def test_a_signal_during_a_wait_for_the_lock_cancels_it(pg, monkeypatch):
    monkeypatch.setenv("AGENTCTL_BUSY_TIMEOUT", "60")
    holder, waiter, watcher = connect(pg), connect(pg), connect(pg)
    holder.execute("BEGIN IMMEDIATE")

    def interrupt():
        wait_until(lambda: watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ? AND wait_event_type = "
            "'Lock'", (waiter.raw.backend_pid,)).fetchone()[0] == 1, "the wait for the lock")
        os.kill(os.getpid(), signal.SIGUSR1)

    def raise_interrupted(*_):
        raise Interrupted()

    previous = signal.signal(signal.SIGUSR1, raise_interrupted)
    thread = threading.Thread(target=interrupt, daemon=True)
    try:
        thread.start()
        started = time.monotonic()
        with pytest.raises(Interrupted):
            waiter.execute("BEGIN IMMEDIATE")       # waits for holder's lock
        assert time.monotonic() - started < 30      # not the lock_timeout of 60 s
    finally:
        signal.signal(signal.SIGUSR1, previous)
        thread.join()
    waiter.execute("ROLLBACK")
    holder.execute("ROLLBACK")
    with transaction(waiter):                       # the statement was cancelled: the
        waiter.execute("SELECT 1")                  # lock is free, the connection sound
    for conn in (holder, waiter, watcher):
        conn.close()


def test_a_server_that_never_answers_is_75_at_connect_timeout(monkeypatch):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)        # the kernel accepts the connection; nobody answers on it
    try:
        url = f"postgresql://me@127.0.0.1:{silent.getsockname()[1]}/x?connect_timeout=1"
        monkeypatch.setenv("AGENTCTL_DB", url)
        started = time.monotonic()
        result = agent("ps")
        assert time.monotonic() - started < 20
    finally:
        silent.close()
    assert result.code == 75 and "timeout" in result.err and result.err.count("\n") == 1



def test_a_connection_nobody_closed_frees_its_server_slot(pg):
    conn, watcher = connect(pg), connect(pg)
    pid = conn.raw.backend_pid
    del conn
    gc.collect()
    wait_until(lambda: watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ?",
                                       (pid,)).fetchone()[0] == 0, "the server's backend to end")
    watcher.close()


def test_a_wait_for_a_change_without_bound_ends_at_the_change(pg):
    waiter, writer = connect(pg), connect(pg)
    waiter.changes()                                # LISTEN from here
    came = []
    thread = threading.Thread(target=lambda: came.append(waiter.wait_for_change(1e12)),
                              daemon=True)
    thread.start()
    with transaction(writer):
        writer.execute("UPDATE agents SET name = name WHERE id = 'none'")
    thread.join(PATIENCE)
    assert came == [True]
    for conn in (waiter, writer):
        conn.close()
