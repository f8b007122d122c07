"""Changing an agent's settings after its fork (agent-set(1)), driven by their one
declaration (agentctl.settings): no rule here names a setting, but for the kinds
that need one (a budget is carved through ops/budget.py, grants are judged by
ops/grants.py, model options against the model).

Who may change what: a change that narrows what the agent may do (settings.narrows)
may be made by the operator, by the agent itself or by an ancestor (lifecycle
parent, up to init); any other change only by the operator or by an ancestor, and
one that widens a grant or a budget only by an ancestor that holds what it gives
(its own grants permit the tools; the tokens come out of its own account). Every
change is an event (set), and an agent held (after a failure, in a mail loop) or
backing off is let go: the next `agent-run --all` tries it again."""

from agentctl import settings
from agentctl.errors import Refused, UsageError
from agentctl.ids import INIT_ID
from agentctl.text import cut
from agentctl.ops import authority, budget, confinement, lifecycle, supervise
from agentctl.store import events, registry
from agentctl.workspace import layers

EVENT_TEXT = 200        # of an old or new value, in its event


def change(conn, agent, actor, values, tool_names=None):
    """Set `values` ({setting name: parsed value}) on `agent` (a row) for `actor` (a
    row, or None for the operator), in the caller's transaction; the names of the
    settings changed, in order. `tool_names()` gives the tools that exist (program
    tools, MCP servers) for judging a grant, as ops.lifecycle.fork takes it."""
    if agent["id"] == INIT_ID:
        raise Refused("init has no settings to change")
    if not registry.is_live(agent):
        raise Refused(f"{registry.label(agent)}: has exited")
    authority.check(conn, actor, agent, "change the settings of")
    above = actor is None or actor["id"] != agent["id"]     # (an ancestor, then)
    new = {}
    for name, value in values.items():
        setting = settings.get(name)
        if setting.fixed:
            raise UsageError(f"{name} is set once, at fork")
        if actor is not None and setting.kind in ("dir", "paths"):
            confinement.visible(actor, setting,
                                value if isinstance(value, list) else [value])
        new[name] = confinement.checked(
            setting, confinement.stored(setting, value, agent[name], option=False),
            option=False)
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
        layers.settled(conn, registry.get(conn, agent["id"]))   # (its layer, as it is now)
    return changed


def _may_widen(conn, setting, agent, actor, above, old, new, tool_names):
    """Refused unless `actor` may make this change, which does not narrow."""
    who = "the operator" if actor is None else registry.label(actor)
    if not above:
        raise Refused(f"{registry.label(agent)}: {setting.name}: an agent may only narrow its "
                      "own settings; its ancestors or the operator may change them")
    if actor is None:
        return
    if setting.narrows == settings.CARVE and not budget.pays_for(conn, agent, actor):
        raise Refused(f"budget: {who} can't raise it: the tokens would not come out of its "
                      "own account (only the operator, or the ancestor whose account the "
                      "budget was carved from, may raise it)")
    confinement.gives(conn, setting, actor, new, option=False, by_operator=False,
                      tool_names=tool_names)


def _shown(setting, value):
    return cut(setting.text(value), EVENT_TEXT)
