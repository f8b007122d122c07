"""Mail loops (agentctl(7), Lifecycle): two agents that answer each other's mail are held
after N mails between them with no other input (or the same words each way), their
supervisors told once; the count starts again after a hold and after other input."""

import json

import pytest

from agentctl import mailloop
from agentctl.ids import INIT_ID

from .conftest import agent, events, fork, mails, row, script

WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def replying(tmp_path, me, to, same=None):
    """The scripted model of `me`: every input answered by a mail to `to` (a rule per
    last digit of the mail it got, so that no two mails in a row say the same; or
    always `same`), then "sent"."""
    def rule(body, match=None):
        steps = [{"tool_calls": [{"name": "send", "arguments": {"to": to, "body": body}}]},
                 {"content": "sent"}]
        return {"steps": steps} if match is None else {"match": match, "steps": steps}
    rules = [] if same else [rule(f"{w}, says {me}", rf"mail \d*{d} from")
                             for d, w in enumerate(WORDS)]
    return script(tmp_path, *rules, rule(same or f"hello from {me}"), name=f"{me}.jsonl")


def pair(tmp_path, *options, same=None):
    """Agents a and b under boss (a lead that is stopped: it gets mail, and --all
    leaves it alone), each answering the other; a has a prompt."""
    fork("-n", "boss", "-r", "lead")
    agent("kill", "-s", "STOP", "boss")
    fork("-p", "boss", "-n", "a", "-m", replying(tmp_path, "a", "b", same), *options, "start")
    fork("-p", "boss", "-n", "b", "-m", replying(tmp_path, "b", "a", same), *options)


def run_all(times):
    """agent-run --all, at most `times` times, until it has nothing to do (exit 1):
    the exit statuses."""
    codes = []
    while len(codes) < times and 1 not in codes:
        codes.append(agent("run", "--all").code)
    return codes


def exchanged(conn):
    """The mails a and b sent each other."""
    ids = [row(conn, "a")["id"], row(conn, "b")["id"]]
    return conn.execute("SELECT count(*) FROM mail WHERE kind = 'mail' AND sender_id IN (?, ?) "
                        "AND recipient_id IN (?, ?)", ids + ids).fetchone()[0]


def held(conn, *names):
    return [mailloop.looping(row(conn, n)) for n in names]


# -- two scripted agents that answer each other ---------------------------------------------

def test_two_agents_that_answer_each_other_are_held_after_n_mails(conn, tmp_path):
    pair(tmp_path, "--mail-loop", "6/1h")
    assert run_all(20) == [0] * 6 + [1]         # six turns, a mail each; then nothing
    assert exchanged(conn) == 6 and held(conn, "a", "b") == [True, True]
    last = conn.execute("SELECT max(id) FROM mail WHERE kind = 'mail'").fetchone()[0]
    for me, peer in (("a", "b"), ("b", "a")):
        assert events(conn, me, "loop") == [{"peer": row(conn, peer)["id"], "count": 6,
                                             "seconds": 3600.0, "mail": last}]
        why = agent("why", me)
        assert why.code == 1, why
        assert why.out.startswith(f"held in a mail loop with {peer}: 6 mails within 1h, no "
                                  f"other input (mail {last}), ")
        assert f" ago (agent-kill -s CONT {me} {peer} lets --all run them again;" in why.out
    assert [line.split()[1] for line in agent("ps", "-o", "name,stat").lines[3:]] == ["SH", "SH"]
    assert agent("mail", "-c", "a").out == "1\n"        # the mail that made it: delivered
    notices = mails(conn, "boss", "loop")
    assert len(notices) == 1 and notices[0].startswith(      # b sent the sixth
        f"b ({row(conn, 'b')['id']}) and a ({row(conn, 'a')['id']}) are held in a mail "
        "loop: 6 mails between them within 1h, with no other input.")
    assert "held in a mail loop with b: 6 mails within 1h" in agent("log", "a").out
    # CONT lets both go, their count started anew: a loop that goes on is held again
    assert agent("kill", "-s", "CONT", "a", "b").code == 0
    assert held(conn, "a", "b") == [False, False] and agent("why", "a").code == 0
    assert run_all(20) == [0] * 6 + [1]
    assert exchanged(conn) == 12 and held(conn, "a", "b") == [True, True]
    assert len(mails(conn, "boss", "loop")) == 2        # one a loop, not one a mail


def test_with_the_check_off_they_keep_going(conn, tmp_path):
    """The check is either's: off on both, nothing stops them (but this loop's bound);
    turned on again on one, the run it finds is a loop at once."""
    pair(tmp_path, "--mail-loop", "4/1h")
    for name in ("a", "b"):
        assert agent("set", name, "mail_loop=off").code == 0      # the operator's
    assert run_all(10) == [0] * 10
    assert exchanged(conn) == 10 and held(conn, "a", "b") == [False, False]
    assert events(conn, "a", "loop") == [] and mails(conn, "boss", "loop") == []
    assert agent("set", "b", "mail_loop=4/1h").code == 0
    assert run_all(10) == [0, 1]
    assert exchanged(conn) == 11 and held(conn, "a", "b") == [True, True]
    assert events(conn, "a", "loop")[0]["count"] == 4       # (at least)


@pytest.mark.parametrize("sender", [["--from", "c"], []], ids=["agent", "operator"])
def test_other_input_starts_the_count_again(conn, tmp_path, sender):
    """A genuine exchange with other input between is no loop: mail from a third agent,
    or from the operator, to one of the two ends the run."""
    pair(tmp_path, "--mail-loop", "6/1h")
    fork("-p", "boss", "-n", "c")
    assert run_all(4) == [0] * 4
    assert agent("send", *sender, "a", "How is it going?").code == 0
    assert run_all(20) == [0] * 6 + [1]
    assert exchanged(conn) == 10 and held(conn, "a", "b") == [True, True]
    assert events(conn, "b", "loop")[0]["count"] == 6


def test_an_echo_of_the_same_words_is_held_before_n(conn, tmp_path):
    pair(tmp_path, same="Thank you! Let me know if you need anything else.")
    assert run_all(30) == [0] * 6 + [1]
    assert exchanged(conn) == 6 and held(conn, "a", "b") == [True, True]
    assert events(conn, "a", "loop")[0]["same"] == mailloop.SAME
    assert "the same words 3 times in a row each way" in mails(conn, "boss", "loop")[0]
    assert "the same words 3 times each way" in agent("why", "b").out


# -- the rule, driven by agent-send --from (no model) ---------------------------------------

def exchange(*bodies, first="a", second="b"):
    """Mail from `first` and `second` in turn, one body each."""
    for n, body in enumerate(bodies):
        frm, to = (first, second) if n % 2 == 0 else (second, first)
        assert agent("send", "--from", frm, to, body).code == 0


def agents(*specs):
    """Agents forked by (name, parent, options...) each."""
    for name, parent, *options in specs:
        fork("-p", parent, "-n", name, *options)


def test_near_identical_words_count_as_the_same(conn):
    agents(("boss", INIT_ID), ("a", "boss"), ("b", "boss"))
    exchange("Ping 1", "pong  2", "ping 3", "PONG\n4", "ping 5")
    assert held(conn, "a", "b") == [False, False]
    exchange("pong 6", first="b", second="a")
    assert held(conn, "a", "b") == [True, True]
    assert events(conn, "a", "loop")[0] | {"peer": None} == {
        "peer": None, "count": 6, "seconds": 3600.0, "same": 3,
        "mail": conn.execute("SELECT max(id) FROM mail WHERE kind = 'mail'").fetchone()[0]}


def test_words_that_change_are_no_loop_before_n(conn):
    agents(("boss", INIT_ID), ("a", "boss"), ("b", "boss"))
    exchange("ping", "yes", "ping", "no", "ping", "maybe", "ping")
    assert held(conn, "a", "b") == [False, False]


def test_only_mail_within_the_window_counts(conn):
    agents(("boss", INIT_ID), ("a", "boss", "--mail-loop", "4/1h"),
           ("b", "boss", "--mail-loop", "4/1h"))
    exchange("one", "two", "three")
    conn.execute("UPDATE mail SET created_at = created_at - 7200")     # two hours ago
    conn.commit()
    exchange("four", "five", "six", first="b", second="a")
    assert held(conn, "a", "b") == [False, False]
    exchange("seven")
    assert held(conn, "a", "b") == [True, True]


def test_mail_one_way_is_no_exchange(conn):
    agents(("boss", INIT_ID), ("a", "boss"), ("b", "boss"))
    for n in range(25):
        assert agent("send", "--from", "a", "b", f"reminder {n}").code == 0
    assert held(conn, "a", "b") == [False, False]


@pytest.mark.parametrize("tree, told", [
    ([("a", "p"), ("b", "p")], {"p": 1}),                     # a common parent: one
    ([("a", "p"), ("b", "q")], {"p": 1, "q": 1}),            # each its own
    ([("a", "p"), ("b", "a")], {"p": 1, "a": 0}),            # not one of the two
    ([("a", INIT_ID), ("b", INIT_ID)], {}),                  # the operator's: no one
])
def test_each_supervisor_is_told_once(conn, tree, told):
    agents(("p", INIT_ID), ("q", INIT_ID), *[(n, parent, "--mail-loop", "4/1h")
                                             for n, parent in tree])
    exchange("one", "two", "three", "four", "five", "six")
    assert held(conn, "a", "b") == [True, True]
    sent = conn.execute("SELECT recipient_id, count(*) FROM mail WHERE kind = 'loop' "
                        "GROUP BY recipient_id").fetchall()
    assert dict(sent) == {row(conn, n)["id"]: c for n, c in told.items() if c}


def test_a_batch_of_agent_send_jsonl_is_checked(conn):
    agents(("boss", INIT_ID), ("a", "boss"), ("b", "boss"))
    lines = [{"from": "a" if n % 2 == 0 else "b", "to": "b" if n % 2 == 0 else "a",
              "body": f"line {WORDS[n % 10]} {n}"} for n in range(25)]
    result = agent("send", "--jsonl", stdin="".join(json.dumps(x) + "\n" for x in lines))
    assert result.code == 0 and len(result.lines) == 25
    assert held(conn, "a", "b") == [True, True]
    assert len(mails(conn, "boss", "loop")) == 1


def test_agent_set_lets_the_one_it_changes_go(conn):
    agents(("boss", INIT_ID), ("a", "boss", "--mail-loop", "4/1h"),
           ("b", "boss", "--mail-loop", "4/1h"))
    exchange("one", "two", "three", "four")
    assert held(conn, "a", "b") == [True, True]
    assert agent("set", "a", "mail_loop=3/1h").code == 0
    assert held(conn, "a", "b") == [False, True]
    assert row(conn, "a")["held_at"] is None and agent("why", "a").code == 0     # its mail
    assert agent("why", "b").out.startswith("held in a mail loop with a: ")


def test_a_hold_after_a_failure_is_not_a_loop(conn, tmp_path):
    """A failure after a loop's hold is what agent-why says."""
    agents(("boss", INIT_ID), ("a", "boss", "--mail-loop", "2/1h"),
           ("b", "boss", "--mail-loop", "2/1h", "-m", script(tmp_path, {"reply": {
               "fail": "error"}})))
    exchange("one", "two")
    assert held(conn, "a", "b") == [True, True]
    assert agent("run", "b").code == 69
    assert held(conn, "b") == [False] and row(conn, "b")["held_at"] is not None
    assert agent("why", "b").out.startswith("held after a failure")
