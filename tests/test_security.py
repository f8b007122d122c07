"""File modes, keys that never leak, what an agent's tools may touch, and
database faults met by every program (agentctl(7), GUARANTEES)."""

import hashlib
import json
import os
import shlex
import sqlite3
import subprocess
import sys

import pytest

from agentctl.store import db, registry

from .conftest import (PROGRAMS, ROOT, agent, fork, mode, script, shell, stored, tool_results,
                       write_locked)
from .fakeapi import ANTHROPIC_KEY, OPENAI_KEY, fakeapi  # noqa: F401


def test_private_modes_whatever_the_umask(tmp_path):
    """The default location, whose directories are made (each 0700), whatever the umask."""
    path = tmp_path / "deep" / "er" / "agentctl" / "agents.db"
    code = ("import os, sys; os.umask(0); from agentctl.store.db import connect, transaction\n"
            "os.environ.pop('AGENTCTL_DB', None)\n"
            "os.environ['XDG_DATA_HOME'] = os.path.dirname(os.path.dirname(sys.argv[1]))\n"
            "conn = connect()\n"
            "with transaction(conn):\n"
            "    conn.execute(\"INSERT INTO events (agent_id, kind, created_at) "
            "VALUES ('AAAAAAAAAAAAAAAAAAAAAA', 'x', 0)\")\n"
            "print(oct(os.stat(sys.argv[1] + '-wal').st_mode & 0o777), "
            "oct(os.stat(sys.argv[1] + '-shm').st_mode & 0o777))")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.stdout.split() == ["0o600", "0o600"], proc.stderr
    assert mode(path) == 0o600 and mode(path.parent) == 0o700 and mode(path.parent.parent) == 0o700
    assert mode(path.parent.parent.parent) == 0o700


@pytest.mark.parametrize("model", ["openai:gpt-test", "anthropic:claude-test"])
def test_api_keys_reach_no_file_output_or_event(conn, fakeapi, home, model, tmp_path):
    fork("-n", "a", "-m", model, "hi")
    fakeapi.reply("", tool_calls=[("c1", "ps", "{}")])
    fakeapi.reply("fine")
    outputs = [agent("run", "--json", "a")]
    used = OPENAI_KEY if model.startswith("openai") else ANTHROPIC_KEY
    fakeapi.error(401, f"invalid key {used}", times=2)      # a server that echoes the key it got
    agent("send", "a", "more")
    outputs.append(agent("run", "a"))
    outputs += [agent("replay", "--format", "jsonl", "a"), agent("ps", "-a", "--format", "json"),
                agent("mail", "-a", "--format", "json", "a")]
    files = stored(home)
    events = json.dumps([tuple(r) for r in conn.execute("SELECT * FROM events")])
    assert outputs[1].code == 69
    for key in (OPENAI_KEY, ANTHROPIC_KEY):
        assert key.encode() not in files and key not in events
        for result in outputs:
            assert key not in result.out and key not in result.err


def test_tools_reach_only_the_agents_own_descendants(conn, tmp_path):
    calls = [{"id": f"k{i}", "name": "kill", "arguments": {"agent": who, "signal": "KILL"}}
             for i, who in enumerate(("boss", "peer", "init", "cousin", "me"))]
    calls += [{"id": "w", "name": "wait", "arguments": {"agents": ["peer"]}},
              {"id": "p", "name": "ps", "arguments": {}},
              {"id": "g", "name": "kill", "arguments": {"agent": "grandchild", "signal": "STOP"}}]
    fork("-n", "boss")
    fork("-p", "boss", "-n", "me", "-m", script(tmp_path, {"steps": [{"tool_calls": calls},
                                                                    {"content": "done"}]}), "go")
    fork("-p", "boss", "-n", "peer")
    fork("-p", "peer", "-n", "cousin")
    fork("-p", "me", "-n", "child")
    fork("-p", "child", "-n", "grandchild")
    agent("send", "peer", "private to peer")
    assert agent("run", "me").out == "done\n"
    results = tool_results(conn, "me")
    assert results[:6] == [f"error: {who} is not one of your descendants"
                           for who in ("boss", "peer", "init", "cousin", "me", "peer")]
    assert sorted(line.split()[1] for line in results[6].splitlines()) == ["child", "grandchild"]
    assert results[7] == "sent STOP to 1 agent(s)"
    statuses = {name: registry.resolve(conn, name)["status"]
                for name in ("boss", "peer", "cousin", "me", "grandchild")}
    assert statuses == {"boss": "S", "peer": "S", "cousin": "S", "me": "S", "grandchild": "T"}
    assert agent("mail", "-c", "peer").out == "1\n"          # peer's mail untouched


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


ARGS = {"fork": ["-n", "x"], "kill": ["init"], "ps": [], "send": ["init", "hi"],
        "mail": ["-c", "init"], "replay": ["init"], "run": ["init"], "wait": ["--timeout", "0", "init"],
        "doc": ["put", "notes", "hi"], "db": ["check"], "log": ["-n", "1"],
        "answer": [], "set": ["init", "model=echo"], "why": ["init"], "top": [],
        "diff": ["init"], "merge": ["init"]}
MAKERS = ("fork", "doc")        # the programs that make a database (agentctl(7), EXIT STATUS)


@pytest.mark.sqlite_only
@pytest.mark.parametrize("fault", ["not a database", "newer schema", "missing directory"])
def test_every_program_meets_a_database_fault_with_one_line_and_74(home, fault, tmp_path,
                                                                  monkeypatch):
    if fault == "not a database":
        home.write_bytes(b"SQLite format 2\x00 but not really" * 100)
    elif fault == "newer schema":
        db.connect(str(home)).close()
        raw = sqlite3.connect(home)
        raw.execute(f"PRAGMA user_version = {db.SCHEMA_VERSION + 7}")
        raw.close()
    else:       # the default location, whose directories are made: one can't be
        (tmp_path / "blocker").write_text("a file where a directory should be")
        home = tmp_path / "blocker" / "agentctl" / "agents.db"
        monkeypatch.delenv("AGENTCTL_DB")
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "blocker"))
    before = digest(home) if home.exists() else None
    for program in PROGRAMS:
        result = agent(program, *ARGS[program])
        if program == "db" and fault != "missing directory":      # what check is for
            assert result.code == 1 and fault.split()[-1] in result.out, result
            assert result.err.startswith("agent-db: ") and result.err.count("\n") == 1
            continue
        if fault == "missing directory" and program not in MAKERS + ("db",):
            assert result.code == 1 and "no database" in result.err, (program, result)
            continue        # a program that makes no database: nothing there
        assert result.code == 74 and result.out == "", (program, result)
        assert result.err.startswith(f"agent-{program}: ") and result.err.count("\n") == 1
        assert (digest(home) if home.exists() else None) == before, program


def files(directory):
    return {p.name: digest(p) for p in directory.iterdir() if p.is_file()}


READ_ONLY_ARGS = {"fork": "-n x", "kill": "a", "ps": "", "send": "a hi", "mail": "-c a",
                  "replay": "a", "run": "a", "wait": "--timeout 0 a", "doc": "put notes hi",
                  "db": "check", "log": "-n 1", "answer": "", "set": "a model=echo",
                  "why": "a", "top": "", "diff": "a", "merge": "a"}
WRITERS = ("fork", "kill", "send", "run", "doc", "set")


@pytest.mark.sqlite_only
@pytest.mark.parametrize("wal", ["closed", "open elsewhere"])
def test_every_program_meets_a_read_only_database_with_one_line_and_74(home, tmp_path, wal):
    """Read-only as a user meets it: the file's mode, or (for root, who
    writes through modes) a read-only mount in a namespace of its own.
    A database closed by its last user can't even be read so (SQLite needs
    its -wal and -shm files); one that another program holds open can be
    read, never written."""
    assert shell("agent-fork -n a hi").code == 0
    holder = None
    if wal == "open elsewhere":
        holder = sqlite3.connect(home)
        holder.execute("SELECT count(*) FROM agents").fetchone()
    before = files(tmp_path)
    script = "".join(f"agent-{p} {READ_ONLY_ARGS[p]} >/dev/null; echo $?\n" for p in PROGRAMS)
    try:
        if os.geteuid() == 0:
            if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
                pytest.skip("root, and no mount namespace for a read-only file system")
            where = shlex.quote(str(tmp_path))
            script = (f"mount --bind {where} {where} && mount -o remount,bind,ro {where} "
                      f"{where} || exit 99\n{script}")
            result = shell(f"unshare -rm bash -c {shlex.quote(script)}")
        else:
            home.chmod(0o400)
            tmp_path.chmod(0o500)
            try:
                result = shell(script)
            finally:
                tmp_path.chmod(0o700)
                home.chmod(0o600)
        after = files(tmp_path)
    finally:
        if holder is not None:
            holder.close()
    codes = dict(zip(PROGRAMS, result.out.split()))
    errors = {line.split(":")[0]: line for line in result.err.splitlines()}
    if wal == "closed":
        assert codes == {p: "74" for p in PROGRAMS}, result
        assert errors == {f"agent-{p}": f"agent-{p}: {home}: database is read-only"
                          for p in PROGRAMS}, result.err
    else:
        assert codes == {"fork": "74", "kill": "74", "ps": "0", "send": "74", "mail": "1",
                         "replay": "0", "run": "74", "wait": "1", "doc": "74", "db": "0",
                         "log": "0", "answer": "0", "set": "74", "why": "0",
                         "top": "0", "diff": "1", "merge": "1"}, result
        layerless = {"agent-diff", "agent-merge"}   # (a has no workspace: said, exit 1)
        assert sorted(errors) == sorted({f"agent-{p}" for p in WRITERS} | layerless), result.err
        assert all(line.endswith("database is read-only") for p, line in errors.items()
                   if p not in layerless)
        assert all(errors[p].endswith("its tools write the directory itself") for p in layerless)
    assert len(result.err.splitlines()) == len(errors)
    assert after == before


def test_locked_database_writes_nothing_half(home, monkeypatch):
    fork("-n", "a")
    monkeypatch.setenv("AGENTCTL_BUSY_TIMEOUT", "0.1")
    with write_locked(home):
        results = [agent("send", "a", "hi"), agent("fork", "-p", "a", "-n", "b", "go"),
                   agent("kill", "a"), agent("mail", "-r", "a")]
    for result in results:
        assert (result.code, result.out) == (75, "") and result.err.count("\n") == 1, result
        assert "database is locked (gave up after 0.1s)" in result.err
    assert agent("ps", "-q").lines.__len__() == 2 and agent("mail", "-c", "a").code == 1
    assert registry.resolve(db.connect(str(home)), "a")["status"] == "S"
