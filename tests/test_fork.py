"""agent-fork: identity, names, inheritance, constant-size forks, refusals."""

import re

from agentctl.store import history, registry
from agentctl.store.db import transaction
from agentctl.ids import INIT_ID, new_id

from .conftest import agent, fork

ID = re.compile(r"[A-Za-z0-9_-]{22}\Z")


def test_prints_only_the_childs_id():
    result = agent("fork", "-n", "scout", "look around")
    assert result.code == 0 and result.err == ""
    assert ID.match(result.out.strip()) and result.out.count("\n") == 1


def test_ids_never_start_with_a_dash():
    ids = [new_id() for _ in range(20000)]
    assert all(ID.match(i) and not i.startswith("-") for i in ids)
    assert len(set(ids)) == len(ids)


def test_prompt_is_the_first_message_and_input_is_pending(conn):
    child = fork("-n", "c", "do the thing")
    rows = history.replay(conn, registry.get(conn, child))
    assert [(m["agent_id"], m["kind"], m["content"]) for m in rows] == [(child, "user", "do the thing")]


def test_prompt_from_stdin(conn):
    child = fork("-n", "c", "-", stdin="from\nstdin\n")
    assert history.replay(conn, registry.get(conn, child))[0]["content"] == "from\nstdin\n"


def test_without_prompt_nothing_is_written(conn):
    child = fork("-n", "c")
    assert history.count(conn, child) == 0


def test_default_parent_is_self_then_init(conn, monkeypatch):
    lead = fork("-n", "lead")
    assert registry.get(conn, lead)["parent_id"] == INIT_ID
    monkeypatch.setenv("AGENT_ID", "lead")
    child = fork()
    assert registry.get(conn, child)["parent_id"] == lead
    assert registry.get(conn, child)["forked_from"] == lead


def test_model_and_system_prompt_are_inherited_unless_given(conn):
    fork("-n", "p", "-m", "echo", "-s", "Be terse.")
    same = registry.get(conn, fork("-p", "p"))
    other = registry.get(conn, fork("-p", "p", "-m", "openai:x", "-s", "Other."))
    assert (same["model"], same["system_prompt"]) == ("echo", "Be terse.")
    assert (other["model"], other["system_prompt"]) == ("openai:x", "Other.")


def test_a_fork_writes_the_same_rows_whatever_the_history_length(conn):
    def rows():
        return sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                   for t in ("agents", "messages", "events", "mail"))
    short, long_ = fork("-n", "short"), fork("-n", "long")
    with transaction(conn):
        history.append(conn, short, "user", "x")
        conn.executemany("INSERT INTO messages (agent_id, kind, content, created_at) "
                         "VALUES (?, 'user', 'x', 0)", [(long_,)] * 5000)
    before = rows()
    fork("-p", "short", "prompt")
    small = rows() - before
    before = rows()
    fork("-p", "long", "prompt")
    assert rows() - before == small == 3      # the agent, its prompt, the fork event


def test_names(conn):
    assert agent("fork", "-n", "Bad").err == \
        "agent-fork: bad name: 'Bad' (want [a-z][a-z0-9._-]*, at most 64)\n"
    assert agent("fork", "-n", "x" * 65).code == 2
    assert agent("fork", "-n", "a" + "b" * 63).code == 0
    first = fork("-n", "dup")
    result = agent("fork", "-n", "dup")
    assert (result.code, result.err) == (3, f"agent-fork: name already taken: dup (by {first})\n")
    assert agent("kill", "dup").code == 0
    assert agent("fork", "-n", "dup").code == 3          # a zombie keeps its name
    assert agent("wait", "dup").code == 3                # reaped: dead
    again = fork("-n", "dup")                           # a dead agent's name is free
    assert registry.resolve(conn, "dup")["id"] == again


def with_id(conn, agent_id):
    """An agent of init's with the id given, as the random ones may be."""
    with transaction(conn):
        conn.execute("INSERT INTO agents (id, parent_id, forked_from, fork_msg_id, created_at) "
                     "VALUES (?, ?, ?, 0, 0)", (agent_id, INIT_ID, INIT_ID))


def test_lookup_by_id_prefix_and_ambiguity(conn):
    for suffix in ("a", "b"):
        with_id(conn, "Zzzz" + suffix * 18)
    assert registry.resolve(conn, "Zzzza")["id"] == "Zzzz" + "a" * 18
    result = agent("ps", "--parent", "Zzzz")
    assert result.code == 2
    assert result.err == f"agent-ps: ambiguous agent Zzzz: matches {'Zzzz' + 'a' * 18}, {'Zzzz' + 'b' * 18}\n"
    assert agent("ps", "--parent", "Zzz").err == "agent-ps: no such agent: Zzz\n"
    assert agent("ps", "--parent", "-x").code == 2


def test_a_name_never_shadows_an_id_prefix(conn):
    """A name is looked up before an id prefix: a child named after another agent's
    short id would catch what was meant for that agent."""
    victim = "zt9x6a8t" + "Q" * 14
    with_id(conn, victim)
    result = agent("fork", "-n", "zt9x6a8t")
    assert (result.code, result.err) == (
        3, f"agent-fork: name zt9x6a8t is a prefix of the id {victim}: it would shadow that agent\n")
    assert agent("fork", "-n", "zt9x6a8").code == 0       # shorter than a short id: by chance
    assert registry.resolve(conn, "zt9x6a8t")["id"] == victim
    # an id that comes later and begins with a name: the word is ambiguous, not the name's
    holder = fork("-n", "qz9x6a8t")
    later = "qz9x6a8t" + "R" * 14
    with_id(conn, later)
    result = agent("send", "qz9x6a8t", "for whom?")
    assert (result.code, result.err) == (
        2, f"agent-send: ambiguous agent qz9x6a8t: the name of {holder} and a prefix of {later}\n")
    assert conn.execute("SELECT count(*) FROM mail").fetchone()[0] == 0
    assert agent("send", holder, "by id").code == 0


def test_refusals():
    assert agent("fork", "-r", "boss").err == \
        "agent-fork: unknown role: boss (one of agent, task, worker, lead, architect, daemon)\n"
    fork("-n", "t", "-r", "task")
    result = agent("fork", "-p", "t")
    assert (result.code, result.err) == (3, "agent-fork: t: a task can't fork\n")
    result = agent("fork", "-p", "nobody")
    assert (result.code, result.err) == (1, "agent-fork: no such agent: nobody\n")
    fork("-n", "gone")
    agent("kill", "-s", "KILL", "gone")
    result = agent("fork", "-p", "gone")
    assert (result.code, result.err) == (3, "agent-fork: gone: can't fork: it is a zombie (exited)\n")
    assert agent("fork", "").err == "agent-fork: empty prompt\n"
    assert agent("fork", "--at", "-3").code == 2
    assert agent("fork", "--at", "99999").err == \
        "agent-fork: message 99999 is not in the context of init (see agent-replay init)\n"


def test_an_id_is_a_random_version_4_uuid():
    import base64
    import uuid
    from agentctl.ids import new_id
    for _ in range(200):
        text = new_id()
        assert len(text) == 22 and not text.startswith("-")
        value = uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
        assert (value.version, value.variant) == (4, uuid.RFC_4122)
