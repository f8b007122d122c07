"""Options that several programs share: the output flags, the number types, and
shell completion of agents and fixed words."""

import click

from agentctl import settings
from agentctl.clock import parse_duration
from agentctl.errors import AgentctlError
from agentctl.ids import short
from agentctl.store import db, registry


def output_options(fn=None, *, formats=("table", "tsv", "json", "jsonl"), default="table"):
    """The output flags of every listing program (agentctl(7), OUTPUT); agent-log's
    first format is text (a line per event) instead of a table."""
    if fn is None:
        return lambda fn: output_options(fn, formats=formats, default=default)
    others = [f for f in formats if f != default]
    for option in reversed((
        click.option("--format", "fmt", default=default, metavar="FORMAT",
                     type=click.Choice(list(formats)),
                     help=f"{default} (default), {', '.join(others[:-1])} or {others[-1]}."),
        click.option("-o", "columns", metavar="COLS",
                     help="Comma-separated columns to show, in that order."),
        click.option("-q", "--quiet", is_flag=True, help="Print ids only, one per line."),
        click.option("-0", "--null", is_flag=True,
                     help="End records with NUL instead of newline (implies -q "
                          "unless the format is tsv or jsonl)."),
        click.option("--no-headers", is_flag=True, help="Leave out the header line."),
    )):
        fn = option(fn)
    return fn


class Count(click.IntRange):
    """A whole-number option (tokens, versions, message ids): at least `least`,
    and no more than an SQLite INTEGER holds."""

    def __init__(self, least):
        super().__init__(min=least, max=db.INTEGER_MAX)


class Seconds(click.FloatRange):
    """A duration option: a number of seconds >= 0 (NaN is not one)."""

    def __init__(self):
        super().__init__(min=0)

    def convert(self, value, param, ctx):
        seconds = super().convert(value, param, ctx)
        if seconds != seconds:
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return seconds


class BudgetType(click.ParamType):
    """A budget option: a number of tokens, or dollars ('$2.50', 2.50usd): a
    settings.Budget."""

    name = "budget"

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        try:
            return settings.get("budget").parse(value)
        except AgentctlError as e:
            self.fail(str(e), param, ctx)


class Duration(click.ParamType):
    """A duration option: 90, 90s, 10m, 24h or 1d, in seconds."""

    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            return parse_duration(value)
        except AgentctlError as e:
            self.fail(str(e), param, ctx)


def setting_options(fn):
    """agent-fork's options for the settings, one per settings.SETTINGS entry, each
    declared there (its spelling, metavar and help); each is passed by the setting's
    name, None (or an empty tuple) when not given: Setting.given() makes it a value.
    A list of hosts (--net) takes its value optionally (alone: every public host), and
    --no-NAME, passed as no_NAME, gives none."""
    for setting in reversed(settings.SETTINGS):
        kwargs = {"metavar": setting.metavar, "help": setting.help}
        if setting.kind == "hosts":
            fn = click.option(f"--no-{setting.name}", f"no_{setting.name}", is_flag=True,
                              help="Its tools reach no host (no network).")(fn)
            kwargs.update(is_flag=False, flag_value="*", default=None)   # (*: all)
        elif setting.kind == "flag":
            kwargs.update(is_flag=True, default=None)
        elif setting.repeated:
            kwargs["multiple"] = True
        else:
            kwargs["type"] = _TYPES.get(setting.kind, lambda s: None)(setting)
        if setting.kind == "choice":    # (checked by the fork: its words for a bad one)
            kwargs["shell_complete"] = complete_words(setting.choices)
        fn = click.option(*setting.spellings, setting.name, **kwargs)(fn)
    return fn


_TYPES = {"count": lambda s: Count(s.least), "duration": lambda s: Duration(),
          "budget": lambda s: BudgetType()}


def complete_agents(ctx, param, incomplete):
    """Shell completion: names and ids of agents not yet dead."""
    from click.shell_completion import CompletionItem  # (start-up: 0.4 ms, only to complete a word)
    try:
        conn = db.connect(ctx.params.get("db_path"), create=False)
        rows = registry.not_dead(conn)
    except Exception:
        return []
    items = []
    for agent_id, name, role in rows:
        for word in (name, agent_id):
            if word and word.startswith(incomplete):
                items.append(CompletionItem(word, help=f"{role} {short(agent_id)}"))
    return items


def complete_words(words):
    """Shell completion from a fixed list (signals, roles), any case."""
    def complete(ctx, param, incomplete):
        return [w for w in words if w.lower().startswith(incomplete.lower())]
    return complete


