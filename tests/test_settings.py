"""agentctl.settings, the one declaration of the per-agent settings, held against what
it drives and what it must agree with: the agents table, fork's inheritance (the
rules as agent-fork(1) states them, written out here again on purpose), agent-ps's
columns, and what agent-set is to use (lookup, parsing, narrowing)."""

import json
import os

import pytest

from agentctl import limits, settings
from agentctl.cli import ps
from agentctl.errors import UsageError
from agentctl.ids import INIT_ID, ROLES
from agentctl.ops import lifecycle
from agentctl.store import registry
from agentctl.store.db import connect, transaction

from .conftest import ROOT, agent, fork

PARENT = object()   # the parent's value
TOP = os.path.realpath(ROOT)    # a working directory that exists (a fork checks)
# What a child forked without the setting gets (agent-fork(1)), and the roles that
# have a value of their own.
UNSET = {"role": "agent", "model": PARENT, "system_prompt": PARENT, "context_window": PARENT,
         "budget": None, "restart": "never", "max_restarts": None, "restart_window": None,
         "reap_after": PARENT, "idle_exit": None, "max_children": PARENT, "mail_loop": PARENT,
         "allow": None,
         "ask": None, "cwd": PARENT, "shared": PARENT, "ro": PARENT, "rw": PARENT, "env": PARENT, "net": PARENT,
         "limits": PARENT,
         "unconfined": None, "options": PARENT, "schema": None, "tier": PARENT}
BY_ROLE = {("worker", "max_children"): 4, ("daemon", "restart"): "always"}
# A parent with every setting set, and a child given every one, each different.
PARENTS = {"role": "lead", "model": "echo", "system_prompt": "Be terse.",
           "context_window": 9000, "budget": 5000, "restart": "on-failure",
           "max_restarts": 2, "restart_window": 60.0, "reap_after": 120.0, "idle_exit": 30.0,
           "max_children": 7, "mail_loop": "10/1h", "allow": ["read_*"], "ask": ["run:1h"],
           "cwd": TOP, "shared": True,
           "ro": ["/usr"], "rw": [".git", ".envrc"], "env": ["GITHUB_TOKEN", "TOKEN2"],
           "net": ["*"], "limits": {"cpu": 100}, "unconfined": True,
           "options": ["temperature=0.5"], "schema": '{"type":"object"}', "tier": "batch"}
CHILDREN = {"role": "architect", "model": "openai:x", "system_prompt": "Be thorough.",
            "context_window": 8000, "budget": 1000, "restart": "always", "max_restarts": 0,
            "restart_window": 30.0, "reap_after": 60.0, "idle_exit": 10.0,
            "max_children": 0, "mail_loop": "5/2h", "allow": ["read_file", "list_dir"],
            "ask": ["*"],
            "cwd": os.path.join(TOP, "tests"), "shared": True, "ro": ["/usr/share"], "rw": [".git"],
            "env": ["TOKEN2"], "net": ["pypi.org", "*.github.com:443"],
            "limits": {"cpu": 50, "procs": 8}, "unconfined": True,
            "options": ["max_tokens=100", "seed=7"], "schema": '{"type":"array"}',
            "tier": "flex"}
SQL_TYPES = {"count": "INTEGER", "budget": "INTEGER", "duration": "REAL",
             "flag": "INTEGER"}      # else TEXT


def stored(value):
    if isinstance(value, settings.Budget):
        return value.amount
    if isinstance(value, bool):
        return 1 if value else None
    if isinstance(value, dict):
        return limits.stored(value)
    return "\n".join(value) if isinstance(value, list) else value


def forked(conn, parent, values, **others):
    """A child forked through ops.lifecycle.fork, its settings by name."""
    with transaction(conn):
        given = {settings.get(name).key: value for name, value in values.items()}
        return registry.get(conn, lifecycle.fork(conn, parent, **given, **others))


# -- the declaration and the schema ------------------------------------------------------------

def check_schema(declared, tmp_path):
    """Every declared setting is a column of the agents table of a new SQLite database
    (the PostgreSQL schema is held to that one by test_postgresql), of its kind's type,
    and one a fork writes."""
    lite = connect(str(tmp_path / "schema.db"))
    types = {r[1]: r[2] for r in lite.execute("PRAGMA table_info(agents)")}
    lite.close()
    for setting in declared:
        assert setting.name in types, f"{setting.name}: no such column in agents"
        assert types[setting.name] == SQL_TYPES.get(setting.kind, "TEXT"), setting.name
        assert setting.name in registry.FORK_COLUMNS, setting.name


def test_every_setting_is_a_column_of_the_agents_table(tmp_path):
    check_schema(settings.SETTINGS, tmp_path)


def test_a_setting_the_schema_lacks_is_caught(tmp_path):
    wrong = settings.SETTINGS + (settings.Setting("nosuch", "count", "None."),)
    with pytest.raises(AssertionError, match="nosuch: no such column"):
        check_schema(wrong, tmp_path)


# -- fork: a value given, else the rule --------------------------------------------------------

def check_fork(conn):
    """A child forked with no setting has each as the rule says (the parent's, the
    role's, none), whatever its role; a child given each has its own."""
    assert set(UNSET) == set(settings.BY_NAME) == set(PARENTS) == set(CHILDREN)
    parent = forked(conn, registry.get(conn, INIT_ID), PARENTS, name="p")
    assert {n: parent[n] for n in PARENTS} == {n: stored(v) for n, v in PARENTS.items()}
    for role in ROLES:
        child = forked(conn, parent, {"role": role} if role != "agent" else {})
        for name, rule in UNSET.items():
            want = BY_ROLE.get((role, name), parent[name] if rule is PARENT else rule)
            want = role if name == "role" else want
            assert child[name] == want, f"role {role}, forked without {name}"
        assert child["budget_id"] == parent["id"]       # charged to the parent's account
    given = forked(conn, parent, CHILDREN)
    assert {n: given[n] for n in CHILDREN} == {n: stored(v) for n, v in CHILDREN.items()}
    assert given["budget_id"] == given["id"]
    assert registry.get(conn, parent["id"])["budget"] == 4000         # carved


def test_fork_inherits_as_declared(conn):
    check_fork(conn)


@pytest.mark.parametrize("name, change", [
    ("idle_exit", {"inherit": True}),           # idle_exit is not inherited
    ("reap_after", {"inherit": False}),         # reap_after is
    ("max_children", {"by_role": {}}),          # a worker's is 4
    ("restart", {"by_role": {"daemon": "on-failure"}}),
])
def test_a_wrong_rule_is_caught(conn, monkeypatch, name, change):
    wrong = tuple(s.replace(**change) if s.name == name else s
                  for s in settings.SETTINGS)
    monkeypatch.setattr(settings, "SETTINGS", wrong)
    with pytest.raises(AssertionError, match=name):
        check_fork(conn)


def test_an_unknown_keyword_is_a_type_error(conn):
    with pytest.raises(TypeError, match="'window'"):
        lifecycle.fork(conn, registry.get(conn, INIT_ID), window=10)


# -- agent-ps ----------------------------------------------------------------------------------

def check_ps_columns(declared):
    """agent-ps has a column for exactly the settings that declare a header, under it."""
    shown = {c.key: c.header for c in ps.COLUMNS if c.key in {s.name for s in declared}}
    assert shown == {s.name: s.header for s in declared if s.header}


def test_agent_ps_shows_the_declared_columns():
    check_ps_columns(settings.SETTINGS)
    fork("-n", "p", "-r", "lead", "-m", "echo", "--budget", "100", "--allow", "read_file",
         "--allow", "list_dir", "--ask", "run", "--cwd", os.getcwd(), "-o", "max_tokens=9",
         "--schema", '{"type": "object"}')
    declared = [s for s in settings.SETTINGS if s.header]
    keys = ",".join(s.name for s in declared)
    result = agent("ps", "-o", keys)
    assert result.code == 0, result.err
    assert result.lines[0].split() == [s.header for s in declared]
    row = json.loads(agent("ps", "-o", keys, "--format", "json").out)[1]
    assert row == {"role": "lead", "model": "echo", "budget": 100, "mail_loop": "20/1h",
                   "allow": ["read_file", "list_dir"], "ask": ["run"], "cwd": os.getcwd(),
                   "shared": False, "ro": [], "rw": [], "env": [], "net": [], "limits": limits.DEFAULTS,
                   "unconfined": False,
                   "options": {"max_tokens": 9}, "schema": {"type": "object"},
                   "tier": "standard"}
    assert result.lines[2].split()[:2] == ["lead", "echo"]
    assert result.lines[2].split()[3:] == ["20/1h", "read_file,list_dir", "run", os.getcwd(),
                                          "-", "-", "-", "-", "-", "-", "-", "standard",
                                          "max_tokens=9", '{"type":"object"}']


def test_a_header_agent_ps_lacks_is_caught():
    wrong = tuple(s.replace(header="WINDOW") if s.name == "context_window" else s
                  for s in settings.SETTINGS)
    with pytest.raises(AssertionError):
        check_ps_columns(wrong)


# -- what agent-set is to use ------------------------------------------------------------------

def test_lookup_by_name():
    assert settings.get("max_children").narrows == settings.MIN
    with pytest.raises(UsageError, match="unknown setting: window .one of role, model, "):
        settings.get("window")


@pytest.mark.parametrize("name, text, value", [
    ("role", "worker", "worker"), ("model", "anthropic:claude", "anthropic:claude"),
    ("system_prompt", "Be brief.", "Be brief."), ("context_window", "8000", 8000),
    ("budget", "1", settings.Budget(1, "tokens")),
    ("budget", "$2.50", settings.Budget(2_500_000, "usd")),
    ("budget", "0.000001usd", settings.Budget(1, "usd")),
    ("restart", "on-failure", "on-failure"), ("max_restarts", "0", 0),
    ("restart_window", "10m", 600.0), ("reap_after", "1d", 86400.0), ("idle_exit", "90", 90.0),
    ("max_children", "4", 4), ("allow", "read_*, list_dir", ["read_*", "list_dir"]),
    ("ask", "run:1h", ["run:1h"]), ("ask", "", []), ("cwd", "/tmp", "/tmp"),
    ("cwd", "sub", os.path.join(os.getcwd(), "sub")),
    ("mail_loop", "20/10m", "20/10m"), ("mail_loop", "30/5400", "30/90m"),
    ("mail_loop", " 2/1D ", "2/1d"), ("mail_loop", "9/0.5", "9/0.5s"),
    ("mail_loop", "off", "off"), ("mail_loop", "0", "off"),
])
def test_parse(name, text, value):
    assert settings.get(name).parse(text) == value


@pytest.mark.parametrize("name, text, error", [
    ("role", "boss", "unknown role: boss (one of agent, task,"),
    ("model", "nosuch:x", "unknown model: nosuch:x"),
    ("context_window", "0", "bad context_window: '0' (want a whole number >= 1)"),
    ("max_children", "-1", "bad max_children: '-1' (want a whole number >= 0)"),
    ("max_children", "4.5", "bad max_children"), ("budget", "9" * 20, "bad budget"),
    ("budget", "$0", "bad budget"), ("budget", "$0.0000001", "at most 6 decimals"),
    ("budget", "2.5 euros", "bad budget"), ("budget", "$" + "9" * 20, "bad budget"),
    ("restart", "sometimes", "unknown restart: sometimes (one of never, on-failure, always)"),
    ("idle_exit", "soon", "bad duration: 'soon'"), ("reap_after", "9" * 400, "bad reap_after"),
    ("cwd", "", "bad cwd"),
    ("mail_loop", "20", "bad mail_loop: '20' (want N/DURATION"), ("mail_loop", "1/1h", "bad"),
    ("mail_loop", "20/0", "bad"), ("mail_loop", "20/soon", "bad"), ("mail_loop", "x/1h", "bad"),
    ("mail_loop", "9" * 20 + "/1h", "bad"), ("mail_loop", "20/" + "9" * 400, "bad"),
])
def test_parse_refuses(name, text, error):
    with pytest.raises(UsageError) as e:
        settings.get(name).parse(text)
    assert error in str(e.value)


def test_a_parsed_value_is_what_fork_takes(conn):
    texts = {"role": "worker", "model": "echo", "system_prompt": "Hi.", "context_window": "100",
             "budget": "50", "restart": "always", "max_restarts": "3", "restart_window": "1h",
             "reap_after": "2h", "idle_exit": "5m", "max_children": "2", "mail_loop": "30/90m",
             "allow": "read_file,list_dir", "ask": "run:1h", "cwd": TOP, "shared": "no",
             "ro": "/usr,/etc",
             "rw": ".git,.vscode", "env": "GITHUB_TOKEN", "net": "yes", "limits": "cpu=1m,mem=1G", "unconfined": "no",
             "options": "max_tokens=5", "schema": '{"type": "object", "required": ["a"]}',
             "tier": "flex"}
    assert set(texts) == set(settings.BY_NAME)
    values = {name: settings.get(name).parse(text) for name, text in texts.items()}
    child = forked(conn, registry.get(conn, INIT_ID), values)
    assert {n: child[n] for n in texts} == {n: stored(v) for n, v in values.items()}
    assert (child["restart_window"], child["allow"]) == (3600.0, "read_file\nlist_dir")
    assert (child["ro"], child["net"], child["limits"]) == ("/usr\n/etc", "*",
                                                            f"cpu=60,mem={1 << 30}")


@pytest.mark.parametrize("name, old, new, narrower", [
    ("max_children", None, 4, True), ("max_children", 4, 2, True),
    ("max_children", 2, 4, False), ("max_children", 4, None, False),
    ("budget", None, 100, True), ("budget", 100, 200, False),
    ("budget", settings.Budget(100, "usd"), settings.Budget(50, "usd"), True),
    ("budget", settings.Budget(100, "usd"), settings.Budget(50, "tokens"), False),
    ("budget", 100, settings.Budget(50, "usd"), False),
    ("allow", "a\nb", ["a"], True), ("allow", "a", ["a", "b"], False),
    ("allow", "a", None, True), ("allow", None, ["a"], False),
    ("ask", "a", ["a", "b"], True), ("ask", "a\nb", ["a"], False), ("ask", "a", None, False),
    ("model", "echo", "echo", True), ("model", "echo", "openai:x", False),
    ("cwd", "/a", "/a/b", True), ("cwd", "/a/b", "/a", False), ("cwd", "/a", "/ab", False),
    ("cwd", None, "/a", True),
    ("ro", "/a\n/b", ["/a/c"], True), ("ro", "/a", ["/a", "/b"], False), ("ro", "/a", None, True),
    ("net", "*", ["pypi.org"], True), ("net", None, ["*"], False),
    ("net", "pypi.org", None, True), ("net", "*.github.com", ["github.com"], False),
    ("limits", "cpu=60", {"cpu": 30}, True), ("limits", "cpu=60", {"cpu": 90}, False),
    ("limits", None, {"mem": 1 << 40}, False), ("limits", "procs=8", None, False),
    ("unconfined", 1, False, True), ("unconfined", None, True, False),
    ("shared", 1, False, True), ("shared", None, True, False),
    ("mail_loop", None, "10/1h", True), ("mail_loop", "20/1h", "20/2h", True),
    ("mail_loop", "20/1h", "30/1h", False), ("mail_loop", "20/1h", "20/30m", False),
    ("mail_loop", "off", "50/1m", True), ("mail_loop", None, "off", False),
    ("mail_loop", "10/1h", None, False), ("mail_loop", "20/1h", None, True),
])
def test_narrows(name, old, new, narrower):
    assert settings.narrows(settings.get(name), old, new) is narrower
