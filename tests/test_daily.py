"""A day with cron and pipelines: results as data (--schema), cron-friendly
`agent-run --all`, the documented crontab line on a fresh machine, a mistyped --db,
programs that only read, and the documentation traps of the same day."""

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from agentctl.store import registry

from .conftest import BIN, PATIENCE, ROOT, agent, fork, needs, row, script, shell, wait_until
from .fakeapi import fakeapi  # noqa: F401  (a fixture)

SCHEMA = {"type": "object", "required": ["answer"], "additionalProperties": False,
          "properties": {"answer": {"type": "integer", "minimum": 0}}}


# -- results as data ------------------------------------------------------------------------------

@pytest.mark.parametrize("model, where", [
    ("openai:gpt-test", lambda body: body["response_format"]),
    ("anthropic:claude-test", lambda body: body["output_config"]["format"])])
def test_a_schema_goes_to_each_provider_and_the_value_comes_back(conn, fakeapi, model, where):
    task = fork("-r", "task", "-m", model, "--schema", json.dumps(SCHEMA), "how many?")
    fakeapi.reply("Forty-two.")                     # does not fit: told, and asked again
    fakeapi.reply('{"answer": 42}')
    result = agent("run", "--format", "json", task)
    assert result.code == 0, result.err
    assert json.loads(result.out)["value"] == {"answer": 42}
    first, second = (r["body"] for r in fakeapi.requests)
    sent = where(first)
    assert sent["type"] == "json_schema"
    assert (sent.get("json_schema") or sent)["schema"] == SCHEMA
    told = second["messages"][-1]
    assert told["role"] == "user"
    told = told["content"] if isinstance(told["content"], str) else told["content"][-1]["text"]
    assert told.startswith("[SCHEMA] Your reply does not fit") and "not JSON" in told
    waited = agent("wait", "--format", "json", task)
    assert json.loads(waited.out)[0]["value"] == {"answer": 42}


def test_a_reply_that_never_fits_fails_the_turn_after_bounded_tries(conn, tmp_path):
    fork("-n", "lead")
    fork("-p", "lead", "-n", "a", "-m", script(tmp_path, {"reply": {"content": '{"answer": -1}'}}),
         "--schema", json.dumps(SCHEMA), "how many?")
    result = agent("run", "a")
    assert result.code == 69 and "$.answer must be at least 0" in result.err
    a = registry.resolve(conn, "a")
    assert a["held_at"] is not None
    notices = conn.execute("SELECT count(*) FROM messages WHERE content LIKE '[SCHEMA]%'")
    assert notices.fetchone()[0] == 3


def test_a_schema_is_checked_when_given(conn, tmp_path):
    for given, error in [('{"type": "thing"}', "schema.type"),
                         ('{"type": "object", "oneOf": []}', "keyword 'oneOf'"),
                         ("{nope", "--schema"), (str(tmp_path / "none.json"), "can't read")]:
        result = agent("fork", "-m", "echo", "--schema", given)
        assert result.code == 2 and error in result.err, result.err
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SCHEMA))
    fork("-n", "a", "-m", "echo", "--schema", str(path))
    assert json.loads(agent("ps", "-o", "schema", "--format", "json").out)[1]["schema"] == SCHEMA


def test_the_schema_pipeline_hands_the_value_to_jq(conn):
    needs("jq", "jq")
    result = shell(f"sh {ROOT}/examples/schema.sh")
    assert (result.code, result.out) == (0, "src/db.c\nsrc/wal.c\nseverity: high\n"), result.err


# -- agent-run --all under cron ---------------------------------------------------------------------

def test_all_prints_each_reply_named_and_nothing_when_nothing_happened(conn):
    fork("-n", "a", "-m", "echo", "one\ntwo")
    fork("-n", "b", "-m", "echo", "three")
    result = shell("agent-run --all -j 2")
    assert (result.code, result.err) == (0, "")
    assert sorted(result.out.splitlines()) == ["a: one", "a: two", "b: three"]
    nothing = shell("agent-run --all")
    assert (nothing.code, nothing.out, nothing.err) == (1, "", "")
    fork("-n", "c", "-m", "echo", "four")
    lines = shell("agent-run --all --format jsonl").out.splitlines()
    assert [json.loads(line)["text"] for line in lines] == ["four"]


def crontab_line():
    """The line of examples/crontab that runs agent-run --all: its command."""
    for line in open(os.path.join(ROOT, "examples", "crontab")):
        if re.match(r"^[\d*]", line) and "agent-run --all" in line:
            return line.split(None, 5)[5].strip()
    raise AssertionError("no agent-run --all line in examples/crontab")


def test_the_documented_crontab_line_runs_in_a_fresh_home(tmp_path):
    """Run as cron runs it (sh -c, a HOME with nothing in it, cron's PATH and no XDG
    variables): it must run, log its replies, and print (what cron mails) only what
    needs the operator, once."""
    command = crontab_line()
    for page in ("README.md", "man/agent-run.1"):
        text = open(os.path.join(ROOT, page)).read().replace("\\-", "-").replace("\\e", "\\")
        assert command in text, f"{page} documents another crontab line"
    home = tmp_path / "fresh"
    home.mkdir()
    env = {"HOME": str(home), "PATH": f"{BIN}:{os.path.dirname(sys.executable)}:/usr/bin:/bin",
           "SHELL": "/bin/sh", "LOGNAME": "me"}

    def cron():
        return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=PATIENCE)

    first = cron()                          # no database yet: nothing, and nothing said
    assert (first.returncode, first.stdout, first.stderr) == (1, "", "")
    assert not (home / ".local" / "share" / "agentctl").exists()
    subprocess.run(["agent-fork", "-n", "a", "-m", "echo", "good morning"], env=env,
                   check=True, capture_output=True)
    subprocess.run(["agent-fork", "-n", "b", "-m", "openai:gpt-x", "hi"], env=env,
                   check=True, capture_output=True)
    ran = cron()
    assert ran.stdout == ""
    assert ran.stderr.startswith("agent-run: b: OPENAI_API_KEY is not set"), ran.stderr
    log = (home / ".local" / "state" / "agentctl.log").read_text()
    assert log == "a: good morning\n"
    again = cron()                      # b is held: nothing happened
    assert (again.returncode, again.stdout, again.stderr) == (1, "", "")


# -- typos: --db --------------------------------------------------------------------------------

@pytest.mark.sqlite_only
def test_a_mistyped_db_is_a_usage_error_and_readers_make_no_database(tmp_path, monkeypatch):
    """A database named (--db, $AGENTCTL_DB) that does not exist is a typo: exit 2 and a
    line, for every program (agent-run --all too, whose cron would otherwise keep
    quiet); no reader makes one. The default one missing: nothing forked yet."""
    typo = tmp_path / "nosuch" / "agents.db"
    result = agent("fork", "--db", typo, "-m", "echo", "hi")
    assert result.code == 2 and "no such directory" in result.err
    assert not typo.parent.exists()
    missing = tmp_path / "agents-typo.db"
    for program, args in [("ps", ()), ("log", ()), ("mail", ("a",)), ("replay", ("a",)),
                          ("why", ("a",)), ("wait", ("a",)), ("answer", ()), ("set", ("a", "model=echo")),
                          ("run", ("a",)), ("kill", ("a",)), ("send", ("a", "hi")),
                          ("diff", ("a",)), ("merge", ("a",))]:
        result = agent(program, "--db", missing, *args)
        assert result.code == 2, (program, result.err)
        assert result.err == f"agent-{program}: {missing}: no database (nothing was forked " \
                             "there; agent-fork makes it)\n"
        assert not missing.exists(), program
    monkeypatch.setenv("AGENTCTL_DB", str(missing))    # named there: the same typo
    for words in (["ps"], ["run", "--all"], ["doc", "ls"], ["top"]):
        result = agent(*words)
        assert (result.code, result.err) == (2, f"agent-{words[0]}: {missing}: no database "
                                                "(nothing was forked there; agent-fork "
                                                "makes it)\n"), words
        assert not missing.exists(), words
    monkeypatch.delenv("AGENTCTL_DB")       # the default location: made, folders too
    fork("-m", "echo", "hi")
    assert (tmp_path / "xdg" / "agentctl" / "agents.db").exists()


# -- documentation traps --------------------------------------------------------------------------

def test_the_fan_in_line_of_agent_run_1_returns_when_the_lead_forked_nothing(conn):
    """agent-wait $(agent-ps -q --parent lead) waited for every child of the operator."""
    page = open(os.path.join(ROOT, "man", "agent-run.1")).read()
    line = next(line for line in page.splitlines() if line.startswith("agent\\-wait"))
    fork("-n", "lead")
    fork("-n", "other", "-m", "echo")           # the operator's other child, alive
    result = shell(line.replace("\\-", "-"), timeout=PATIENCE)
    assert result.code in (0, 1), result.err


def page_text(name):
    """A man page's source as a reader sees its words: roff's escapes of - and \\ undone,
    its font macros' names dropped."""
    text = open(os.path.join(ROOT, "man", name)).read().replace("\\-", "-").replace("\\e", "\\")
    return re.sub(r"^\.(?:B|I|BR|RB|IR|RI|BI|IB) ", "", text, flags=re.M)


def test_agent_run_1_says_where_a_key_goes_and_the_key_goes_there(conn, fakeapi):
    """agent-run(1) once said a key is not sent to a server on a loopback address; it
    was sent (rightly: a local proxy may need one). The page says what is done."""
    text = " ".join(page_text("agent-run.1").split())
    assert "not sent, when the server is on a loopback address" not in text
    assert "when set, it is sent to whatever OPENAI_BASE_URL names, loopback or not" in text
    fork("-n", "k", "-m", "openai:gpt-test", "hi")
    fakeapi.reply("hello")
    assert agent("run", "k").code == 0
    assert fakeapi.last["headers"]["authorization"].startswith("Bearer sk-test-openai-")


def test_agent_run_1_raises_a_budget_as_it_says(conn):
    """agent-run(1) once said no command raises a budget and gave an SQL UPDATE."""
    text = page_text("agent-run.1")
    assert "UPDATE agents" not in text and "no command that raises" not in text
    example = re.search(r"^agent-set kid budget=(\d+)$", text, re.M)
    assert example, "agent-run(1) shows how agent-set raises a budget"
    fork("-n", "kid", "--budget", "100")
    assert agent(*example.group(0).split()[0].split("-", 1)[1:], "kid",
                 f"budget={example.group(1)}").code == 0
    assert row(conn, "kid")["budget"] == int(example.group(1))


def test_agentctl_7_lists_every_program():
    from .conftest import PROGRAMS
    page = open(os.path.join(ROOT, "man", "agentctl.7")).read().replace("\\-", "-")
    listed = page.split(".SH DESCRIPTION", 1)[1].split("\n.SH ", 1)[0]
    assert [p for p in PROGRAMS if f"agent-{p}" not in listed] == []


def test_every_parameter_of_every_built_in_tool_is_documented():
    from agentctl.turn import builtin
    page = open(os.path.join(ROOT, "man", "agent-run.1")).read()
    tools = page.split(".SH TOOLS", 1)[1].split(".SS External tools", 1)[0]
    missing = []
    for spec in builtin.specs():
        function = spec["function"]
        entry = tools.split(f".BR {function['name']} ", 1)[-1].split("\n.TP", 1)[0]
        missing += [f"{function['name']}.{p}" for p in function["parameters"]["properties"]
                    if f"\\fI{p}\\fP" not in entry and f"\\fI{p}\\fR" not in entry]
    assert missing == []


def test_a_task_is_not_offered_the_fork_tool(conn):
    fork("-n", "t", "-r", "task", "-m", "echo")
    fork("-n", "a", "-m", "echo")
    listed = {n: agent("run", "--list-tools", "--format", "json", n) for n in ("t", "a")}
    names = {n: [t["name"] for t in json.loads(r.out)] for n, r in listed.items()}
    assert "fork" in names["a"] and "fork" not in names["t"]


ASKING = {"steps": [{"content": "Let me write it.",
                     "tool_calls": [{"name": "ask", "arguments": {"question": "Which color?"}}]},
                    {"content": "done asking"}]}


def on_a_terminal(*args):
    """agent-run started on a pseudo-terminal: (pid, its fd)."""
    pid, fd = pty.fork()
    if pid == 0:
        signal.signal(signal.SIGINT, signal.SIG_DFL)    # as a shell starts a foreground job
        os.execve(sys.executable, [sys.executable, os.path.join(BIN, "agent-run"), *args],
                  dict(os.environ))
    return pid, fd


def read_until(fd, mark, seen=b""):
    deadline = time.monotonic() + PATIENCE
    while mark not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.5)[0]:
            try:
                seen += os.read(fd, 1024)
            except OSError:
                break
    return seen


def test_streamed_text_and_the_question_are_on_lines_of_their_own_and_ctrl_c_pauses(
        tmp_path, conn):
    fork("-n", "w", "-m", script(tmp_path, ASKING), "go")
    pid, fd = on_a_terminal("w")
    seen = read_until(fd, b"answer> ")
    assert b"Let me write it.\r\nagent-run: w asks: Which color?" in seen, seen
    os.kill(pid, signal.SIGINT)                 # ^C at the question
    seen = read_until(fd, b"interrupted", seen)
    _, code = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(code) == 130, seen
    wait_until(lambda: registry.resolve(conn, "w")["status"] == "P", "the agent paused")
    assert agent("answer", "-c").out == "1\n"
