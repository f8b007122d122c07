"""agent-send and agent-mail: delivery, reading, selective receive, waiting."""

import json
import os
import threading
import time

from agentctl.ops.mail import MAX_BODY

from .conftest import (PATIENCE, Result, agent, asleep_at_database, fork, shell, started,
                       unread, wait_until, write_locked)


def test_send_prints_ids_and_mail_lists_unread(conn):
    fork("-n", "box")
    assert agent("send", "box", "hello there\nsecond line").out == "1\n"
    assert agent("send", "box", "-", stdin="from stdin").out == "2\n"
    assert agent("send", "box", stdin="no dash, a pipe").out == "3\n"
    lines = agent("mail", "box").lines
    assert lines[0].split() == ["ID", "FROM", "AGE", "SUBJECT"]
    assert [line.split(None, 3)[3] for line in lines[1:]] == ["hello there", "from stdin", "no dash, a pipe"]
    assert [line.split()[1] for line in lines[1:]] == ["-", "-", "-"]


def test_a_long_subject_is_cut_between_words(conn):
    fork("-n", "box")
    agent("send", "box", "please review " + "the change " * 10)
    subject = "please review the change the change the change the..."
    assert agent("mail", "box").lines[1].endswith(f" {subject}")
    listed = json.loads(agent("mail", "box", "--format", "json", "-o", "subject").out)
    assert listed == [{"subject": subject}]


def test_send_to_several_and_from(conn, monkeypatch):
    a, b = fork("-n", "a"), fork("-n", "b")
    assert agent("send", "--from", "a", "b", "init", "hi").out == "1\n2\n"
    rows = json.loads(agent("mail", "b", "--format", "json", "-o", "id,from,to,kind,subject").out)
    assert rows == [{"id": 1, "from": a, "to": b, "kind": "mail", "subject": "hi"}]
    monkeypatch.setenv("AGENT_ID", "b")
    agent("send", "a", "from self")
    refused = agent("mail", "a")        # another agent's mail is not b's to read
    assert (refused.code, refused.err) == (3, "agent-mail: b can't read the mail of a: an "
                                              "agent acts only on itself and its descendants\n")
    forged = agent("send", "--from", "a", "init", "as a")
    assert (forged.code, forged.err) == (3, "agent-send: b can't send as a: an agent sends "
                                            "mail only as itself\n")
    monkeypatch.delenv("AGENT_ID")
    assert json.loads(agent("mail", "a", "--format", "jsonl", "-o", "from").out) == {"from": b}


def test_send_refusals(conn):
    fork("-n", "a")
    assert (agent("send", "nobody", "x").code, agent("send", "nobody", "x").err) == \
        (1, "agent-send: no such agent: nobody\n")
    assert agent("send", "a", "   ").err == "agent-send: empty body\n"
    assert agent("send", "a", "").code == 2
    big = "x" * (MAX_BODY + 1)
    result = agent("send", "a", "-", stdin=big)
    assert (result.code, result.err) == (2, f"agent-send: body too long: {MAX_BODY + 1} bytes (at most {MAX_BODY})\n")
    agent("kill", "a")
    result = agent("send", "a", "x")
    assert (result.code, result.err) == (3, "agent-send: a: can't receive mail: it has exited\n")
    assert agent("send").code == 2
    assert conn.execute("SELECT count(*) FROM mail").fetchone()[0] == 0


def test_check_counts_and_exit_status(conn):
    fork("-n", "a")
    result = agent("mail", "-c", "a")
    assert (result.code, result.out) == (1, "0\n")
    agent("send", "a", "x")
    result = agent("mail", "-c", "a")
    assert (result.code, result.out) == (0, "1\n")


def test_read_marks_exactly_those_and_peek_marks_none(conn):
    fork("-n", "a")
    for text in ("one", "two", "three"):
        agent("send", "a", text)
    assert agent("mail", "-r", "--peek", "a").out.count("--- mail") == 3
    assert unread(conn, "a") == 3
    out = agent("mail", "-r", "a", "2").out
    assert out.startswith("--- mail 2 from - at ") and out.endswith(" ---\ntwo\n")
    assert [line.split()[0] for line in agent("mail", "a").lines[1:]] == ["1", "3"]
    agent("mail", "-r", "a")
    assert unread(conn, "a") == 0
    assert agent("mail", "a").out == ""                  # never listed as unread again
    assert len(agent("mail", "-a", "a").lines) == 4
    result = agent("mail", "-r", "a", "99")
    assert (result.code, result.err) == (1, "agent-mail: no such mail for a: 99\n")


def test_selective_receive_leaves_the_rest_unread(conn):
    fork("-n", "a")
    fork("-n", "w")
    agent("send", "a", "from operator")
    agent("send", "--from", "w", "a", "from w")
    result = agent("mail", "-r", "--from", "w", "a")
    assert "from w" in result.out and "from operator" not in result.out
    assert agent("mail", "-q", "a").out == "1\n"
    assert agent("mail", "-c", "--from", "w", "a").code == 1
    assert agent("mail", "-c", "--from", "-", "a").out == "1\n"


def test_mail_usage_errors(conn):
    assert agent("mail").err == "agent-mail: missing AGENT (and AGENT_ID is not set)\n"
    assert agent("mail", "3").code == 2
    assert agent("mail", "nobody").code == 1
    assert agent("mail", "--wait", "-1", "init").code == 2


def test_wait_blocks_until_mail_arrives(conn):
    fork("-n", "a")
    assert agent("mail", "--wait", "0.3", "-c", "a").code == 1
    timer = threading.Timer(0.4, lambda: shell("agent-send a late"))
    started = time.monotonic()
    timer.start()
    result = agent("mail", "--wait", "60", "-c", "a")
    elapsed = time.monotonic() - started
    timer.join()
    assert result.code == 0 and result.out == "1\n"         # the mail, not the timeout
    assert 0.4 <= elapsed < 30


def test_wait_does_not_burn_cpu(conn):
    """The CPU time of a 2 s wait, beyond that of the same program not waiting (its
    start-up alone, which a loaded machine makes dearer), is small."""
    fork("-n", "a")

    def cpu(wait):
        result = shell(f"/usr/bin/time -f '%U %S' agent-mail --wait {wait} -c a")
        assert result.code == 1, result
        return sum(map(float, result.err.split()[-2:]))
    waiting, starting = cpu(2), cpu(0)
    assert waiting - starting < 0.3, (waiting, starting)


def test_bulk_jsonl(conn):
    fork("-n", "a")
    fork("-n", "b")
    lines = "".join(json.dumps({"to": to, "body": f"n{i}"}) + "\n"
                    for i, to in enumerate(["a", "b"] * 1500))
    result = agent("send", "--jsonl", stdin=lines + json.dumps({"to": "a", "body": "x", "from": "b"}) + "\n")
    assert result.code == 0 and len(result.lines) == 3001
    assert unread(conn, "a") == 1501 and unread(conn, "b") == 1500


def test_bulk_bad_line_delivers_nothing_of_its_batch(conn):
    fork("-n", "a")
    good = json.dumps({"to": "a", "body": "ok"}) + "\n"
    for bad, message in [("{not json\n", "line 3: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
                         (json.dumps({"to": "a"}) + "\n", 'line 3: want an object with string "to" and "body"'),
                         (json.dumps({"to": "zz", "body": "x"}) + "\n", "line 3: no such agent: zz"),
                         (json.dumps({"to": "a", "body": " "}) + "\n", "line 3: empty body")]:
        result = agent("send", "--jsonl", stdin=good * 2 + bad + good)
        assert result.err == f"agent-send: {message}\n"
        assert result.code in (1, 2) and result.out == ""
        assert unread(conn, "a") == 0


# Mails per sender: `make test` sends 25 each (the same race, exactly checked, in a
# few seconds); `make soak` sends the full 200 each.
SENDER_MAILS = int(os.environ.get("AGENTCTL_SOAK_MAILS", "25"))


def test_eight_processes_sending_at_once_lose_nothing(conn):
    fork("-n", "target")
    script = ("seq 8 | xargs -P 8 -I{} sh -c 'for i in $(seq %d); do "
              "agent-send target \"m {} $i\" >/dev/null || exit 1; done'" % SENDER_MAILS)
    result = shell(script, timeout=600)
    assert result.code == 0, result.err
    assert "locked" not in result.err and result.err == ""
    assert unread(conn, "target") == 8 * SENDER_MAILS
    bodies = {r[0] for r in conn.execute("SELECT body FROM mail")}
    assert bodies == {f"m {p} {i}" for p in range(1, 9) for i in range(1, SENDER_MAILS + 1)}


def test_check_with_wait_prints_zero_on_timeout(conn):
    fork("-n", "a")
    result = agent("mail", "-c", "--wait", "0.1", "a")
    assert (result.code, result.out) == (1, "0\n")


def test_send_without_text_on_a_terminal_says_what_is_missing(conn, monkeypatch):
    import io
    fork("-n", "a")

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    from agentctl.cli import send
    import sys
    monkeypatch.setattr(sys, "stdin", Terminal())
    from agentctl.cli.program import run
    assert run(send.cli, ["a"]) == 2


def test_read_in_machine_formats_goes_through_the_shared_renderer(conn):
    a = fork("-n", "a")
    agent("send", "a", "line one\nline two")
    rows = [json.loads(line) for line in agent("mail", "-r", "--peek", "--format", "jsonl", "a").lines]
    assert [(r["id"], r["from"], r["to"], r["kind"], r["body"]) for r in rows] == \
        [(1, None, a, "mail", "line one\nline two")]
    tsv = agent("mail", "-r", "--format", "tsv", "-o", "id,body", "--no-headers", "a").out
    assert tsv == "1\tline one\\nline two\n"
    assert unread(conn, "a") == 0


def test_two_readers_of_one_mailbox_never_get_the_same_mail(conn, tmp_path):
    """A work queue: mail is marked read before it is printed, in one
    transaction, so each mail goes to one reader (-q prints the ids taken)."""
    fork("-n", "box")
    result = shell(f"cd {tmp_path}" + """
        for i in 1 2 3 4; do        # each reads until all is sent and none is left
            ( while agent-mail --wait 2 -r -q box || [ ! -e sent ] ||
                    [ "$(agent-mail -c box)" != 0 ]; do :; done > reader$i.out ) &
        done
        for k in $(seq 30); do agent-send box "job $k" >/dev/null; done
        touch sent
        wait
        cat reader*.out
    """, timeout=600)
    taken = result.out.split()
    assert sorted(map(int, taken)) == list(range(1, 31)), result
    assert agent("mail", "-c", "box").out == "0\n"


def test_a_second_reader_waits_for_the_first_to_mark_what_it_took(conn, home, monkeypatch):
    """The race itself, made certain: a second reader starts while the first
    holds the mail it selected, not yet marked read. It must get none of it."""
    from agentctl.store import mailbox
    fork("-n", "box")
    for k in range(5):
        agent("send", "box", f"job {k}")
    real, second = mailbox.mark_read, []

    def slow_mark_read(conn, ids, **kwargs):
        if not second:
            second.append(started("agent-mail", "-r", "-q", "box"))
            wait_until(lambda: asleep_at_database(second[0].pid, home, lock=True)
                       or second[0].poll() is not None,     # (it did not wait: said below)
                       "the second reader to wait for the first one's lock")
        return real(conn, ids, **kwargs)
    monkeypatch.setattr(mailbox, "mark_read", slow_mark_read)
    first = agent("mail", "-r", "-q", "box")
    out, err = second[0].communicate(timeout=PATIENCE)
    assert (first.code, first.lines) == (0, ["1", "2", "3", "4", "5"])
    assert (second[0].returncode, out, err) == (0, "", "")    # it read nothing


def test_a_read_that_meets_a_locked_database_prints_nothing(conn, home, monkeypatch):
    fork("-n", "box")
    agent("send", "box", "secret")
    monkeypatch.setenv("AGENTCTL_BUSY_TIMEOUT", "0.2")
    with write_locked(home):
        result = agent("mail", "-r", "box")
    assert (result.code, result.out) == (75, "")
    assert agent("mail", "-r", "box").out.endswith("\nsecret\n")


def test_wait_with_ids_waits_for_those_read_or_not(conn):
    fork("-n", "box")
    agent("send", "box", "one")
    assert agent("mail", "-r", "box").code == 0
    result = agent("mail", "--wait", "5", "-r", "box", "1")
    assert result.code == 0 and result.out.endswith("\none\n")


def test_bulk_send_with_a_from_that_is_no_string_is_a_usage_error():
    fork("-n", "w1")
    lines = '{"to": "w1", "body": "fine"}\n{"to": "w1", "body": "a", "from": 5}\n'
    assert agent("send", "--jsonl", stdin=lines) == Result(
        2, "", 'agent-send: line 2: "from" must be a string (an agent, or - for the operator)\n')
    assert agent("mail", "-c", "w1").out == "0\n"           # the batch, not half of it


def test_read_all_prints_mail_read_before_too(conn):
    fork("-n", "bob")
    agent("send", "bob", "first")
    agent("send", "bob", "second")
    assert agent("mail", "-r", "bob").code == 0
    agent("send", "bob", "third")
    result = agent("mail", "-r", "-a", "--format", "jsonl", "-o", "id", "bob")
    assert result.out.splitlines() == ['{"id": 1}', '{"id": 2}', '{"id": 3}']
    assert agent("mail", "-c", "bob").code == 1


def test_wait_with_several_ids_waits_for_all_of_them(conn):
    fork("-n", "bob")
    agent("send", "bob", "one")
    # (another process: two programs in one process would share its sys.stdout)
    later = threading.Timer(1.0, lambda: shell("agent-send bob two"))
    later.start()
    try:
        result = agent("mail", "--wait", "60", "-r", "--format", "jsonl", "-o", "id", "bob",
                       "1", "2")
    finally:
        later.join()
    assert (result.code, result.out.splitlines()) == (0, ['{"id": 1}', '{"id": 2}']), result


def test_bulk_lines_that_are_not_utf8_are_read_as_u_fffd(conn):
    fork("-n", "w1")
    result = agent("send", "--jsonl", stdin=b'{"to": "w1", "body": "x\xffy"}\n')
    assert result.code == 0, result.err
    assert agent("mail", "-r", "--format", "jsonl", "-o", "body", "w1").out == \
        '{"body": "x\ufffdy"}\n'
