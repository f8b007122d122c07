"""A damaged database file (bytes overwritten in its pages) is one clear line and
exit 74 from every program, never a traceback or exit 70; agent-db check says what
it finds (exit 1) without writing the file."""

import random
import shutil
import sqlite3

import pytest

from agentctl.store.db import SCHEMA_VERSION

from .conftest import PROGRAMS, agent, fork

DOCUMENTED = {0, 1, 2, 3, 74, 75}
PAGE = 4096


@pytest.fixture(scope="module")
def sound(tmp_path_factory):
    """A database with agents, turns, mail and a document, checkpointed into one file."""
    path = str(tmp_path_factory.mktemp("sound") / "agents.db")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("AGENTCTL_DB", path)
        ids = [fork("-n", f"a{i}", "-m", "echo", "-s", "system " * 40, "hello " * 80)
               for i in range(5)]
        for i in ids:
            agent("send", i, "a mail body " * 30)
        agent("run", "--all")
        agent("send", ids[0], "MARKER-BODY-" + "m" * 60)
        agent("doc", "put", "notes/a", "a document " * 100)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path, ids


def damaged_copy(sound, tmp_path, damage):
    path = str(tmp_path / "damaged.db")
    shutil.copy(sound[0], path)
    with open(path, "r+b") as f:
        data = f.read()
        for offset, raw in damage(data):
            f.seek(offset)
            f.write(raw)
    return path


def runs(ids):
    return [("ps",), ("ps", "-f"), ("run", "--all"), ("run", ids[1]), ("mail", "-a", ids[0]),
            ("replay", ids[0]), ("send", ids[2], "x"), ("fork", "-n", "new", "-m", "echo", "hi"),
            ("wait", "--timeout", "0", ids[3]), ("kill", ids[4]), ("doc", "get", "notes/a"),
            ("log",), ("log", "--tree", ids[0], "--format", "jsonl"), ("answer",),
            ("answer", "-c"), ("why", ids[1]), ("set", ids[2], "max_children=3"),
            ("top",), ("top", "-a"), ("diff", ids[1]), ("merge", ids[1])]


def test_every_program_is_covered():
    assert {r[0] for r in runs(["x"] * 5)} | {"db"} == set(PROGRAMS)


@pytest.mark.parametrize("seed", range(24))
def test_random_bytes_in_random_pages(sound, tmp_path, monkeypatch, seed):
    rnd = random.Random(seed)

    def damage(data):
        for _ in range(rnd.randint(1, 4)):
            offset = rnd.randrange(len(data) // PAGE) * PAGE + rnd.randrange(PAGE - 64)
            yield offset, rnd.randbytes(rnd.randint(8, 64))

    monkeypatch.setenv("AGENTCTL_DB", damaged_copy(sound, tmp_path, damage))
    for args in runs(sound[1]):
        result = agent(*args)
        assert result.code in DOCUMENTED, (seed, args, result)
        assert "Traceback" not in result.err and "internal error" not in result.err, \
            (seed, args, result)
        lines = result.err.splitlines()     # --all: a line per agent, and the summary
        assert len(lines) <= 1 or args == ("run", "--all"), (seed, args, result)
        assert all(line.startswith(f"agent-{args[0]}: ") for line in lines), (seed, args, result)


def test_a_schema_that_is_not_utf8(sound, tmp_path, monkeypatch):
    """SQLite's own message quotes the damaged bytes: that was a UnicodeDecodeError."""
    def damage(data):
        at = data.index(b"turns_agent")           # an index's name in sqlite_master
        yield at + len("turns_"), b"\xff\xfe"
    path = damaged_copy(sound, tmp_path, damage)
    monkeypatch.setenv("AGENTCTL_DB", path)
    result = agent("ps")
    assert result.code == 74 and result.out == "", result
    assert result.err == (f"agent-ps: {path}: the database is damaged: agent-db check says "
                          "what it finds (its schema can't be read)\n")
    check = agent("db", "check")
    assert check.code == 1 and check.out == f"{path}: can't be read: its schema is damaged\n"
    assert check.err == f"agent-db: {path}: 1 problem found (nothing checked)\n"


def test_a_row_whose_text_is_not_utf8(sound, tmp_path, monkeypatch):
    """The file's structure is sound, a mail's body is not: the program that reads it
    says the database is damaged; the others go on working."""
    def damage(data):
        yield data.index(b"MARKER-BODY-") + 2, b"\xff\xfe"
    path = damaged_copy(sound, tmp_path, damage)
    monkeypatch.setenv("AGENTCTL_DB", path)
    a0 = sound[1][0]
    result = agent("mail", "-a", a0)
    assert result.code == 74 and result.err == (
        f"agent-mail: {path}: the database is damaged: agent-db check says what it finds "
        "(it holds text that is not UTF-8)\n"), result
    assert agent("ps").code == 0
    check = agent("db", "check")
    assert check.code == 1, check
    assert check.out.endswith(": body holds text that is not UTF-8\n") and \
        check.out.startswith(f"{path}: mail row "), check.out


def test_a_page_whose_header_is_trashed(sound, tmp_path, monkeypatch):
    def damage(data):
        at = data.index(b"MARKER-BODY-") // PAGE * PAGE
        yield at, b"\x00" * 12
    path = damaged_copy(sound, tmp_path, damage)
    monkeypatch.setenv("AGENTCTL_DB", path)
    result = agent("mail", "-a", sound[1][0])
    assert result.code == 74 and "the database is damaged" in result.err, result
    assert "malformed" in result.err and len(result.err.splitlines()) == 1
    check = agent("db", "check")
    assert check.code == 1 and "problem" in check.err and check.out.count(path) >= 1, check


def test_check_of_a_sound_database_writes_nothing(sound, tmp_path, monkeypatch):
    path = str(tmp_path / "copy.db")
    shutil.copy(sound[0], path)
    before = open(path, "rb").read()
    monkeypatch.setenv("AGENTCTL_DB", path)
    result = agent("db", "check")
    assert result.code == 0 and result.err == "", result
    assert result.out == f"{path}: ok (schema {SCHEMA_VERSION}, 6 agents, 15 messages, 6 mails)\n"
    assert open(path, "rb").read() == before


def test_check_creates_nothing_and_refuses_a_foreign_file(tmp_path, monkeypatch):
    missing = tmp_path / "nope.db"
    result = agent("db", "check", str(missing))
    assert (result.code, result.out) == (74, "") and not missing.exists()
    assert result.err == f"agent-db: {missing}: no such database\n"
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE recipes (name)")
    conn.commit()
    conn.close()
    result = agent("db", "check", str(foreign))
    assert result.code == 1, result
    assert result.out == f"{foreign}: not an agentctl database (it has tables of its own: recipes)\n"
    text = tmp_path / "text.db"
    text.write_text("hello, this is not SQLite at all, only words " * 200)
    result = agent("db", "check", str(text))
    assert result.code == 1 and "not a database" in result.out, result
