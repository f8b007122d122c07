"""What an agent's settings may be, asked alike by a fork (ops.lifecycle.fork: a
child's settings within its parent's) and by agent-set (ops.configure: what an
ancestor may give): the one rule of giving, gives(), over settings.SETTINGS.

A child never gets more than its parent has: its working directory (the one place
its tools may write) inside its parent's, its read-only paths inside what its
parent's tools may read (its parent's --ro and --cwd), the hosts its tools may reach
within its parent's list (agentctl.hosts), the names of the read-only set it may
write (--rw) and the variables it gets (--env) among its parent's, its limits and its --max-children at most its
parent's, its grants within what its parent may use (ops.grants), its mail loop
check no looser than its parent's. --unconfined, the operator's power for its
tools, is given by the operator alone, and no child inherits it. A budget is
carved out of an account instead (ops.budget); --ask patterns only add approvals.

Paths are compared resolved (settings.resolved: a link is followed once, when the
path is given, and the sandbox refuses one that resolves otherwise later). A path an
agent names must be inside what its own tools can see, checked before whether it
exists: the answer is the same for a host path that exists and one that doesn't."""

import os

from agentctl import limits, paths, settings
from agentctl.errors import Refused, UsageError
from agentctl.ids import INIT_ID
from agentctl.ops import grants
from agentctl.store import registry


def _readable(row):
    """What `row`'s tools may read: its --ro and its working directory."""
    return settings.listed(row["ro"]) + ([row["cwd"]] if row["cwd"] else [])


def visible(actor, setting, given):
    """Refused unless each path `given` (resolved) is inside what `actor`'s (a row)
    tools can see: its --cwd and --ro (agent-set's check, before whether they exist)."""
    for path in given:
        if not settings.inside(path, _readable(actor)):
            raise Refused(f"{spelled(setting, path, False)}: outside what "
                          f"{registry.label(actor)}'s tools can see (its --cwd and --ro)")


def spelled(setting, text, option):
    """A value as a message names it: as agent-fork's option (--ro /srv) when `option`,
    else as agent-set's KEY=VALUE (ro=/srv)."""
    if option:
        return f"{setting.flag} {text}".rstrip()
    return f"{setting.name}={text}"


def stored(setting, value, old=None, option=True):
    """A value given (settings.Setting.given or .parse) as the agents column holds it:
    paths resolved, lists one a line, a flag 1 or None; limits given are put on top of
    the `old` ones, as a fork puts them on its parent's. Patterns are checked here
    (ops.grants.check); `option`: an error names the value as agent-fork's option
    (else as agent-set's KEY=VALUE)."""
    if setting.kind == "dir" and value is not None:
        return settings.resolved(value)
    if setting.kind == "paths" and isinstance(value, (list, tuple)):
        value = [settings.resolved(p) for p in value]
    if setting.kind == "patterns" and isinstance(value, (list, tuple)):
        return grants.check(list(value), lambda p: spelled(setting, repr(p), option),
                            deadlines=setting.narrows == settings.SUPERSET)
    if (setting.kind in settings.LISTS or setting.kind == "hosts") \
            and isinstance(value, (list, tuple)):
        return settings.listing(value)
    if setting.kind == "flag":
        return 1 if value else None
    if setting.kind == "limits" and isinstance(value, dict):
        return limits.child(old, value)
    return value


def checked(setting, value, option):
    """A stored value checked as a working value: a directory that is one and may be a
    working directory, paths that exist (a count's least is its parser's: Count,
    Setting.parse, the tool's schema). Whether its giver holds it is gives()."""
    if setting.kind == "dir" and value is not None:
        if not os.path.isdir(value):
            raise UsageError(f"{spelled(setting, value, option)}: not a directory")
        why = paths.refused_workdir(value)
        if why:
            raise UsageError(f"{spelled(setting, value, option)}: {why}: no working "
                             "directory can be")
    if setting.kind == "paths":
        for path in settings.listed(value):
            if not os.path.exists(path):
                raise UsageError(f"{spelled(setting, path, option)}: no such file or "
                                 "directory")
    return value


def gives(conn, setting, holder, value, *, option, by_operator, tool_names=None):
    """Refused unless `holder` (a row: the parent of a child forked, the ancestor that
    changes a descendant's settings; None: init, which holds every value) may give
    `value` (stored) of `setting`: only what it holds itself. `option`: name the value
    as agent-fork's option (else as agent-set's KEY=VALUE). `by_operator`: the operator
    gives it (only the operator gives --unconfined). `tool_names()` gives the tools that
    exist, for judging a grant (ops.grants.check_fork); None: not judged here."""
    if setting.narrows == settings.OPERATOR:
        if value and not by_operator:
            raise Refused(f"{spelled(setting, setting.text(value), option)}: only the "
                          "operator gives it (the agent acting, AGENT_ID, can't)")
        return
    if holder is None or setting.narrows in (None, settings.CARVE, settings.SUPERSET):
        return
    label = registry.label(holder)
    if setting.kind == "patterns":      # globs over tool names: grants judges them
        if value and tool_names is not None:
            grants.check_fork(conn, holder, value, *tool_names())
        return
    held = holder[setting.name]
    if setting.kind == "paths":
        held = settings.listing(_readable(holder))
    if settings.narrows(setting, held, value):
        return
    if setting.kind == "dir":
        raise Refused(f"{spelled(setting, value, option)}: outside {label}'s working "
                      f"directory {held} (its tools may write only there, so it can't "
                      "give more)")
    if setting.kind == "paths":
        path = next(p for p in settings.listed(value) if not settings.inside(p, settings.listed(held)))
        raise Refused(f"{spelled(setting, path, option)}: {label}'s tools can't read it "
                      "(its --cwd and --ro), so it can't give it")
    if setting.kind == "limits":
        key = limits.within(value, held)[0]
        raise Refused(f"{spelled(setting, key, option)}: above {label}'s "
                      f"({limits.shown(held) if held else 'the default'}), so it can't "
                      "give it")
    if setting.narrows == settings.HOSTS:
        if not held:
            raise Refused(f"{spelled(setting, setting.text(value), option)}: {label} has no "
                          "network, so it can't give it")
        wider = next(p for p in settings.listed(value)
                     if not settings.narrows(setting, held, p))
        raise Refused(f"{spelled(setting, wider, option)}: outside {label}'s list "
                      f"({setting.text(held)}), so it can't give it")
    if setting.narrows == settings.SOONER:
        raise Refused(f"{spelled(setting, setting.text(value), option)}: looser than "
                      f"{label}'s ({setting.text(held)}), so it can't give it")
    if setting.narrows == settings.MIN:
        raise Refused(f"{spelled(setting, setting.text(value), option)}: above "
                      f"{label}'s ({held}), so it can't give it")
    wider = sorted(set(settings.listed(value)) - set(settings.listed(held))) if setting.kind == "names" \
        else [""]
    raise Refused(f"{spelled(setting, wider[0], option)}: {label} doesn't have it, so it "
                  "can't give it")


def settle(conn, parent, given, values, actor, tool_names=None):
    """Check a new child's settings `given` (by fork's keyword; None: not given) against
    `parent`'s, and put them in `values` (by name) in their stored forms. `actor`: the
    acting agent's id, None for the operator. A value the same as the parent's, of a
    setting a child inherits, is taken as inherited (checked when it is used). The
    settings not given keep what their rules gave them."""
    holder = None if parent["id"] == INIT_ID else parent
    for setting in settings.SETTINGS:
        value = given.get(setting.key)
        if value is None or setting.narrows in (None, settings.CARVE):
            continue
        value = stored(setting, value, parent[setting.name])
        if not (setting.inherit and value == parent[setting.name]):    # (inherited)
            gives(conn, setting, holder, value, option=True, by_operator=actor is None,
                  tool_names=tool_names)
            checked(setting, value, option=True)
        values[setting.name] = value
