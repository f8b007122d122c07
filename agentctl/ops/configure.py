"""Changing an agent's settings after its fork (agent-set(1)), driven by their one
declaration (agentctl.settings): no rule here names a setting, but for the kinds
that need one (a budget is carved through ops/budget.py, grants are judged by
ops/grants.py, model options against the model).

Who may change what: a change that narrows what the agent may do (settings.narrows)
may be made by the operator, by the agent itself or by an ancestor (lifecycle
parent, up to init); any other change only by the operator or by an ancestor, and
one that widens a grant or a budget only by an ancestor that holds what it gives
(its own grants permit the tools; the tokens come out of its own account). Every
change is an event (set), and an agent held after a failure, or backing off, is
let go: the next `agent-run --all` tries it again."""

import os

from agentctl import limits, paths, settings
from agentctl.errors import Refused, UsageError
from agentctl.ids import INIT_ID
from agentctl.ops import budget, confinement, lifecycle, supervise
from agentctl.store import events, registry

EVENT_TEXT = 200        # of an old or new value, in its event


def stored(setting, value, old=None):
    """A parsed value (settings.Setting.parse) as the agents column holds it; limits
    given are put on top of the `old` ones, as a fork puts them on its parent's."""
    if setting.kind in settings.LISTS and isinstance(value, list):
        return "\n".join(dict.fromkeys(value)) or None
    if setting.kind == "flag":
        return 1 if value else None
    if setting.kind == "limits" and isinstance(value, dict):
        return limits.child(old, value)
    return value


def change(conn, agent, actor, values, tool_names=None):
    """Set `values` ({setting name: parsed value}) on `agent` (a row) for `actor` (a
    row, or None for the operator), in the caller's transaction; the names of the
    settings changed, in order. `tool_names()` gives the tools that exist (program
    tools, MCP servers) for judging a grant, as ops.lifecycle.fork takes it."""
    if agent["id"] == INIT_ID:
        raise Refused("init has no settings to change")
    if not registry.is_live(agent):
        raise Refused(f"{registry.label(agent)}: has exited")
    mine = actor is not None and actor["id"] == agent["id"]
    above = actor is None or actor["id"] in registry.ancestors(conn, agent["id"])
    if not (mine or above):
        raise Refused(f"{registry.label(actor)} may change the settings of itself and its "
                      "descendants only")
    new = {}
    for name, value in values.items():
        setting = settings.get(name)
        if setting.fixed:
            raise UsageError(f"{name} is set once, at fork")
        if actor is not None and setting.kind in ("dir", "paths"):
            confinement.visible(actor, value if isinstance(value, list) else [value],
                                setting.name)
        new[name] = _checked(conn, setting, stored(setting, value, agent[name]), agent)
    if "options" in new or "model" in new:
        model = new.get("model", agent["model"])
        new["options"] = lifecycle.check_options(new.get("options", agent["options"]), model)
    changed = []
    for name, value in new.items():
        setting = settings.get(name)
        old = setting.value(agent)      # (a budget with its unit)
        if value == old:
            continue
        if not settings.narrows(setting, old, value):
            _may_widen(conn, setting, agent, actor, above, old, value, tool_names)
        if setting.narrows == settings.CARVE:
            budget.resize(conn, registry.get(conn, agent["id"]), value)
        else:
            registry.update(conn, agent["id"], **{name: value})
        events.record(conn, agent["id"], "set", actor and actor["id"], setting=name,
                      old=_shown(setting, old), new=_shown(setting, value))
        changed.append(name)
    if changed:
        supervise.release(conn, registry.get(conn, agent["id"]), actor and actor["id"])
    return changed


def _checked(conn, setting, value, agent):
    """A value checked as a fork checks it."""
    if setting.kind == "dir" and not os.path.isdir(value):
        raise UsageError(f"{setting.name} {value}: not a directory")
    if setting.kind == "dir" and paths.refused_workdir(value):
        raise UsageError(f"{setting.name} {value}: {paths.refused_workdir(value)}: no "
                         "working directory can be")
    if setting.kind == "paths" and value:
        for path in value.split("\n"):
            if not os.path.exists(path):
                raise UsageError(f"{setting.name} {path}: no such file or directory")
    if setting.kind == "patterns" and value:
        from agentctl.ops import grants  # (start-up: fnmatch, only for a grant)
        grants.check(value.split("\n"), f"--{setting.name}")     # as agent-fork checks it
    if setting.kind == "count" and value is not None and setting.least and value < setting.least:
        raise UsageError(f"bad {setting.name}: {value} (want a whole number >= {setting.least})")
    return value


def _may_widen(conn, setting, agent, actor, above, old, new, tool_names):
    """Refused unless `actor` may make this change, which does not narrow."""
    who = "the operator" if actor is None else registry.label(actor)
    if not above:
        raise Refused(f"{registry.label(agent)}: {setting.name}: an agent may only narrow its "
                      "own settings; its ancestors or the operator may change them")
    if actor is None:
        return
    if setting.narrows == settings.OPERATOR:
        raise Refused(f"{setting.name}: only the operator gives it ({who} can't)")
    if setting.narrows in (settings.WITHIN, settings.OFF, settings.LOWER):
        # the sandbox: only what the ancestor's own tools have (for paths: its --ro
        # and its working directory)
        held = actor[setting.name]
        if setting.kind == "paths":
            held = "\n".join(p for p in (held, actor["cwd"]) if p) or None
        if not settings.narrows(setting, held, new):
            raise Refused(f"{setting.name}={setting.text(new)}: {who} holds "
                          f"{setting.text(actor[setting.name])} itself, so it can't give more")
    elif setting.narrows == settings.SUBSET and setting.kind == "patterns":
        if new and tool_names is not None:      # globs over tool names: grants judges them
            from agentctl.ops import grants  # (start-up: fnmatch, only for a grant)
            grants.check_fork(conn, actor, new, *tool_names())
    elif setting.narrows == settings.SUBSET:    # any other list: only what it holds itself
        if not settings.narrows(setting, actor[setting.name], new):
            raise Refused(f"{setting.name}={setting.text(new)}: {who} holds "
                          f"{setting.text(actor[setting.name])} itself, so it can't give more")
    elif setting.narrows == settings.MIN:
        held = actor[setting.name]
        if held is not None and (new is None or new > held):
            raise Refused(f"{setting.name}={settings.get(setting.name).text(new)}: {who} "
                          f"holds {held} itself, so it can't give more")
    elif setting.narrows == settings.CARVE and not budget.pays_for(conn, agent, actor):
        raise Refused(f"budget: {who} can't raise it: the tokens would not come out of its "
                      "own account (only the operator, or the ancestor whose account the "
                      "budget was carved from, may raise it)")


def _shown(setting, value):
    text = setting.text(value)
    return text if len(text) <= EVENT_TEXT else text[:EVENT_TEXT] + "..."
