"""When a turn fails under cron (agent-run(1), Failures): the documented crontab,
run tick by tick in the environment cron gives a job, tells the operator once, keeps
every failure where people look (agent-log, agent-ps, agent-why, agent-top), and
lets a hold go by itself once its cause is gone.

cron's environment is made as Debian's cron(8) makes it: HOME, LOGNAME, SHELL=/bin/sh
and PATH=/usr/bin:/bin, then the crontab's own assignments; the job is `sh -c LINE`
with nothing on standard input, and what it prints (both streams) is what cron mails.
A real daemon ticks once a minute: the ticks here are the same job run at once."""

import json
import os
import socket
import subprocess
import sys

import pytest

from .conftest import BIN, PATIENCE, ROOT, agent, events, fork, row
from .fakeapi import OPENAI_KEY, fakeapi  # noqa: F401  (a fixture)

pytestmark = pytest.mark.usefixtures("fakeapi")


def crontab():
    """examples/crontab: ({variable: value}, the agent-run --all line's command)."""
    variables, command = {}, None
    for line in open(os.path.join(ROOT, "examples", "crontab")):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line[0].isdigit() or line[0] == "*":
            if "agent-run --all" in line:
                command = line.split(None, 5)[5]
            continue
        name, _, value = line.partition("=")
        variables[name.strip()] = value.strip()
    return variables, command


class Cron:
    """The documented crontab, installed for a user whose home is `home`: tick() runs its
    agent-run --all line as cron would and returns what cron would mail."""

    def __init__(self, home, db, **variables):
        documented, self.command = crontab()
        assert {"AGENTCTL_DB", "PATH", "MAILTO"} <= set(documented)
        self.home = home
        self.variables = dict(documented, AGENTCTL_DB=str(db), MAILTO="",
                              # the checkout's programs where the crontab names the installed
                              PATH=f"{BIN}:{documented['PATH']}")
        for name in ("AGENTCTL_MODEL", "OPENAI_API_KEY"):
            del self.variables[name]        # the first crontab a user writes: neither
        self.variables.update(variables)

    def tick(self):
        env = {"HOME": str(self.home), "LOGNAME": "me", "SHELL": "/bin/sh",
               "PATH": "/usr/bin:/bin", **self.variables}
        job = subprocess.run(["/bin/sh", "-c", self.command], env=env, cwd=self.home,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=4 * PATIENCE)
        return job.stdout + job.stderr

    @property
    def log(self):
        path = self.home / ".local" / "state" / "agentctl.log"
        return path.read_text() if path.exists() else ""


def closed_port():
    """A port on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_whole_story_under_cron(conn, tmp_path, fakeapi, monkeypatch):
    home = tmp_path / "me"
    home.mkdir()
    cron = Cron(home, os.environ["AGENTCTL_DB"], AGENTCTL_BACKOFF="0",
                AGENTCTL_RETRY_TRIES="2", AGENTCTL_RETRY_BACKOFF="0.01",
                AGENTCTL_PROVIDER_WAIT="1", AGENTCTL_HTTP_TIMEOUT="30")
    fork("-n", "ka", "-m", "openai:gpt-test", "summarise the logs")

    # A crontab without the model's URL and key: held, and cron mails it once.
    mail = cron.tick()
    assert mail == ("agent-run: ka: OPENAI_API_KEY is not set (needed by model "
                    "openai:gpt-test)\n"), mail
    assert agent("ps", "--format", "json", "-o", "name,stat").out.count('"SH"') == 1
    assert [e[0] for e in events(conn, "ka", "fail", "kind")] == ["fail"]
    assert cron.tick() == ""                    # the next tick: nothing new, nothing said
    assert row(conn, "ka")["held_at"] is not None and fakeapi.requests == []

    # The URL and key added to the crontab: the next tick runs it, without a human.
    cron.variables.update(OPENAI_BASE_URL=fakeapi.url + "/v1", OPENAI_API_KEY=OPENAI_KEY)
    fakeapi.reply("the logs are quiet")
    assert cron.tick() == ""
    assert cron.log == "ka: the logs are quiet\n"
    ka = row(conn, "ka")
    assert ka["held_at"] is None and ka["status"] == "S" and ka["failures"] == 0
    release = agent("log", "--kind", "release", "ka").lines
    assert len(release) == 1 and "what its model is given changed" in release[0]

    # A 429 storm: said once, seen everywhere with its reason.
    agent("send", "ka", "and now?")
    fakeapi.error(429, "slow down", retry_after=900, times=4)
    mail = cron.tick()
    assert mail.count("\n") == 1 and mail.startswith("agent-run: ka: model API unavailable: "
                                                     "openai: "), mail
    assert "HTTP 429" in mail and "900 s" in mail, mail
    why = agent("why", "ka")
    assert why.code == 1 and "waiting for its provider" in why.out, why.out
    assert "HTTP 429, Retry-After 900 s" in why.out, why.out
    failure = json.loads(agent("ps", "--format", "json", "-o", "name,failure").out)
    assert "HTTP 429" in [r for r in failure if r["name"] == "ka"][0]["failure"]
    top = agent("top").out
    assert "waiting for its provider" in [line for line in top.splitlines()
                                          if " ka " in line][0], top
    kinds = [line.split()[3] for line in agent("log", "--kind", "throttle,fail", "ka").lines]
    assert kinds == ["fail", "throttle", "fail"], kinds
    assert cron.tick() == ""                    # still throttled: nothing new to say
    assert agent("run", "--all").code == 75     # and --all agrees with agent-why

    # An unreachable server, for another agent: said once, kept, seen everywhere.
    fork("-n", "kb", "-m", "anthropic:claude-test", "hello")
    cron.variables.update(ANTHROPIC_BASE_URL=f"http://127.0.0.1:{closed_port()}",
                          ANTHROPIC_API_KEY="sk-ant-x", AGENTCTL_BACKOFF="1h")
    mail = cron.tick()
    assert mail.count("\n") == 1 and mail.startswith("agent-run: kb: model API unavailable: "
                                                     "anthropic: "), mail
    kb = row(conn, "kb")
    assert kb["failures"] == 1 and "127.0.0.1" in kb["last_failure"]
    why = agent("why", "kb")
    assert why.code == 1 and why.out.startswith("backing off until "), why.out
    assert "after 1 failure(s): model API unavailable: anthropic: " in why.out, why.out
    assert "127.0.0.1" in [line for line in agent("ps", "--format", "tsv", "-o",
                                                  "name,failure").lines
                           if line.startswith("kb\t")][0]
    assert "backing off until" in [line for line in agent("top").out.splitlines()
                                   if " kb " in line][0]
    fail = agent("log", "--kind", "fail", "kb").lines
    assert len(fail) == 1 and "(75, for now)" in fail[0] and "--all tries again" in fail[0]
    assert cron.tick() == ""                    # backing off: not run, nothing said
    assert agent("kill", "-s", "CONT", "kb").code == 0     # try it now
    assert cron.tick() == ""                    # the same fault again: said before
    assert row(conn, "kb")["failures"] == 2
    assert len(agent("log", "--kind", "fail", "kb").lines) == 2    # and kept


def test_a_question_under_cron_is_said_once(conn, tmp_path):
    """A request that starts waiting for an answer is mailed once, not at every tick."""
    home = tmp_path / "me"
    home.mkdir()
    rules = tmp_path / "ask.jsonl"
    rules.write_text(json.dumps({"steps": [{"tool_calls": [
        {"name": "ask", "arguments": {"question": "Which branch?"}}]}, {"content": "ok"}]})
        + "\n")
    fork("-n", "q", "-m", f"scripted:{rules}", "deploy")
    cron = Cron(home, os.environ["AGENTCTL_DB"])
    mail = cron.tick()
    assert mail.count("\n") == 1 and "paused: request" in mail and "agent-answer" in mail, mail
    assert cron.tick() == "" and cron.tick() == ""


def test_a_one_off_model_typo_holds_nothing(conn, fakeapi):
    """agent-run -m with a name the API refuses is the run's mistake: exit 2, nothing
    held, no one told, the input pending as it was."""
    fork("-n", "lead")
    fork("-p", "lead", "-n", "ov1", "-m", "openai:gpt-4o-mini", "summarise")
    fakeapi.error(404, "The model `gpt-4o-mni` does not exist")
    result = agent("run", "-m", "openai:gpt-4o-mni", "ov1")
    assert result.code == 2, result.err
    assert result.err.startswith("agent-run: -m openai:gpt-4o-mni: model API error: "), result.err
    assert "nothing is held" in result.err
    ov1 = row(conn, "ov1")
    assert ov1["held_at"] is None and ov1["failures"] == 0 and ov1["retry_at"] is None
    assert conn.execute("SELECT count(*) FROM mail WHERE kind = 'failure'").fetchone()[0] == 0
    assert "pending: 1 prompt" in agent("why", "ov1").out
    assert len(agent("log", "--kind", "fail", "ov1").lines) == 1
    fakeapi.reply("done")
    assert agent("run", "ov1").out == "done\n"      # its own model: the prompt is still there
    assert fakeapi.last["body"]["messages"][-1]["content"] == "summarise"


def test_a_hold_is_tried_again_only_when_what_the_model_is_given_changes(
        conn, fakeapi, monkeypatch):
    """The same key again holds on; another key (or URL, or model) lets --all try again;
    a hold from before held_for was kept waits for the operator."""
    fork("-n", "w", "-m", "openai:gpt-test", "go")
    fakeapi.error(401, "bad key")
    assert agent("run", "--all").code == 69
    assert row(conn, "w")["held_for"] is not None
    assert agent("run", "--all").code == 1 and len(fakeapi.requests) == 1
    assert agent("why", "w").code == 1
    monkeypatch.setenv("OPENAI_API_KEY", "sk-another-key-42")
    why = agent("why", "w")
    assert why.code == 0 and "the next agent-run --all run so tries it again" in why.out, why.out
    assert agent("ps", "-o", "name,stat").out.split("w", 1)[1].split()[0] == "SH"  # stored
    fakeapi.reply("done")
    assert agent("run", "--all").out == "w: done\n"
    assert fakeapi.last["headers"]["authorization"] == "Bearer sk-another-key-42"
    # a hold kept before 0017_held_for: no fingerprint, never let go by itself
    agent("send", "w", "again")
    fakeapi.error(401, "bad key")
    assert agent("run", "--all").code == 69
    conn.execute("UPDATE agents SET held_for = NULL WHERE name = 'w'")
    conn.commit()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-a-third-key-43")
    assert agent("run", "--all").code == 1 and agent("why", "w").code == 1


def test_the_count_of_runs_is_for_a_terminal(conn, tmp_path):
    """--all's summary line is for a person at a terminal; cron's mail (a pipe) gets
    each agent's lines alone."""
    fork("-n", "a", "-m", "echo", "hi")
    fork("-n", "b", "-m", f"scripted:{tmp_path / 'missing.jsonl'}", "hi")     # held
    env = dict(os.environ, PATH=f"{BIN}:{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    seen = subprocess.run(["script", "-qec", "agent-run --all", "/dev/null"], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=PATIENCE)
    lines = seen.stdout.replace("\r", "").splitlines()
    assert lines[-1] == ("agent-run: 2 agents: 1 ran, 0 had nothing to do, 0 skipped, "
                         "0 busy or temporarily failing, 1 failed"), seen.stdout
    assert [line for line in lines if line.startswith("agent-run: b: ")], seen.stdout
    piped = subprocess.run(["agent-run", "--all"], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=PATIENCE)
    assert (piped.returncode, piped.stdout, piped.stderr) == (1, "", "")   # b held: quiet


def test_a_one_off_model_typo_leaves_a_resumed_turn_open(conn, tmp_path, fakeapi):
    """A turn opened by an earlier run (left open by a fault for now) is not voided by a
    later run's -m refusal: its progress is the agent's, resumed by its own model."""
    rules = tmp_path / "flaky.jsonl"
    rules.write_text(json.dumps({"steps": [{"fail": "tempfail"}]}) + "\n")
    fork("-n", "r", "-m", f"scripted:{rules}", "go")
    assert agent("run", "r").code == 75                 # the turn stays open
    opened = conn.execute("SELECT count(*) FROM turns WHERE ended_at IS NULL").fetchone()[0]
    fakeapi.error(404, "no such model")
    result = agent("run", "-m", "openai:gpt-4o-mni", "r")
    assert result.code == 2 and "nothing is held" in result.err, result.err
    assert conn.execute("SELECT count(*) FROM turns WHERE ended_at IS NULL").fetchone()[0] \
        == opened == 1
    assert row(conn, "r")["held_at"] is None
    assert agent("why", "r").out.startswith("backing off until ")  # its own fault, kept
