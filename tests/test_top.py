"""agent-top: the live view, driven on a real terminal (a tmux pane: keys pressed, the
screen read), the terminal given back on every way out; one snapshot when not on a
terminal."""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

import pytest

from agentctl.ops import top
from agentctl.store import registry
from agentctl.store.db import transaction

from .conftest import ASKING, BIN, agent, fork, needs, pending_ids, script, started, wait_until
from .fakeapi import fakeapi  # noqa: F401
from .tmux import Screen


class Pane(Screen):
    """A command on a tmux pane of a tmux server of its own (so no other test's or the
    user's), 150 x 30, run by a shell that says how it exited and what the terminal's
    modes were before and after."""

    def __init__(self, tmux, *args, env=None, width=150, height=30):
        self.tmux, self.dir = tmux, tempfile.mkdtemp(prefix="top")
        self.socket = os.path.join(self.dir, "s")
        program = os.path.join(BIN, "agent-top")
        run = " ".join([program] + [f"'{a}'" for a in args])
        script = (f"cd {self.dir}; trap : INT; stty -g > before; "
                  f"sh -c 'echo $$ > pid; exec \"$@\"' - {run}; echo \"exit=$?\"; "
                  "stty -g > after; exec tail -f /dev/null")     # the pane stays to be read
        full = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"], **(env or {}))
        for name in ("TMUX", "COLUMNS", "LINES"):     # (curses takes a size they give)
            full.pop(name, None)
        subprocess.run([tmux, "-S", self.socket, "-f", "/dev/null", "new-session", "-d",
                        "-x", str(width), "-y", str(height), "sh", "-c", script],
                       env=full, check=True)
        self.pid = int(wait_until(lambda: self._read("pid"), "agent-top's pid"))

    def _read(self, name):
        try:
            with open(os.path.join(self.dir, name)) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        return text.strip() or None

    def line(self, text):
        """The screen's line that holds `text`."""
        return next(line for line in self.screen().splitlines() if text in line)

    def flag(self, name):
        return self._tmux("display-message", "-p", f"#{{{name}}}").strip()

    def exited(self):
        """Wait until agent-top has exited; its status as the shell saw it."""
        screen = self.shows("exit=")
        return int(screen.split("exit=", 1)[1].split()[0])

    def restored(self):
        """Whether the terminal is as it was: its modes, the normal screen, a cursor."""
        wait_until(lambda: self._read("after"), "the shell to read the modes again")
        return (self._read("before") == self._read("after") and self.flag("alternate_on") == "0"
                and self.flag("cursor_flag") == "1")

    def close(self):
        super().close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def pane():
    tmux = needs("tmux", "tmux")
    opened = []

    def start(*args, **kwargs):
        opened.append(Pane(tmux, *args, **kwargs))
        return opened[-1]
    yield start
    for p in opened:
        p.close()


def test_the_tree_what_each_does_and_its_changes_followed(pane, tmp_path, conn):
    fork("-n", "lead", "-m", "echo")
    fork("-n", "w1", "-p", "lead", "-m", "echo", "do it")
    fork("-n", "w2", "-p", "lead", "-r", "worker", "-m", script(tmp_path, ASKING), "go")
    agent("run", "w2")                                  # paused on its question
    agent("kill", "-s", "STOP", "lead")
    top = pane()
    screen = top.shows("w2", "in flight: 0 model calls")
    assert "agents: 4 live: 0 running, 1 paused, 2 sleeping, 1 stopped" in screen
    assert top.flag("alternate_on") == "1"
    assert "\\_ lead" in top.line("lead") and "   \\_ w1" in top.line(" w1 ")
    assert "stopped: by STOP" in top.line("lead")
    assert "pending: 1 prompt" in top.line(" w1 ")
    request = agent("answer", "-q").out.strip()
    assert f"paused: request {request} (question)" in top.line(" w2 ")
    assert top.line(" w2 ").split()[3:5] == ["P", "worker"]
    fork("-n", "late", "-p", "w1")                      # another program's commit
    assert "\\_ late" in top.shows("late")
    assert top.line("lead").split()[5] == "1"          # w2's question, mailed to its parent
    agent("kill", "-s", "CONT", "lead")
    wait_until(lambda: "pending: 1 unread mail" in top.line("lead"),
               "lead to be seen continued")
    agent("kill", "late")
    wait_until(lambda: top.line(" late ").split()[3] == "Z", "late's exit to be seen")
    top._tmux("resize-window", "-x", "90", "-y", "12")      # drawn again at the new size
    wait_until(lambda: max(map(len, top.screen().splitlines())) < 90
               and "q quit" in top.screen().splitlines()[11], "the screen redrawn smaller")
    top.keys("q")
    assert top.exited() == 0 and top.restored()


def test_a_model_call_in_flight_and_its_tokens(pane, conn, fakeapi, monkeypatch):
    monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "60")
    fork("-n", "a", "-m", "openai:gpt-test", "go")
    hold = threading.Event()
    fakeapi.reply("done", usage=(1200, 34), hold=hold)
    top = pane()
    top.shows(" a ", "pending: 1 prompt")
    run = started("agent-run", "a")
    try:
        screen = top.shows("model call (", "in flight: 1 model call")
        assert "1 running" in screen and top.line(" a ").split()[3] == "R"
        assert top.line(" a ").split()[7] == "0/0"          # its open turn's tokens/its total
    finally:
        hold.set()
        out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    screen = top.shows("in flight: 0 model calls", "-/1.2k")     # no open turn now
    assert "last minute: 1.2k tokens" in screen
    top.keys("q")
    assert top.exited() == 0


def test_signal_keys_ask_first_and_act_on_the_agent_or_its_subtree(pane, conn):
    lead = fork("-n", "lead")
    fork("-n", "sub.a", "-p", "lead")
    fork("-n", "sub.b", "-p", "sub.a")
    top = pane()
    top.shows("sub.b")
    top.keys("/", "sub.a", "Enter")     # the filter leaves sub.a alone (no id holds a dot)
    wait_until(lambda: "filter: sub.a" in top.screen() and "sub.b" not in top.screen(),
               "the filter")
    top.keys("S")
    assert "STOP sub.a? y: sub.a alone, s: sub.a and its subtree (1 more), other: no" in \
        top.shows("STOP sub.a?")
    top.keys("n")
    top.shows("nothing sent")
    assert registry.resolve(conn, "sub.a")["status"] == "S"
    top.keys("S")
    top.shows("STOP sub.a?")
    top.keys("s")
    top.shows("STOP sent to sub.a and its subtree")
    assert [registry.resolve(conn, n)["status"] for n in ("lead", "sub.a", "sub.b")] == \
        ["S", "T", "T"]
    top.keys("/", "C-u", "Enter")                       # no filter: all again
    top.shows("sub.b")
    top.keys("Home", "Down")                            # init, then lead
    top.keys("K")
    top.shows("KILL lead? y: lead alone, s: lead and its subtree (2 more)")
    top.keys("y")
    top.shows("KILL sent to lead")
    assert registry.get(conn, lead)["exit_signal"] == "KILL"
    top.keys("Home", "T")                               # init: refused, said, and top goes on
    top.shows("TERM init?")
    top.keys("y")
    top.shows("agent-top: init can't be killed")
    top.keys("C-c")
    assert top.exited() == 0 and top.restored()


def test_answer_key_decides_the_request_as_agent_answer_does(pane, tmp_path, conn):
    fork("-n", "w", "-m", script(tmp_path, ASKING), "go")
    agent("run", "w")
    top = pane()
    top.shows("paused: request")
    top.keys("End", "a")
    top.shows("(Which color?):")
    top.keys("blue", "Enter")
    top.shows(" answered")
    assert registry.resolve(conn, "w")["status"] == "S"
    assert agent("answer", "-c").code == 1
    assert agent("run", "w").out == "done asking\n"         # the turn resumes with it
    top.keys("a")
    top.shows("w has no request waiting")
    top.keys("q")
    assert top.exited() == 0


def test_answer_key_approves_or_denies_a_tool_call(pane, files, conn):
    work, model = files
    for name in ("a", "b"):
        fork("-n", name, "--allow", "write_file", "--ask", "write_*", "--cwd", str(work),
             "-m", model, "write")
        agent("run", name)                              # each asks to write a file
    first, second = pending_ids()
    top = pane()
    top.shows(" b ", "2 paused")
    top.keys("End", "a")                                # b's request: denied, with a reason
    top.shows("asks to run write_file {\"path\": \"out.txt\"", "y approve, d deny")
    top.keys("d")
    top.shows("deny, saying why")
    top.keys("not now", "Enter")
    top.shows(f"request {second} denied")
    top.keys("Up", "a")                                 # a's: approved
    top.shows("y approve, d deny")
    top.keys("y")
    top.shows(f"request {first} approved", "0 paused")
    top.keys("q")
    assert top.exited() == 0
    assert pending_ids() == []
    decided = {r["id"]: (r["decision"], r["answer"]) for r in conn.execute(
        "SELECT id, decision, answer FROM requests")}   # (as agent-answer records them)
    assert decided == {first: ("approved", None), second: ("denied", "not now")}


def test_log_context_and_reasons_of_the_selected_agent(pane, conn):
    fork("-n", "a", "-s", "Be terse.", "hello there")
    agent("kill", "-s", "STOP", "a")
    top = pane()
    top.shows(" a ")
    top.keys("End", "l")
    screen = top.shows("log of a", "forked from init")
    assert "status      S -> T" in screen
    top.keys("q")
    top.shows("in flight")
    top.keys("r")
    screen = top.shows("context of a", "hello there")
    assert "Be terse." in screen
    top.keys("Escape")
    top.shows("in flight")
    top.keys("w")
    top.shows("why of a", "stopped: by STOP (agent-kill -s CONT resumes it)")
    top.keys("q", "?")
    top.shows("agent-top keys")
    top.keys("q", "q")
    assert top.exited() == 0 and top.restored()


@pytest.mark.parametrize("how, status", [("TERM", 128 + 15), ("HUP", 128 + 1)])
def test_the_terminal_is_restored_after_a_signal(pane, conn, how, status):
    fork("-n", "a")
    top = pane()
    top.shows(" a ", "in flight")
    assert top.flag("alternate_on") == "1"
    os.kill(top.pid, getattr(signal, f"SIG{how}"))
    assert top.exited() == status       # ended by the signal, as it would be uncaught
    assert top.restored()


def test_the_terminal_is_restored_after_an_error(pane, conn):
    """An error it did not expect (here the event log's table gone under it, renamed by
    another connection): one line on standard error, as any program's, and the terminal
    as it was."""
    fork("-n", "a")
    top = pane()
    top.shows(" a ", "in flight")
    with transaction(conn):         # a commit: agent-top looks at the events again
        conn.execute("ALTER TABLE events RENAME TO events_gone")
    code = top.exited()
    assert code != 0 and top.restored()
    assert "agent-top: " in top.screen() and "events" in top.screen()


def sgr(screen, code):
    """Whether the screen (captured with its attributes) sets the attribute `code`
    (a regular expression of one number of an SGR sequence: 7 reverse, 31 red ...)."""
    return re.search(rf"\x1b\[(?:\d+;)*(?:{code})(?:;\d+)*m", screen) is not None


def test_no_colour_with_NO_COLOR(pane, conn):
    fork("-n", "a")
    agent("kill", "-s", "STOP", "a")
    coloured = pane()
    coloured.shows(" a ")
    assert sgr(coloured.screen(colours=True), "31")         # T in red
    plain = pane(env={"NO_COLOR": "1"})
    plain.shows(" a ")
    screen = plain.screen(colours=True)
    assert sgr(screen, "7") and not sgr(screen, "3[0-7]|38")    # reverse video, no colour


def test_a_snapshot_when_not_on_a_terminal(tmp_path, conn):
    fork("-n", "lead", "-m", "echo")
    fork("-n", "w1", "-p", "lead", "do it")
    fork("-n", "w2", "-p", "lead", "-m", script(tmp_path, ASKING), "go")
    agent("run", "w2")
    result = agent("top")
    lines = result.out.splitlines()
    assert result.code == 0 and result.err == ""
    assert lines[0].startswith("agents: 4 live: 0 running, 1 paused, 3 sleeping")
    assert lines[2] == "" and lines[3].split() == ["ID", "NAME", "STAT", "ROLE", "MAIL", "AGE",
                                                    "TOKENS", "COST", "DOING"]
    names = [line.split()[1:3] for line in lines[4:]]
    assert names == [["init", "S"], ["\\_", "lead"], ["\\_", "w1"], ["\\_", "w2"]]
    assert "pending: 1 prompt" in lines[6] and "paused: request" in lines[7]
    agent("kill", "w1")
    agent("wait", "w1")                                     # dead now: not shown, but with -a
    assert " w1 " not in agent("top").out
    dead = next(line for line in agent("top", "-a").out.splitlines() if " w1 " in line)
    assert dead.split()[3] == "X" and "exited: killed (TERM)" in dead


def test_an_unknown_terminal_is_a_usage_error(conn):
    fork("-n", "a")
    master, slave = os.openpty()
    try:
        proc = subprocess.run([sys.executable, os.path.join(BIN, "agent-top")],
                              stdin=slave, stdout=slave, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, TERM="no-such-terminal"), timeout=60)
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 2
    assert proc.stderr.startswith("agent-top: can't drive this terminal (TERM=no-such-terminal")
    assert proc.stderr.count("\n") == 1


# -- the view: read whole once, then only what the events name -------------------------------

def reads_of_agents(statements):
    """The agents' reads among traced statements: None for a whole read, else the ids."""
    return [None if "a.id IN" not in sql else set(params)
            for sql, params in statements if "LEFT JOIN agents p" in sql]


def test_the_view_reads_again_only_the_agents_new_events_name(conn):
    ids = [fork("-n", f"a{i}") for i in range(5)]
    view = top.View(conn)
    statements = []
    conn.tracer = lambda sql, params: statements.append((sql, params))
    assert view.update() is False           # nothing since: one look at the events, no more
    assert len(statements) == 1 and "FROM events" in statements[0][0]
    statements.clear()
    agent("send", "a3", "hi")               # an event that names a3 (init sent it)
    assert view.update() is True
    assert [r and r & set(ids) for r in reads_of_agents(statements)] == [{ids[3]}]
    assert view.rows[ids[3]]["mail"] == 1 and view.rows[ids[2]]["mail"] == 0
    statements.clear()
    agent("send", "--jsonl", stdin='{"to": "a1", "body": "x"}\n{"to": "a2", "body": "y"}\n')
    assert view.update() is True            # a batch's event names no recipient: all again
    assert reads_of_agents(statements) == [None]
    assert [view.rows[i]["mail"] for i in ids] == [0, 1, 1, 1, 0]
    statements.clear()
    agent("kill", "a4")
    agent("wait", "a4")                     # dead: read, and gone from the view
    assert view.update() is True and ids[4] not in view.rows
    assert [r and r & set(ids) for r in reads_of_agents(statements)] == [{ids[4]}]
