"""agent-set: change an agent's settings after its fork."""

import click

from agentctl import settings
from agentctl.cli.options import complete_agents
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import warn
from agentctl.errors import UsageError
from agentctl.ops import configure
from agentctl.store import registry
from agentctl.store.db import transaction


def complete_settings(ctx, param, incomplete):
    """Shell completion: the settings agent-set changes, as KEY=."""
    return [f"{s.name}=" for s in settings.SETTINGS
            if not s.fixed and s.name.startswith(incomplete)]


def _hint(word):
    """agent-fork's option for a setting: agent-set's KEY=VALUE for it."""
    for setting in settings.SETTINGS:
        spellings = "/".join(setting.spellings).split("/")
        if setting.kind == "hosts":
            spellings.append(f"--no-{setting.name}")
        if word in spellings and not setting.fixed:
            return f"use {setting.name}=VALUE (agent-set takes KEY=VALUE)"
    return None


@program("agent-set", hint=_hint)
@click.option("-o", "--model-option", "options", multiple=True, metavar="KEY=VALUE",
              help="Set one model option, keeping the others (KEY= removes it); repeatable.")
@click.argument("agent", shell_complete=complete_agents)
@click.argument("changes", nargs=-1, metavar="[KEY=VALUE...]", shell_complete=complete_settings)
def cli(db_path, options, agent, changes):
    """Change AGENT's settings: each KEY=VALUE sets one (KEY is a setting below,
    a column of agent-ps -o). Prints nothing; each change is an event (agent-log).

    A change that narrows what the agent may do is always allowed (to itself too);
    any other only to the operator or an ancestor, and widening a grant or a
    budget only to one that holds what it gives. An agent held after a failure
    or in a mail loop is tried again by the next agent-run --all.
    """
    if not changes and not options:
        raise UsageError("nothing to set: give KEY=VALUE or -o KEY=VALUE")
    values = {}
    for change in changes:
        key, equals, text = change.partition("=")
        if not equals:
            raise UsageError(f"{change}: want KEY=VALUE")
        if key in values:
            raise UsageError(f"{key} given twice")
        values[key] = settings.get(key).parse(text)
    if options and "options" in values:
        raise UsageError("give options=... or -o KEY=VALUE, not both")
    for option in options:
        if "=" not in option:
            raise UsageError(f"-o {option}: want KEY=VALUE")
    catalog = None
    if values.get("allow"):     # the tools a grant may name, found before taking the lock
        from agentctl.tools.catalog import Catalog  # (start-up: 5.5 ms, only for a change of grants)
        catalog = Catalog()
    conn = connect(db_path, create=False)
    with transaction(conn):
        me = actor(conn)
        target = registry.resolve(conn, agent)
        if options:
            values["options"] = _merged(target["options"], options)
        configure.change(conn, target, me, values, tool_names=catalog and catalog.names)
    if catalog:
        for pattern in catalog.unmatched(values["allow"]):
            warn("agent-set", f"{pattern}: matches no tool that exists now (a grant may "
                              "name tools installed later)")
    return 0


cli.epilog = "Settings (KEY): " + " ".join(s.name for s in settings.SETTINGS
                                          if not s.fixed) + "."


def _merged(stored, given):
    """The agent's options with each -o KEY=VALUE set (KEY= removes KEY)."""
    current = {}
    for line in settings.listed(stored):
        current[line.partition("=")[0]] = line
    for option in given:
        key, _, value = option.partition("=")
        key = key.strip()
        if value.strip():
            current[key] = f"{key}={value.strip()}"
        else:
            current.pop(key, None)
    return list(current.values())


def main(argv=None):
    return run(cli, argv)
