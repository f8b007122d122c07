"""What the settings' one declaration (agentctl.settings) drives: agent-fork's options,
the fork tool's parameters, the storage's column lists and agent-ps's columns; and the
one rule of giving (ops.confinement.gives), which a fork and agent-set ask alike."""

import importlib

import click
import click.testing
import pytest

from agentctl import settings
from agentctl.cli import fork as fork_program
from agentctl.cli import ps
from agentctl.cli.options import setting_options
from agentctl.errors import UsageError
from agentctl.store import proctable, registry
from agentctl.turn import builtin

from .conftest import agent, fork

NOT_SETTINGS = {"db_path", "version", "help", "parent", "name", "at", "prompt"}


def test_agent_fork_has_the_option_each_setting_declares():
    params = {p.name: p for p in fork_program.cli.params}
    offs = {f"no_{s.name}" for s in settings.SETTINGS if s.kind == "hosts"}   # --no-net
    assert offs and offs <= set(params)
    assert set(params) - NOT_SETTINGS - offs == {s.name for s in settings.SETTINGS}
    for setting in settings.SETTINGS:
        option = params[setting.name]
        assert option.opts[-1] == setting.flag, setting.name
        assert option.help == setting.help and setting.help, setting.name
        assert option.multiple == setting.repeated, setting.name
        if setting.kind != "flag":
            assert option.metavar == setting.metavar and setting.metavar, setting.name


def test_a_new_setting_is_an_option_of_agent_fork(monkeypatch):
    """A setting declared is an option, parsed by its kind, with nothing else written."""
    extra = settings.Setting("nice", "count", "How nice its turns are.", metavar="N",
                             help="Be this nice.", least=1)
    monkeypatch.setattr(settings, "SETTINGS", settings.SETTINGS + (extra,))

    @click.command()
    @setting_options
    def command(**given):
        click.echo(repr({s.name: s.given(given[s.name]) for s in settings.SETTINGS
                         if given[s.name] not in (None, ())}))

    result = click.testing.CliRunner().invoke(command, ["--nice", "3", "--ro", "/a",
                                                        "--ro", "/b"])
    assert result.output == "{'ro': ['/a', '/b'], 'nice': 3}\n", result.output
    refused = click.testing.CliRunner().invoke(command, ["--nice", "0"])
    assert refused.exit_code == 2 and "--nice" in refused.output


def test_agent_set_names_the_settings_it_changes():
    from agentctl.cli import set as set_program
    names = set_program.cli.epilog.removeprefix("Settings (KEY): ").rstrip(".").split()
    assert names == [s.name for s in settings.SETTINGS if not s.fixed]
    assert agent("set", "--help").out.count("unconfined") == 1


def test_the_fork_tool_offers_the_settings_that_say_so():
    offered = [s for s in settings.SETTINGS if s.tool]
    assert {s.name for s in offered} == {"role", "budget", "allow", "ask"}
    properties = builtin.SPECS["fork"][1]["properties"]
    assert set(properties) == {"prompt", "name", "budget_usd"} | {s.name for s in offered}
    for setting in offered:
        assert properties[setting.name]["description"] == setting.tool


@pytest.mark.parametrize("args, given", [
    ({"budget": 10}, settings.Budget(10, "tokens")),
    ({"budget_usd": 0.5}, settings.Budget(500000, "usd")),
    ({}, None)])
def test_the_fork_tools_budget(args, given):
    assert settings.get("budget").offered(args) == given


@pytest.mark.parametrize("args, error", [
    ({"budget": 1, "budget_usd": 1.0}, "give budget (tokens) or budget_usd (dollars), not both"),
    ({"budget_usd": 0.0000004}, "budget_usd out of range"),      # 0 micros once rounded
    ({"budget_usd": 2e9}, "budget_usd out of range")])
def test_the_fork_tools_budget_refused(args, error):
    with pytest.raises(UsageError, match=error.replace("(", r"\(").replace(")", r"\)")):
        settings.get("budget").offered(args)


def test_the_storage_reads_and_writes_every_setting(conn):
    columns = set(settings.COLUMNS)
    assert "budget_unit" in columns
    assert columns <= registry.FORK_COLUMNS
    assert columns <= {c.strip() for c in registry.AGENT_COLUMNS.split(",")}
    assert registry.SETTABLE == columns - {"role"}
    assert len(proctable.rows(conn)[0]) == len(proctable.FIELDS)
    assert columns <= set(proctable.FIELDS), columns - set(proctable.FIELDS)


def test_agent_ps_has_a_column_for_each_setting_with_a_header():
    keys = [c.key for c in ps.COLUMNS]
    assert {s.name for s in settings.SETTINGS if s.header} <= set(keys)
    assert ps.cli.epilog == f"Columns (-o): {' '.join(keys)}."


def test_a_setting_with_a_header_is_a_column_of_agent_ps(monkeypatch):
    """Declared with a header, a setting is an agent-ps column with nothing else written."""
    extra = settings.get("idle_exit").replace(header="IDLE")
    monkeypatch.setattr(settings, "SETTINGS", tuple(
        extra if s.name == "idle_exit" else s for s in settings.SETTINGS))
    monkeypatch.setattr(settings, "BY_NAME", {s.name: s for s in settings.SETTINGS})
    try:
        assert "idle_exit" in [c.key for c in importlib.reload(ps).COLUMNS]
    finally:
        monkeypatch.undo()
        importlib.reload(ps)


# -- the one rule of giving, asked by a fork and by agent-set ------------------------------------
#
# Each case: what lead holds (agent-fork's words), and for one setting a value beyond it
# and one within it, as agent-fork's words and as agent-set's KEY=VALUE.

def cases(tmp):
    work = tmp / "work"
    (work / "sub").mkdir(parents=True, exist_ok=True)
    return {
        "cwd": ([], ["--cwd", tmp], f"cwd={tmp}", ["--cwd", work / "sub"],
                f"cwd={work / 'sub'}"),
        "ro": (["--ro", "/usr/share"], ["--ro", "/etc"], "ro=/etc",
               ["--ro", "/usr/share/doc"], "ro=/usr/share/doc"),
        "net": (["--net", "*.github.com"], ["--net", "pypi.org"], "net=pypi.org",
                ["--net", "api.github.com"], "net=api.github.com"),
        "rw": (["--rw", ".git"], ["--rw", ".envrc"], "rw=.envrc", ["--rw", ".git"], "rw=.git"),
        "env": (["--env", "TOKEN"], ["--env", "OTHER"], "env=OTHER", ["--env", "TOKEN"],
                "env=TOKEN"),
        "limits": (["--limit", "procs=50"], ["--limit", "procs=51"], "limits=procs=51",
                   ["--limit", "procs=10"], "limits=procs=10"),
        "max_children": (["--max-children", "5"], ["--max-children", "9"], "max_children=9",
                         ["--max-children", "3"], "max_children=3"),
        "unconfined": ([], ["--unconfined"], "unconfined=yes", [], "unconfined=no"),
        "shared": ([], ["--shared"], "shared=yes", ["--no-shared"], "shared=no"),
        "mail_loop": (["--mail-loop", "10/1h"], ["--mail-loop", "20/1h"], "mail_loop=off",
                      ["--mail-loop", "10/2h"], "mail_loop=5/1h"),
    }


HOLDERS = {"cwd", "ro", "net", "rw", "env", "limits", "max_children", "unconfined",
           "mail_loop", "shared"}


def test_every_rule_of_giving_is_a_case_here(tmp_path):
    """Each setting a giver must hold (not a budget, carved; not --ask, which only adds;
    not --allow, judged over the tools: test_external_tools) has a case below."""
    ruled = {s.name for s in settings.SETTINGS if s.narrows not in
             (None, settings.CARVE, settings.SUPERSET) and s.kind != "patterns"}
    assert ruled == HOLDERS == set(cases(tmp_path))


@pytest.mark.parametrize("name", sorted(HOLDERS))
def test_fork_and_agent_set_give_alike(name, tmp_path, monkeypatch):
    held, beyond, beyond_set, within, within_set = cases(tmp_path)[name]
    work = tmp_path / "work"
    fork("-n", "lead", "--cwd", work, "--max-children", "20", *held)
    fork("-p", "lead", "-n", "kid")
    monkeypatch.setenv("AGENT_ID", "lead")
    forked = agent("fork", "-n", "wide", *beyond)
    changed = agent("set", "kid", beyond_set)
    assert (forked.code, changed.code) == (3, 3), (forked, changed)
    assert "so it can't give" in forked.err or "only the operator" in forked.err, forked
    what = beyond_set.partition("=")[0]
    assert changed.err.startswith(f"agent-set: {what}="), changed
    assert forked.err.startswith(f"agent-fork: {settings.get(name).flag}"), forked
    assert agent("fork", "-n", "narrow", *within).code == 0
    assert agent("set", "kid", within_set).code == 0
    monkeypatch.delenv("AGENT_ID")
    assert agent("fork", "-p", "lead", "-n", "operators", *beyond).code in (
        (0,) if name == "unconfined" else (3,))     # a child stays within its parent's


def test_the_rule_refuses_before_it_looks(tmp_path, monkeypatch):
    """A path given beyond what the giver holds is refused the same whether it exists."""
    fork("-n", "lead", "--cwd", tmp_path)
    monkeypatch.setenv("AGENT_ID", "lead")
    for path in ("/etc", "/no/such/place"):
        refused = agent("fork", "--ro", path)
        assert refused.code == 3 and refused.err == (
            f"agent-fork: --ro {path}: lead's tools can't read it (its --cwd and --ro), so "
            "it can't give it\n"), refused
